package sink

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// custDef is a table whose updates arrive as Oracle partial images (absent_columns keep).
var custDef = TableConfig{PrimaryKey: []string{"id"}, AbsentColumns: AbsentKeep, Columns: []ColumnSpec{
	{Name: "id", Type: "INT4"}, {Name: "name", Type: "WSTRING"}, {Name: "amount", Type: "NUMERIC", Precision: 10, Scale: 2},
	{Name: "city", Type: "WSTRING"}}}

func cols(c ...change.Column) []change.Column { return c }

// A partial update committed in a later batch than the row keeps the columns it leaves out; an
// explicit null still sets NULL; a partial image completed from the table completes the next.
func TestPartialUpdateKeepsStoredColumns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.cust": custDef}))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
	h.submit("s0", 2, change.OpLoad, "cust", cols(col("id", "2"), col("name", "'bob'"), col("amount", "20"), col("city", "'rome'")), nil)
	h.submit("s0", 3, change.OpLoad, "cust", cols(col("id", "3"), col("name", "'cy'"), col("amount", "30"), col("city", "'kyiv'")), nil)
	h.flush()
	h.submit("s0", 4, change.OpUpdate, "cust", cols(col("id", "1"), col("name", "'anna'")), []change.Column{})
	h.submit("s0", 5, change.OpUpdate, "cust", cols(col("id", "2"), col("city", "null")), nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "cust")
	eq(t, rows,
		"id=1,name=anna,amount=10.00,city=oslo",
		"id=2,name=bob,amount=20.00,city=null",
		"id=3,name=cy,amount=30.00,city=kyiv")
	h.submit("s0", 6, change.OpUpdate, "cust", cols(col("id", "1"), col("amount", "11.5")), nil)
	h.flush()
	h.close()
	rows, _ = scanRows(t, h.cat, "cust")
	eq(t, rows,
		"id=1,name=anna,amount=11.50,city=oslo",
		"id=2,name=bob,amount=20.00,city=null",
		"id=3,name=cy,amount=30.00,city=kyiv")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

// Partial images inside one batch merge in arrival order with the images before them, and with
// the table for what none of them carries.
func TestPartialUpdatesChainInOneBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.cust": custDef}))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "2"), col("name", "'bob'"), col("amount", "20"), col("city", "'rome'")), nil)
	h.submit("s0", 2, change.OpLoad, "cust", cols(col("id", "3"), col("name", "'cy'"), col("amount", "30"), col("city", "'kyiv'")), nil)
	h.submit("s0", 3, change.OpLoad, "cust", cols(col("id", "4"), col("name", "'di'"), col("amount", "40"), col("city", "'lima'")), nil)
	h.flush()
	// 1: full image, then two partial updates of different columns.
	h.submit("s0", 10, change.OpInsert, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
	h.submit("s0", 11, change.OpUpdate, "cust", cols(col("id", "1"), col("name", "'anna'")), nil)
	h.submit("s0", 12, change.OpUpdate, "cust", cols(col("id", "1"), col("amount", "12")), nil)
	// 2 (stored): delete, insert, partial update: the update keeps the inserted values.
	h.submit("s0", 13, change.OpDelete, "cust", cols(col("id", "2")), nil)
	h.submit("s0", 14, change.OpInsert, "cust", cols(col("id", "2"), col("name", "'bo'"), col("amount", "21")), nil)
	h.submit("s0", 15, change.OpUpdate, "cust", cols(col("id", "2"), col("city", "'pisa'")), nil)
	// 3 (stored): deleted, then a partial update: nothing to keep.
	h.submit("s0", 16, change.OpDelete, "cust", cols(col("id", "3")), nil)
	h.submit("s0", 17, change.OpUpdate, "cust", cols(col("id", "3"), col("name", "'cy2'")), nil)
	// 4 (stored): two partial updates; city comes from the table.
	h.submit("s0", 18, change.OpUpdate, "cust", cols(col("id", "4"), col("name", "'dee'")), nil)
	h.submit("s0", 19, change.OpUpdate, "cust", cols(col("id", "4"), col("amount", "41")), nil)
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "cust")
	eq(t, rows,
		"id=1,name=anna,amount=12.00,city=oslo",
		"id=2,name=bo,amount=21.00,city=pisa",
		"id=3,name=cy2,amount=null,city=null",
		"id=4,name=dee,amount=41.00,city=lima")
	if n := len(tbl.Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots, want 2", n)
	}
}

