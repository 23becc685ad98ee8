package workload

import (
	"encoding/base64"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Tables created by the schema-change scenario.
const (
	Promotions = "promotions"
	Sessions   = "sessions"
)

// Column indexes of the scenario's tables and added columns.
const (
	cTier    = 6 // customers.tier, added
	eSource  = 3 // events.source, added
	pID      = 0
	pCode    = 1
	pDisc    = 2
	pValid   = 3
	pMaxUses = 4 // added by change-columns
	sSID     = 0
	sCust    = 1
	sStarted = 2
	sPages   = 3
)

// ExpectedDeadLetter is a record the service must dead-letter.
type ExpectedDeadLetter struct {
	// Class is the dead-letter class: decode, convert or keyless_change.
	Class string `json:"class"`
	// Table is the source "schema.table" the service attributes it to ("" for records that do
	// not decode).
	Table string `json:"table,omitempty"`
	// Payload is the Kinesis record data, base64 (it is not always UTF-8).
	Payload string `json:"payload_base64"`
}

// milestone is one schema change of the scenario, applied once the CDC phase has emitted at
// least at records.
type milestone struct {
	at    int
	apply func(s *scenario, r *run) []Message
}

// scenario drives the schema changes and the injected bad records. In LayoutTable its control
// records use the Kinesis partition key of their table's data ("shop.<table>", schema-table
// partitioning), so a consumer reads them in order with that table's data: the only order in
// which the outcome is deterministic without a cross-shard ordering guard (data read before the
// control record describing it is covered by the service's unit tests). In the other layouts
// they go by the task's key, as DMS writes them.
type scenario struct {
	cfg        Config
	milestones []milestone
	next       int
	bad        []int // CDC positions of the bad records, ascending
	nextBad    int
	deadLetter []ExpectedDeadLetter
	widened    bool // types: c_int4 long, c_real4 double, c_num5 decimal(10,0)
	discWide   bool // promotions.discount decimal(7,2)
	active     map[string]bool
}

func newScenario(cfg Config) *scenario {
	s := &scenario{cfg: cfg, active: map[string]bool{}}
	n := cfg.Changes
	if cfg.SchemaChanges {
		frac := func(p int) int { return n * p / 100 }
		s.milestones = []milestone{
			{frac(10), (*scenario).createPromotions},
			{frac(20), (*scenario).addTier},
			{frac(30), (*scenario).createSessions},
			{frac(40), (*scenario).renameName},
			{frac(45), (*scenario).addSource},
			{frac(50), (*scenario).widenTypes},
			{frac(60), (*scenario).dropEmail},
			{frac(70), (*scenario).dropSessions},
			{frac(80), (*scenario).changePromotions},
		}
	}
	for k := 1; k <= cfg.BadRecords; k++ {
		s.bad = append(s.bad, n*k/(cfg.BadRecords+1))
	}
	return s
}

// step emits the milestones and bad records due at CDC position n.
func (s *scenario) step(r *run, n int, emit func(Message) bool) bool {
	for s.next < len(s.milestones) && s.milestones[s.next].at <= n {
		for _, m := range s.milestones[s.next].apply(s, r) {
			if !emit(m) {
				return false
			}
		}
		s.next++
	}
	for s.nextBad < len(s.bad) && s.bad[s.nextBad] <= n {
		m := s.badRecord(r, s.nextBad)
		s.deadLetter = append(s.deadLetter, ExpectedDeadLetter{Class: m.DeadLetter, Table: m.Table,
			Payload: base64.StdEncoding.EncodeToString(m.Data)})
		if m.DeadLetter == "decode" {
			s.deadLetter[len(s.deadLetter)-1].Table = ""
		}
		if !emit(m) {
			return false
		}
		s.nextBad++
	}
	return true
}

// Table choice weights in the scenario: customers, order_items, events, types, then the
// scenario's tables while they exist.
var scenarioWeights = map[string]int{Customers: 25, OrderItems: 30, Events: 15, Types: 10, Promotions: 10, Sessions: 10}

func (s *scenario) pick(r *run) *tableState {
	total := 0
	for _, t := range r.tables {
		if s.live(r, t) {
			total += scenarioWeights[t.def.name]
		}
	}
	w := r.rng.IntN(total)
	for _, t := range r.tables {
		if !s.live(r, t) {
			continue
		}
		if w < scenarioWeights[t.def.name] {
			return t
		}
		w -= scenarioWeights[t.def.name]
	}
	panic("workload: no table to pick")
}

func (s *scenario) live(r *run, t *tableState) bool {
	if t == r.reloading {
		return false
	}
	switch t.def.name {
	case Promotions, Sessions:
		return s.active[t.def.name]
	}
	return true
}

func (r *run) table(name string) *tableState {
	for _, t := range r.tables {
		if t.def.name == name {
			return t
		}
	}
	panic("workload: no table " + name)
}

// control builds a control record for table t with its current table-def (dropped columns left
// out), on r.tableControlKey.
func (r *run) control(t *tableState, op string) Message {
	def := *t.def
	def.columns = nil
	for i, c := range t.def.columns {
		if !t.def.isDropped(i) {
			def.columns = append(def.columns, c)
		}
	}
	m := r.createTable(&def, Schema)
	if op != "create-table" {
		m.Data = []byte(strings.Replace(string(m.Data), `"create-table"`, `"`+op+`"`, 1))
	}
	if op == "drop-table" {
		meta := &object{}
		meta.set("timestamp", r.tick())
		meta.set("record-type", "control")
		meta.set("operation", op)
		meta.set("partition-key-type", pkTaskID)
		meta.set("partition-key-value", r.cfg.TaskID)
		meta.set("schema-name", Schema)
		meta.set("table-name", t.def.name)
		doc := &object{}
		doc.set("control", &object{})
		doc.set("metadata", meta)
		m.Data = r.encode(doc)
	}
	m.PartitionKey = r.tableControlKey(t.def)
	m.Op = op
	return m
}

func (s *scenario) newTable(r *run, d *tableDef) *tableState {
	t := &tableState{def: d, nextID: 1, rows: map[string][]change.Value{}, pos: map[string]int{}}
	d.dropped = make([]bool, len(d.columns))
	r.tables = append(r.tables, t)
	s.active[d.name] = true
	return t
}

func (s *scenario) createPromotions(r *run) []Message {
	t := s.newTable(r, newTableDef(Promotions, pkSchemaTable, []string{"id"},
		col("id", "INT4", 0, 0, 0, false),
		col("code", "WSTRING", 16, 0, 0, true),
		col("discount", "NUMERIC", 0, 5, 2, true),
		col("valid_until", "DATE", 0, 0, 0, true),
	))
	return []Message{r.control(t, "create-table")}
}

func (s *scenario) createSessions(r *run) []Message {
	t := s.newTable(r, newTableDef(Sessions, pkSchemaTable, []string{"sid"},
		col("sid", "INT8", 0, 0, 0, false),
		col("customer_id", "INT4", 0, 0, 0, true),
		col("started", "DATETIME", 0, 0, 0, true),
		col("pages", "INT4", 0, 0, 0, true),
	))
	return []Message{r.control(t, "create-table")}
}

// addColumn appends a column to t's definition; existing rows get NULL.
func addColumn(t *tableState, c change.ColumnDef) {
	t.def.columns = append(t.def.columns, c)
	if t.def.dropped == nil {
		t.def.dropped = make([]bool, len(t.def.columns)-1)
	}
	t.def.dropped = append(t.def.dropped, false)
	for k, row := range t.rows {
		t.rows[k] = append(row, null)
	}
	for i, row := range t.keyless {
		t.keyless[i] = append(row, null)
	}
}

func (s *scenario) addTier(r *run) []Message {
	t := r.table(Customers)
	addColumn(t, col("tier", "WSTRING", 16, 0, 0, true))
	return []Message{r.control(t, "add-column")}
}

func (s *scenario) addSource(r *run) []Message {
	t := r.table(Events)
	addColumn(t, col("source", "WSTRING", 16, 0, 0, true))
	return []Message{r.control(t, "add-column")}
}

func (s *scenario) renameName(r *run) []Message {
	t := r.table(Customers)
	t.def.columns[cName].Name = "full_name"
	return []Message{r.control(t, "rename-column")}
}

func (s *scenario) widenTypes(r *run) []Message {
	t := r.table(Types)
	t.def.columns[tInt4].Type = "INT8"
	t.def.columns[tReal4].Type = "REAL8"
	t.def.columns[tNum5].Precision = 10
	s.widened = true
	return []Message{r.control(t, "column-type-change")}
}

func (s *scenario) dropEmail(r *run) []Message {
	t := r.table(Customers)
	t.def.dropped[cEmail] = true
	return []Message{r.control(t, "drop-column")}
}

func (s *scenario) dropSessions(r *run) []Message {
	t := r.table(Sessions)
	s.active[Sessions] = false
	return []Message{r.control(t, "drop-table")}
}

func (s *scenario) changePromotions(r *run) []Message {
	t := r.table(Promotions)
	t.def.columns[pDisc].Precision = 7
	s.discWide = true
	addColumn(t, col("max_uses", "INT4", 0, 0, 0, true))
	return []Message{r.control(t, "change-columns")}
}

// value returns values for the scenario's tables and columns, and wider values for widened
// columns; ok is false when the default generator decides.
func (s *scenario) value(r *run, t *tableState, i int, row []change.Value) (change.Value, bool) {
	rng := r.rng
	if t.def.isDropped(i) {
		return null, true
	}
	switch t.def.name {
	case Customers:
		if i == cTier {
			return pickStr(rng, "bronze", "silver", "gold", ""), true
		}
	case Events:
		if i == eSource {
			return pickStr(rng, "web", "ios", "android", ""), true
		}
	case Types:
		if !s.widened || rng.IntN(3) != 0 {
			return change.Value{}, false
		}
		switch i {
		case tInt4:
			return num(int64(rng.Uint32()) + 1<<32), true // beyond INT4 now
		case tReal4:
			return numText(quarter(rng.Int64N(1<<40) - 1<<39)), true // beyond float's exact range
		case tNum5:
			return num(rng.Int64N(19_999_999_999) - 9_999_999_999), true
		}
	case Promotions:
		switch i {
		case pCode:
			return str("PROMO-" + strconv.Itoa(rng.IntN(100000))), true
		case pDisc:
			if s.discWide && rng.IntN(2) == 0 {
				return decimal(rng, 5, 2, false), true
			}
			return decimal(rng, 3, 2, false), true
		case pValid:
			if rng.IntN(5) == 0 {
				return null, true
			}
			return str(randDate(rng)), true
		case pMaxUses:
			return num(int64(rng.IntN(1000))), true
		}
	case Sessions:
		switch i {
		case sCust:
			return num(int64(1 + rng.IntN(5000))), true
		case sStarted:
			return str(datetime(r.now-rng.Int64N(86_400_000_000), 6)), true
		case sPages:
			return num(int64(rng.IntN(50))), true
		}
	}
	return change.Value{}, false
}

func pickStr(rng *rand.Rand, vs ...string) change.Value {
	v := vs[rng.IntN(len(vs))]
	if v == "" {
		return null
	}
	return str(v)
}

// badRecord returns the k-th injected bad record.
func (s *scenario) badRecord(r *run, k int) Message {
	meta := func(table, op string) *object {
		m := &object{}
		m.set("timestamp", r.tick())
		m.set("record-type", "data")
		m.set("operation", op)
		m.set("partition-key-type", pkSchemaTable)
		m.set("schema-name", Schema)
		m.set("table-name", table)
		m.set("transaction-id", r.txID)
		return m
	}
	msg := func(table, class string, data []byte) Message {
		return Message{PartitionKey: Schema + "." + table, Data: data, Table: Schema + "." + table, Op: "bad", DeadLetter: class}
	}
	cust := r.table(Customers)
	switch k % 8 {
	case 0: // truncated JSON
		d := &object{}
		d.set("data", (&object{}).set("id", num(cust.nextID)))
		d.set("metadata", meta(Customers, "insert"))
		b := r.encode(d)
		return msg(Customers, "decode", b[:len(b)*2/3])
	case 1: // a value that does not convert: NUMERIC(12,2) as text
		row := r.newRow(cust)
		row[cBalance] = str("twelve")
		data := &object{}
		for i, c := range cust.def.columns {
			if !cust.def.isDropped(i) {
				data.set(c.Name, row[i])
			}
		}
		d := (&object{}).set("data", data)
		d.set("metadata", meta(Customers, "insert"))
		return msg(Customers, "convert", r.encode(d))
	case 2: // an operation DMS does not send
		d := (&object{}).set("data", (&object{}).set("id", num(1)))
		d.set("metadata", meta(Customers, "upsert"))
		return msg(Customers, "decode", r.encode(d))
	case 3: // an update of the keyless events table
		ev := r.table(Events)
		row := r.newRow(ev)
		data := &object{}
		for i, c := range ev.def.columns {
			if !ev.def.isDropped(i) {
				data.set(c.Name, row[i])
			}
		}
		d := (&object{}).set("data", data)
		d.set("before-image", &object{})
		d.set("metadata", meta(Events, "update"))
		return msg(Events, "keyless_change", r.encode(d))
	case 4: // a data record without data
		return msg(OrderItems, "decode", r.encode((&object{}).set("metadata", meta(OrderItems, "delete"))))
	case 5: // a KPL aggregated record
		b := append([]byte{0xF3, 0x89, 0x9A, 0xC2}, []byte("\x0a\x0bshop.types\x1a")...)
		return msg(Types, "decode", append(b, byte(r.rng.IntN(256))))
	case 6: // an impossible date in an update of an existing types row
		t := r.table(Types)
		if len(t.keys) == 0 {
			return msg(Customers, "decode", []byte(`["no","types","row"]`+"\n"))
		}
		old := r.randomRow(t)
		data := &object{}
		for i, c := range t.def.columns {
			v := old[i]
			if i == tDate {
				v = str("2024-02-30")
			}
			if !t.def.isDropped(i) {
				data.set(c.Name, v)
			}
		}
		d := (&object{}).set("data", data)
		d.set("before-image", &object{})
		d.set("metadata", meta(Types, "update"))
		return msg(Types, "convert", r.encode(d))
	default: // not a JSON object
		return msg(Customers, "decode", []byte(`["not","a","dms","record"]`+"\n"))
	}
}
