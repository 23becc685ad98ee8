package workload

import (
	"strconv"
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// tableState is the model of one table: its live rows, plus what the generator needs to choose
// keys.
type tableState struct {
	def *tableDef
	// rows holds the live rows of a keyed table by key text; keys lists the same keys for
	// random choice, pos is each key's index in keys.
	rows map[string][]change.Value
	keys []string
	pos  map[string]int
	// keyless holds the rows of a keyless table in emission order (when kept).
	keyless [][]change.Value
	// deleted remembers recently deleted keys (bounded) so that some inserts reuse them.
	deleted [][]change.Value
	nextID  int64
	// orders tracks order_items per order id.
	orders map[int64]*orderInfo
}

type orderInfo struct {
	live    int
	maxLine int64
}

func (t *tableState) keyOf(row []change.Value) string {
	if len(t.def.keyIdx) == 1 {
		return row[t.def.keyIdx[0]].Text
	}
	parts := make([]string, len(t.def.keyIdx))
	for i, k := range t.def.keyIdx {
		parts[i] = row[k].Text
	}
	return strings.Join(parts, "|")
}

func (t *tableState) put(row []change.Value) {
	k := t.keyOf(row)
	if _, ok := t.rows[k]; !ok {
		t.pos[k] = len(t.keys)
		t.keys = append(t.keys, k)
		if t.orders != nil {
			t.order(row).live++
		}
	}
	t.rows[k] = row
}

func (t *tableState) order(row []change.Value) *orderInfo {
	id, _ := strconv.ParseInt(row[oOrderID].Text, 10, 64)
	line, _ := strconv.ParseInt(row[oLineNo].Text, 10, 64)
	o := t.orders[id]
	if o == nil {
		o = &orderInfo{}
		t.orders[id] = o
	}
	o.maxLine = max(o.maxLine, line)
	return o
}

func (t *tableState) remove(row []change.Value) {
	k := t.keyOf(row)
	i, ok := t.pos[k]
	if !ok {
		panic("workload: removing a key that is not live: " + k)
	}
	last := t.keys[len(t.keys)-1]
	t.keys[i] = last
	t.pos[last] = i
	t.keys = t.keys[:len(t.keys)-1]
	delete(t.pos, k)
	delete(t.rows, k)
	if t.orders != nil {
		id, _ := strconv.ParseInt(row[oOrderID].Text, 10, 64)
		if o := t.orders[id]; o != nil {
			if o.live--; o.live <= 0 {
				delete(t.orders, id)
			}
		}
	}
	keyVals := make([]change.Value, len(t.def.keyIdx))
	for i, ki := range t.def.keyIdx {
		keyVals[i] = row[ki]
	}
	if len(t.deleted) >= 256 {
		t.deleted = t.deleted[1:]
	}
	t.deleted = append(t.deleted, keyVals)
}

func (t *tableState) live(k string) bool { _, ok := t.rows[k]; return ok }

func (t *tableState) size() int {
	if t.def.key == nil {
		return len(t.keyless)
	}
	return len(t.keys)
}

// unchanged marks the non-key columns of an update whose value is the one old had (written
// exactly so: same JSON kind and text), which a partial update image (Config.PartialUpdates)
// leaves out. Key columns are always written.
func (t *tableState) unchanged(old, row []change.Value) []bool {
	omit := make([]bool, len(row))
	for i := range row {
		omit[i] = !t.isKey(i) && row[i] == old[i]
	}
	return omit
}

func (t *tableState) isKey(i int) bool {
	for _, k := range t.def.keyIdx {
		if k == i {
			return true
		}
	}
	return false
}