// A partial update that changes the primary key moves the row and keeps its other columns, from
// the table or from an earlier image of the old key in the batch.
func TestPartialUpdateWithKeyChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.cust": custDef}))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "5"), col("name", "'eve'"), col("amount", "50"), col("city", "'bern'")), nil)
	h.flush()
	h.submit("s0", 2, change.OpUpdate, "cust", cols(col("id", "50"), col("name", "'eva'")), cols(col("id", "5")))
	h.submit("s0", 3, change.OpInsert, "cust", cols(col("id", "6"), col("name", "'fay'"), col("amount", "60"), col("city", "'graz'")), nil)
	h.submit("s0", 4, change.OpUpdate, "cust", cols(col("id", "60")), cols(col("id", "6")))
	// A partial update of the new key after the move keeps what the move kept.
	h.submit("s0", 5, change.OpUpdate, "cust", cols(col("id", "50"), col("amount", "55")), nil)
	h.flush()
	h.close()
	rows, _ := scanRows(t, h.cat, "cust")
	eq(t, rows,
		"id=50,name=eva,amount=55.00,city=bern",
		"id=60,name=fay,amount=60.00,city=graz")
}

// Composite keys are looked up with a filter on the first key column and matched exactly.
func TestPartialUpdateCompositeKey(t *testing.T) {
	t.Parallel()
	def := TableConfig{PrimaryKey: []string{"region", "id"}, AbsentColumns: AbsentKeep, Columns: []ColumnSpec{
		{Name: "region", Type: "WSTRING"}, {Name: "id", Type: "INT8"}, {Name: "name", Type: "WSTRING"}, {Name: "qty", Type: "INT4"}}}
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.stock": def}))
	h.submit("s0", 1, change.OpLoad, "stock", cols(col("region", "'eu'"), col("id", "1"), col("name", "'a'"), col("qty", "1")), nil)
	h.submit("s0", 2, change.OpLoad, "stock", cols(col("region", "'eu'"), col("id", "2"), col("name", "'b'"), col("qty", "2")), nil)
	h.submit("s0", 3, change.OpLoad, "stock", cols(col("region", "'us'"), col("id", "1"), col("name", "'c'"), col("qty", "3")), nil)
	h.flush()
	h.submit("s0", 4, change.OpUpdate, "stock", cols(col("region", "'eu'"), col("id", "2"), col("qty", "20")), nil)
	h.submit("s0", 5, change.OpUpdate, "stock", cols(col("region", "'us'"), col("id", "1"), col("name", "'c2'")), nil)
	h.flush()
	h.close()
	rows, _ := scanRows(t, h.cat, "stock")
	eq(t, rows,
		"region=eu,id=1,name=a,qty=1",
		"region=eu,id=2,name=b,qty=20",
		"region=us,id=1,name=c2,qty=3")
}

// A partial update of a key the table never had is written with NULL for what it leaves out,
// and is not a dead letter.
func TestPartialUpdateOfUnknownKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.cust": custDef}))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
	h.flush()
	h.submit("s0", 2, change.OpUpdate, "cust", cols(col("id", "99"), col("name", "'ghost'")), nil)
	h.submit("s0", 3, change.OpUpdate, "cust", cols(col("id", "98"), col("amount", "1")), cols(col("id", "97")))
	h.flush()
	h.close()
	rows, _ := scanRows(t, h.cat, "cust")
	eq(t, rows,
		"id=1,name=ann,amount=10.00,city=oslo",
		"id=98,name=null,amount=1.00,city=null",
		"id=99,name=ghost,amount=null,city=null")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
	if got := h.ack.N.Load(); got != 3 {
		t.Fatalf("acknowledged %d, want 3", got)
	}
}

// The default (null) leaves absent columns NULL; the sink-wide keep applies to tables that do
// not say otherwise.
func TestAbsentColumnsModes(t *testing.T) {
	t.Parallel()
	load := func(h *harness, tbl string) {
		h.submit("s0", 1, change.OpLoad, tbl, cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
		h.flush()
		h.submit("s0", 2, change.OpUpdate, tbl, cols(col("id", "1"), col("name", "'anna'")), nil)
		h.flush()
	}
	nullDef := custDef
	nullDef.AbsentColumns = ""
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.cust": nullDef}))
	load(h, "cust")
	h.close()
	rows, _ := scanRows(t, h.cat, "cust")
	eq(t, rows, "id=1,name=anna,amount=null,city=null")

	explicit := nullDef
	explicit.AbsentColumns = AbsentNull
	h = newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.AbsentColumns = AbsentKeep
		c.Tables = map[string]TableConfig{"shop.kept": nullDef, "shop.nulled": explicit}
	}))
	load(h, "kept")
	load(h, "nulled")
	h.close()
	rows, _ = scanRows(t, h.cat, "kept")
	eq(t, rows, "id=1,name=anna,amount=10.00,city=oslo")
	rows, _ = scanRows(t, h.cat, "nulled")
	eq(t, rows, "id=1,name=anna,amount=null,city=null")
}

// The values a partial image keeps come from the snapshot its commit is staged on: when another
// worker changed the row first, the conflict refreshes the table and the lookup is repeated.
func TestPartialUpdateLookupFollowsConflict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.cust": custDef}))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
	h.flush()
	other := newHarness(t, dir, withTables(map[string]TableConfig{"shop.cust": custDef}))
	other.submit("s1", 7, change.OpUpdate, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "70"), col("city", "'bonn'")), nil)
	other.flush()
	other.close()
	// h's table is stale: its first lookup reads amount 10 and city oslo, the commit conflicts.
	h.submit("s0", 2, change.OpUpdate, "cust", cols(col("id", "1"), col("name", "'anna'")), nil)
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "cust")
	eq(t, rows, "id=1,name=anna,amount=70.00,city=bonn")
	if n := len(tbl.Metadata().Snapshots()); n != 3 {
		t.Fatalf("%d snapshots, want 3", n)
	}
}

// Excluded columns are never absent; columns dropped at the source are not kept (they are
// NULL in new images, as in inserts); columns added later are.
func TestPartialUpdateAndSchemaEvolution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.AbsentColumns = AbsentKeep
		c.Tables = map[string]TableConfig{"shop.items": {ExcludeColumns: []string{"secret"}}}
	}))
	h.ctl("c", 1, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4 secret:WSTRING")
	h.data("d", 1, "items", change.OpInsert, cols(col("id", "1"), col("name", "'a'"), col("qty", "2"), col("secret", "'x'")), nil)
	h.flush()
	h.data("d", 2, "items", change.OpUpdate, cols(col("id", "1"), col("name", "'a2'")), nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=a2,qty=2")
	h.ctl("c", 2, "items", "add-column", "id*:INT4 name:WSTRING qty:INT4 secret:WSTRING tier:WSTRING")
	h.data("d", 3, "items", change.OpUpdate, cols(col("id", "1"), col("tier", "'gold'")), nil)
	h.flush()
	h.ctl("c", 3, "items", "drop-column", "id*:INT4 qty:INT4 secret:WSTRING tier:WSTRING")
	h.data("d", 4, "items", change.OpUpdate, cols(col("id", "1"), col("qty", "3")), nil)
	h.flush()
	h.close()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=null,qty=3,tier=gold")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

// Converting a row allocates nothing of its own (its values come from a chunk per 32 rows,
// datums, which AllocsPerRun's integer average rounds away) in the default null mode; keep adds
// one for a partial image only.
func TestConvertAllocations(t *testing.T) {
	types := []iceberg.Type{iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.Int64}
	l := &layout{names: []string{"id", "name", "qty"}, types: types,
		byName: map[string]int{"id": 0, "name": 1, "qty": 2}, keyIdx: []int{0}, live: []int{1, 2}}
	full := &change.Event{Op: change.OpUpdate, Columns: cols(col("id", "1"), col("name", "'a'"), col("qty", "2"))}
	partial := &change.Event{Op: change.OpUpdate, Columns: cols(col("id", "1"), col("name", "'a'"))}
	for _, c := range []struct {
		keep bool
		ev   *change.Event
		want float64
	}{{false, full, 0}, {false, partial, 0}, {true, full, 0}, {true, partial, 1}} {
		pl := &planner{tableScope: &tableScope{set: &settings{keepAbsent: c.keep}}, st: &targetTable{lay: l}}
		var r row
		idx := l.columnIndexes(c.ev.Columns, nil)
		got := testing.AllocsPerRun(100, func() { r, _ = pl.convert(c.ev, idx) })
		if got != c.want {
			t.Errorf("keep=%v, %d columns: %v allocations per convert, want %v", c.keep, len(c.ev.Columns), got, c.want)
		}
		if wantPartial := c.keep && c.ev == partial; (r.absent != nil) != wantPartial || (wantPartial && (len(r.absent) != 1 || r.absent[0] != 2)) {
			t.Errorf("keep=%v: absent %v", c.keep, r.absent)
		}
		if r.vals[2] != (dms.Datum{Null: true}) && c.ev == partial {
			t.Errorf("absent column converted to %+v", r.vals[2])
		}
	}
}

// The lookup filter is built for every key type DMS columns map to, and the stored row is
// matched exactly.
func TestPartialUpdateKeyTypes(t *testing.T) {
	t.Parallel()
	tz := true
	cases := []struct {
		typ    string
		k1, k2 string
		tz     bool
	}{
		{"NUMERIC(12,2)", "1.50", "2.25", false},
		{"UINT8", "18446744073709551615", "1", false},
		{"INT8", "9007199254740993", "-1", false},
		{"DATETIME", "'2024-02-29T13:45:12.123456Z'", "'2024-03-01T00:00:00Z'", false},
		{"DATETIME", "'2024-02-29T13:45:12.123456Z'", "'2024-03-01T00:00:00Z'", true},
		{"DATE", "'2024-02-29'", "'2024-03-01'", false},
		{"TIME", "'13:45:12'", "'01:02:03.5'", false},
		{"BYTES", "'0xABCD'", "'0x01'", false},
		{"BOOLEAN", "'t'", "'f'", false},
		{"WSTRING", "'é'", "''", false},
	}
	tables := map[string]TableConfig{}
	for i, c := range cases {
		tc := TableConfig{}
		if c.tz {
			tc.TimestampTZ = &tz
		}
		tables[fmt.Sprintf("shop.k%d", i)] = tc
	}
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.AbsentColumns = AbsentKeep
		c.TimeType = "time"
		c.Tables = tables
	}))
	for i, c := range cases {
		name := fmt.Sprintf("k%d", i)
		h.ctl("c", i+1, name, "create-table", "k*:"+c.typ+" a:WSTRING b:INT4")
		h.data("d", 10*i+1, name, change.OpLoad, cols(col("k", c.k1), col("a", "'a1'"), col("b", "1")), nil)
		h.data("d", 10*i+2, name, change.OpLoad, cols(col("k", c.k2), col("a", "'a2'"), col("b", "2")), nil)
	}
	h.flush()
	for i, c := range cases {
		h.data("d", 10*i+3, fmt.Sprintf("k%d", i), change.OpUpdate, cols(col("k", c.k2), col("a", "'new'")), nil)
	}
	h.flush()
	h.close()
	for i, c := range cases {
		rows, _ := scanRows(t, h.cat, fmt.Sprintf("k%d", i))
		var rest []string
		for _, r := range rows {
			_, after, _ := strings.Cut(r, ",")
			rest = append(rest, after)
		}
		sort.Strings(rest)
		if got := strings.Join(rest, " "); got != "a=a1,b=1 a=new,b=2" {
			t.Errorf("%s (timestamptz %v): rows %v", c.typ, c.tz, rows)
		}
	}
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

type partialRecorder struct {
	nopMetrics
	mu                          sync.Mutex
	fromBatch, fromTable, unkey int
}

func (r *partialRecorder) PartialImages(_ string, fromBatch, fromTable, notFound int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fromBatch += fromBatch
	r.fromTable += fromTable
	r.unkey += notFound
}

// Each flush reports its partial images by where their absent columns came from, so that an
// operator sees updates of keys the table does not have (NULL written).
func TestPartialImagesAreCounted(t *testing.T) {
	t.Parallel()
	rec := &partialRecorder{}
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.Tables = map[string]TableConfig{"shop.cust": custDef}
	}), withOptions(WithMetrics(rec)))
	h.submit("s0", 1, change.OpLoad, "cust", cols(col("id", "1"), col("name", "'ann'"), col("amount", "10"), col("city", "'oslo'")), nil)
	h.flush()
	h.submit("s0", 2, change.OpUpdate, "cust", cols(col("id", "1"), col("name", "'anna'")), nil)                                           // from the table
	h.submit("s0", 3, change.OpInsert, "cust", cols(col("id", "5"), col("name", "'eve'"), col("amount", "5"), col("city", "'riga'")), nil) // full
	h.submit("s0", 4, change.OpUpdate, "cust", cols(col("id", "5"), col("city", "'oslo'")), nil)                                           // from the batch
	h.submit("s0", 5, change.OpUpdate, "cust", cols(col("id", "99"), col("name", "'ghost'")), nil)                                         // unknown key
	h.flush()
	h.close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.fromBatch != 1 || rec.fromTable != 1 || rec.unkey != 1 {
		t.Fatalf("partial images counted from batch %d, table %d, none %d; want 1, 1, 1", rec.fromBatch, rec.fromTable, rec.unkey)
	}
}
