package workload

import (
	"context"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"iter"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Config configures a Generator. The zero value is valid: no load, no changes.
type Config struct {
	// Seed makes the workload reproducible: equal configs produce byte-identical messages.
	Seed int64
	// Changes is the number of CDC data records written after the full load. Default 0.
	Changes int
	// LoadRows is the number of rows of each table's full load. Default 0.
	LoadRows int
	// TaskID is the DMS task id written to control records. Default: 26 base32 characters
	// derived from Seed.
	TaskID string
	// Start is the time of the first record (metadata.timestamp). Default 2025-06-01T00:00:00Z.
	Start time.Time
	// TimestampTZ must equal the sink's timestamptz setting: it selects the Iceberg type of
	// DATETIME columns in the expected state. Default false (timestamp).
	TimestampTZ bool
	// SchemaChanges runs the schema-change scenario during the CDC phase (see the package
	// documentation): columns are added, renamed, widened and dropped, tables are created and
	// one is dropped, with ALTER control records carrying the full table-def. Default false; the
	// default workload is unchanged by this field.
	SchemaChanges bool
	// BadRecords injects this many records the service must dead-letter, spread over the CDC
	// phase and rotating over malformed JSON, records DMS would never send, values that do not
	// convert, and updates of a keyless table. Expected.DeadLetters lists them. Default 0.
	BadRecords int
	// PartialUpdates writes CDC updates of keyed tables the way Oracle without ALL COLUMNS
	// supplemental logging does: data holds the key columns and only the columns whose value the
	// update changed (a column changed to NULL is an explicit null); the columns it leaves out
	// keep their previous values. The before-image is as without it ({} or the old key of a
	// primary-key change). Inserts, loads and deletes are unchanged, and so are the sequence of
	// operations, every value and the expected state (the full rows): the service must
	// reconstruct them, which it does with sink.absent_columns keep. Default false; the default
	// workload is unchanged by this field.
	PartialUpdates bool
	// FullBeforeImages writes every CDC update's before-image as MySQL does with DMS's
	// BeforeImageSettings ColumnFilter all: the old row's every column, whether the update changed
	// the key or not (without it the before-image is pk-only: {} when the key did not change, the
	// old key when it did). Operations, values and the expected state are those of the same
	// Config without it. Default false; the default workload is unchanged by this field.
	FullBeforeImages bool
	// Layout selects the partition keys (see Layout). Default LayoutTable, the workload of
	// earlier versions.
	Layout Layout
	// Reload reloads one table in the middle of the CDC phase, after an outage in which rows
	// were deleted and updated at the source without records (see Reload). Default none; the
	// workload without it is unchanged by this field.
	Reload Reload
	// Resends sends this many CDC inserts of the keyless table a second time, byte for byte with
	// the same partition key, 1 to 40 records later: a DMS re-send (a PutRecords retry, or a task
	// restarted from an earlier source position), which reaches the stream under a new sequence
	// number. Only inserts that carry the transaction details (IncludeTransactionDetails) are
	// re-sent, about every other one until the count is reached; the expected state does not
	// change (the service must keep one copy: sink.keyless_identity auto). Message.Resend marks
	// the copies. Not with SchemaChanges (a late copy would carry columns the table no longer
	// has) nor with a Reload of the keyless table (a late copy of a row deleted during its
	// outage would bring it back). Default 0; the workload without it is unchanged by this field.
	Resends int
}

func (c Config) withDefaults() Config {
	if c.TaskID == "" {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(c.Seed)*0x9E3779B97F4A7C15)
		binary.BigEndian.PutUint64(b[8:], uint64(c.Seed)^0xD1B54A32D192ED03)
		c.TaskID = base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])[:26]
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Changes < 0 {
		return fmt.Errorf("workload: Changes must not be negative, got %d", c.Changes)
	}
	if c.LoadRows < 0 {
		return fmt.Errorf("workload: LoadRows must not be negative, got %d", c.LoadRows)
	}
	if c.BadRecords < 0 {
		return fmt.Errorf("workload: BadRecords must not be negative, got %d", c.BadRecords)
	}
	if c.BadRecords > 0 && c.Changes <= c.BadRecords {
		return fmt.Errorf("workload: BadRecords (%d) needs more Changes (%d) to spread over", c.BadRecords, c.Changes)
	}
	if c.Resends < 0 {
		return fmt.Errorf("workload: Resends must not be negative, got %d", c.Resends)
	}
	if c.Resends > 0 && (c.SchemaChanges || c.Reload.Table == Events) {
		return fmt.Errorf("workload: Resends cannot be combined with SchemaChanges or a Reload of %s", Events)
	}
	if c.Layout < LayoutTable || c.Layout > LayoutPrimaryKey {
		return fmt.Errorf("workload: unknown Layout %d", c.Layout)
	}
	return c.Reload.validate(c)
}

// Message is one Kinesis record as DMS would put it.
type Message struct {
	// PartitionKey is the Kinesis partition key.
	PartitionKey string
	// Data is the DMS JSON document.
	Data []byte
	// Table is "schema.table" of the record ("." + awsdms_apply_exceptions for DMS's own
	// table); informational, not part of the Kinesis record.
	Table string
	// Op is metadata.operation (create-table, load, insert, update, delete).
	Op string
	// KeyChange marks an update that changes the primary key.
	KeyChange bool
	// OldPartitionKey is, for a key change, the Kinesis partition key of the old key's records
	// (under LayoutPrimaryKey another key than PartitionKey, usually on another shard); "" for
	// every other record. A sender that writes records of different keys concurrently must not
	// send a key change before the old key's earlier records are written.
	OldPartitionKey string
	// Keyless marks a data record of a table without a primary key: a load or an insert (the
	// generator never updates or deletes such a row, bad records aside), whose place among its
	// partition key's records (the table's) does not change the table.
	Keyless bool
	// DeadLetter is the dead-letter class (decode, convert, keyless_change) of an injected bad
	// record, which the service must dead-letter; "" for every other record.
	DeadLetter string
	// Reload marks the create-table and load records of the mid-stream reload (Config.Reload).
	Reload bool
	// Resend marks the second copy of a re-sent record (Config.Resends).
	Resend bool
}

// Generator produces the workload of a Config. Its methods are safe for concurrent use; each
// iteration runs its own model.
type Generator struct {
	cfg Config
}

// New returns a Generator for cfg. It panics if cfg is invalid (see Config.Validate).
func New(cfg Config) *Generator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return &Generator{cfg: cfg.withDefaults()}
}

// Config returns the configuration with defaults applied.
func (g *Generator) Config() Config { return g.cfg }

// Messages returns the finite workload in the order it must be written: create-table control
// records, the full load of every table (interleaved between tables), then cfg.Changes CDC
// records. Every iteration yields the same sequence.
func (g *Generator) Messages() iter.Seq[Message] {
	return func(yield func(Message) bool) {
		r := newRun(g.cfg, false)
		r.produce(context.Background(), yield)
	}
}

// Stream returns an endless workload for demos: the same start as Messages, then CDC records
// until ctx is cancelled or the caller stops iterating. It is pull-based, so the caller sets the
// pace. Table sizes stay bounded; the rows of the keyless table are not kept.
func (g *Generator) Stream(ctx context.Context) iter.Seq[Message] {
	return func(yield func(Message) bool) {
		r := newRun(g.cfg, true)
		r.produce(ctx, yield)
	}
}

// Expected returns the final state of the finite workload (what Messages produces). It runs the
// model to the end; the error reports a value that pkg/dms cannot convert, which would be a bug
// in this generator or in the type mapping.
func (g *Generator) Expected() (Expected, error) {
	r := newRun(g.cfg, false)
	r.produce(context.Background(), func(Message) bool { return true })
	return r.expected()
}

// FinalRows returns the final rows of every modelled table of the finite workload, keyed by
// "schema.table": values exactly as last written to the stream, in table-def column order. Rows
// of keyed tables are in no particular order; keyless rows are in emission order.
func (g *Generator) FinalRows() map[string][][]change.Value {
	r := newRun(g.cfg, false)
	r.produce(context.Background(), func(Message) bool { return true })
	out := map[string][][]change.Value{}
	for _, t := range r.tables {
		out[t.def.source()] = t.finalRows()
	}
	return out
}

// run is one pass of the model.
type run struct {
	cfg     Config
	rng     *rand.Rand
	endless bool
	now     int64 // µs since the epoch
	tables  []*tableState
	buf     []byte
	// sc is the schema-change and bad-record scenario (nil unless configured).
	sc *scenario
	// rl is the mid-stream reload (nil unless configured); reloading is its table while its
	// load runs, which then gets no CDC record.
	rl        *reloadRun
	reloading *tableState

	txID      int64
	prevTxID  int64
	prevTxRec int64
	lsn       uint64
	// resends are the copies waiting to be sent again (Config.Resends), resent how many were
	// scheduled.
	resends []resend
	resent  int
}

// resend is a record to send again after due more records.
type resend struct {
	m   Message
	due int
}

func newRun(cfg Config, endless bool) *run {
	r := &run{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6d73326963656265)),
		endless: endless,
		now:     cfg.Start.UnixMicro(),
	}
	for _, d := range tableDefs() {
		t := &tableState{def: d, nextID: 1}
		if d.key != nil {
			t.rows, t.pos = map[string][]change.Value{}, map[string]int{}
		}
		if d.name == OrderItems {
			t.orders = map[int64]*orderInfo{}
			t.nextID = 1_000_000_000_000 // order ids beyond int32
		}
		r.tables = append(r.tables, t)
	}
	r.txID = 1000 + r.rng.Int64N(1_000_000)
	r.lsn = uint64(0x2_0000_0000) + uint64(r.rng.Int64N(1<<30))
	if cfg.SchemaChanges || cfg.BadRecords > 0 {
		r.sc = newScenario(cfg)
	}
	r.rl = newReloadRun(cfg.Reload)
	return r
}

// tick advances the model clock and returns metadata.timestamp for the next record: the clock
// plus jitter, since DMS builds messages on several threads and the field is not monotonic.
func (r *run) tick() string {
	r.now += 50 + r.rng.Int64N(1500)
	ts := r.now + r.rng.Int64N(600) - 300
	t := time.UnixMicro(ts).UTC()
	return t.Format("2006-01-02T15:04:05.000000Z")
}

func (r *run) produce(ctx context.Context, yield func(Message) bool) {
	emit := func(m Message) bool {
		if ctx.Err() != nil {
			return false
		}
		return yield(m)
	}
	// Control records: DMS's own table first, then the modelled tables.
	if !emit(r.createTable(applyExceptionsDef(), "")) {
		return
	}
	for _, t := range r.tables {
		if !emit(r.createTable(t.def, Schema)) {
			return
		}
	}
	if !r.load(emit) {
		return
	}
	for n := 0; r.endless || n < r.cfg.Changes; {
		if r.sc != nil && !r.sc.step(r, n, emit) {
			return
		}
		if r.rl != nil && !r.rl.step(r, n, emit) {
			return
		}
		limit := 1 + r.rng.IntN(4)
		if !r.endless {
			limit = min(limit, r.cfg.Changes-n)
		}
		if !r.transaction(limit, emit) {
			return
		}
		n += limit
	}
	if r.rl != nil {
		r.rl.finish(r, emit)
	}
	r.resendRest(emit)
}

func (r *run) createTable(d *tableDef, schema string) Message {
	cols := &object{}
	for _, c := range d.columns {
		o := &object{}
		o.set("type", c.Type)
		if c.Length > 0 {
			o.set("length", c.Length)
		}
		if c.Precision > 0 {
			o.set("precision", c.Precision)
			o.set("scale", c.Scale)
		}
		o.set("nullable", c.Nullable)
		cols.set(c.Name, o)
	}
	td := &object{}
	td.set("columns", cols)
	if d.key != nil {
		td.set("primary-key", d.key)
	}
	meta := &object{}
	meta.set("timestamp", r.tick())
	meta.set("record-type", "control")
	meta.set("operation", "create-table")
	meta.set("partition-key-type", pkTaskID)
	meta.set("partition-key-value", r.cfg.TaskID)
	meta.set("schema-name", schema)
	meta.set("table-name", d.name)
	doc := &object{}
	doc.set("control", (&object{}).set("table-def", td))
	doc.set("metadata", meta)
	// Kinesis partition key of a table-level control record: TaskId.schema.table (observed);
	// DMS's own table has no schema, so it gets the task-level key.
	pk := r.cfg.TaskID
	if schema != "" {
		pk += "." + schema + "." + d.name
	}
	return Message{PartitionKey: pk, Data: r.encode(doc), Table: schema + "." + d.name, Op: "create-table"}
}

func (r *run) encode(doc *object) []byte {
	pretty := r.rng.IntN(2) == 0
	r.buf = encode(r.buf[:0], doc, pretty)
	return append([]byte(nil), r.buf...)
}

// load emits the full load: every table's rows, interleaved at random as parallel load
// threads would.
func (r *run) load(emit func(Message) bool) bool {
	remaining := make([]int, len(r.tables))
	total := 0
	for i := range r.tables {
		remaining[i] = r.cfg.LoadRows
		total += r.cfg.LoadRows
	}
	for ; total > 0; total-- {
		pick := r.rng.IntN(total)
		i := 0
		for pick >= remaining[i] {
			pick -= remaining[i]
			i++
		}
		remaining[i]--
		t := r.tables[i]
		row := r.newRow(t)
		r.upsert(t, row)
		if !emit(r.dataMessage(t, "load", row, nil, nil, nil, false)) {
			return false
		}
	}
	return true
}

// tx is the transaction a CDC record belongs to.
type tx struct {
	id       int64
	details  bool
	commitTS string
	lsn      uint64
	record   int64
}

// Table choice weights for CDC records: customers, order_items, events, types.
var tableWeights = []int{30, 35, 20, 15}

func (r *run) transaction(n int, emit func(Message) bool) bool {
	r.txID += 1 + r.rng.Int64N(40)
	r.lsn += uint64(0x100 + r.rng.IntN(0x4000))
	x := &tx{
		id: r.txID,
		// IncludeTransactionDetails is modelled per transaction so that records with and
		// without the details both occur.
		details:  r.rng.IntN(2) == 0,
		commitTS: time.UnixMicro(r.now).UTC().Truncate(time.Second).Format("2006-01-02T15:04:05.000000Z"),
		lsn:      r.lsn,
	}
	for range n {
		x.record++
		t := r.pickTable()
		m := r.change(t, x)
		if !emit(m) {
			return false
		}
		r.prevTxID, r.prevTxRec = x.id, x.record
		if !r.resendDue(emit) {
			return false
		}
		if r.resent < r.cfg.Resends && t.def.key == nil && x.details && m.Op == "insert" && r.rng.IntN(2) == 0 {
			m.Resend = true
			r.resends = append(r.resends, resend{m: m, due: 1 + r.rng.IntN(40)})
			r.resent++
		}
	}
	return true
}

// resendDue counts one record against the waiting re-sends and sends those that are due.
func (r *run) resendDue(emit func(Message) bool) bool {
	kept := r.resends[:0]
	for _, rs := range r.resends {
		if rs.due--; rs.due > 0 {
			kept = append(kept, rs)
			continue
		}
		if !emit(rs.m) {
			return false
		}
	}
	r.resends = kept
	return true
}

// resendRest sends the re-sends still waiting when the workload ends.
func (r *run) resendRest(emit func(Message) bool) {
	for _, rs := range r.resends {
		if !emit(rs.m) {
			return
		}
	}
	r.resends = nil
}

// pickTable chooses the table of the next CDC record, never the table being reloaded.
func (r *run) pickTable() *tableState {
	if r.sc != nil {
		return r.sc.pick(r)
	}
	total := 0
	for i, t := range r.tables {
		if t != r.reloading {
			total += tableWeights[i]
		}
	}
	w := r.rng.IntN(total)
	for i, t := range r.tables {
		if t == r.reloading {
			continue
		}
		if w < tableWeights[i] {
			return t
		}
		w -= tableWeights[i]
	}
	panic("workload: no table to pick")
}

// chooseOp picks an operation for a keyed table, steering its size towards the load size.
func (r *run) chooseOp(t *tableState, pkChanges bool) string {
	n, target := t.size(), max(r.cfg.LoadRows, 50)
	if n == 0 {
		return "insert"
	}
	ins, upd, pkc, del := 25, 45, 0, 20
	if pkChanges {
		pkc = 10
	}
	switch {
	case n > 2*target:
		ins, del = 10, 35
	case n < target/2:
		ins, del = 40, 5
	}
	w := r.rng.IntN(ins + upd + pkc + del)
	switch {
	case w < ins:
		return "insert"
	case w < ins+upd:
		return "update"
	case w < ins+upd+pkc:
		return "pk-change"
	}
	return "delete"
}

func (r *run) randomRow(t *tableState) []change.Value {
	return t.rows[t.keys[r.rng.IntN(len(t.keys))]]
}

// change produces one CDC record for table t and applies it to the model.
func (r *run) change(t *tableState, x *tx) Message {
	if t.def.key == nil {
		row := r.newRow(t)
		r.upsert(t, row)
		return r.dataMessage(t, "insert", row, nil, nil, x, false)
	}
	switch op := r.chooseOp(t, t.def.name == Customers); op {
	case "insert":
		row := r.newRow(t)
		r.upsert(t, row)
		return r.dataMessage(t, "insert", row, nil, nil, x, false)
	case "update":
		old := r.randomRow(t)
		row := r.updated(t, old)
		var omit []bool
		// An NCLOB that stays NULL is sometimes left out of the image: absent and null then
		// mean the same whether the consumer reads absence as NULL or as "unchanged".
		if t.def.name == OrderItems && old[oNote].Kind == change.KindNull && row[oNote].Kind == change.KindNull && r.rng.IntN(2) == 0 {
			omit = make([]bool, len(row))
			omit[oNote] = true
		}
		if r.cfg.PartialUpdates {
			// Leaves the note out as well when it stays NULL. The random draw above is made
			// in both modes, so the partial workload keeps the full one's operations and values.
			omit = t.unchanged(old, row)
		}
		before := &object{}
		if r.cfg.FullBeforeImages {
			before = t.image(old)
		}
		r.upsert(t, row)
		return r.dataMessage(t, "update", row, before, omit, x, false)
	case "pk-change":
		old := r.randomRow(t)
		row := r.updated(t, old)
		copy(row[:1], r.newKey(t)) // customers: the key is the first column
		var omit []bool
		if r.cfg.PartialUpdates {
			// The old key's row is what the absent columns keep (before-image below).
			omit = t.unchanged(old, row)
		}
		_, oldKey := r.dataPartition(t, "update", old)
		r.remove(t, old)
		r.upsert(t, row)
		before := (&object{}).set(t.def.columns[cID].Name, old[cID])
		if r.cfg.FullBeforeImages {
			before = t.image(old)
		}
		m := r.dataMessage(t, "update", row, before, omit, x, true)
		m.OldPartitionKey = oldKey
		return m
	default: // delete
		old := r.randomRow(t)
		r.remove(t, old)
		img := old
		if t.def.name == Customers {
			// PostgreSQL-style delete (default replica identity, IncludeNullAndEmpty=true):
			// the key plus nulls.
			img = make([]change.Value, len(old))
			for i := range img {
				img[i] = null
			}
			img[cID] = old[cID]
		}
		return r.dataMessage(t, "delete", img, nil, nil, x, false)
	}
}

// image is a full before-image of row: every column the source still has, by name.
func (t *tableState) image(row []change.Value) *object {
	o := &object{}
	for i, c := range t.def.columns {
		if !t.def.isDropped(i) {
			o.set(c.Name, row[i])
		}
	}
	return o
}

func (r *run) upsert(t *tableState, row []change.Value) {
	if t.def.dropped != nil {
		for i, d := range t.def.dropped {
			if d {
				row[i] = null // the source no longer has the column: the record leaves it out
			}
		}
	}
	if t.def.key == nil {
		if !r.endless {
			t.keyless = append(t.keyless, row)
		} else {
			t.nextID++ // count only
		}
		return
	}
	t.put(row)
}

func (r *run) remove(t *tableState, row []change.Value) { t.remove(row) }

// dataMessage builds a data record. before is the before-image object (updates), omit marks the
// columns left out of data (nil: none), x the transaction (nil for load).
func (r *run) dataMessage(t *tableState, op string, row []change.Value, before *object, omit []bool, x *tx, keyChange bool) Message {
	data := &object{}
	for i, c := range t.def.columns {
		if (omit == nil || !omit[i]) && !t.def.isDropped(i) {
			data.set(c.Name, row[i])
		}
	}
	meta := &object{}
	meta.set("timestamp", r.tick())
	meta.set("record-type", "data")
	meta.set("operation", op)
	pkType, pk := r.dataPartition(t, op, row)
	meta.set("partition-key-type", pkType)
	if pkType == pkPrimaryKey {
		meta.set("partition-key-value", pk)
	}
	meta.set("schema-name", Schema)
	meta.set("table-name", t.def.name)
	if x != nil {
		meta.set("transaction-id", x.id)
		if x.details {
			meta.set("transaction-record-id", x.record)
			if r.prevTxID != 0 {
				meta.set("prev-transaction-id", r.prevTxID)
				meta.set("prev-transaction-record-id", r.prevTxRec)
			}
			meta.set("commit-timestamp", x.commitTS)
			meta.set("stream-position", lsnText(x.lsn)+"."+strconv.FormatInt(x.record, 10)+"."+lsnText(x.lsn))
		}
	}
	doc := &object{}
	doc.set("data", data)
	if before != nil {
		doc.set("before-image", before)
	}
	doc.set("metadata", meta)
	return Message{PartitionKey: pk, Data: r.encode(doc), Table: t.def.source(), Op: op, KeyChange: keyChange, Keyless: t.def.key == nil}
}

// lsnText renders a PostgreSQL LSN the way DMS's stream-position shows it: 00000002/7C007178.
func lsnText(l uint64) string {
	return fmt.Sprintf("%08X/%08X", l>>32, l&0xFFFFFFFF)
}

// newKey returns key values for a new row of t that are not live: usually fresh, sometimes a
// recently deleted key (re-insert after delete).
func (r *run) newKey(t *tableState) []change.Value {
	if len(t.deleted) > 0 && r.rng.IntN(10) == 0 {
		k := t.deleted[r.rng.IntN(len(t.deleted))]
		parts := make([]string, len(k))
		for i, v := range k {
			parts[i] = v.Text
		}
		if !t.live(strings.Join(parts, "|")) {
			return append([]change.Value(nil), k...)
		}
	}
	if t.def.name == OrderItems {
		if len(t.keys) > 0 && r.rng.IntN(3) == 0 {
			// another line of an existing order
			row := r.randomRow(t)
			id, _ := strconv.ParseInt(row[oOrderID].Text, 10, 64)
			line := t.orders[id].maxLine + 1
			for t.live(strconv.FormatInt(id, 10) + "|" + strconv.FormatInt(line, 10)) {
				line++
			}
			return []change.Value{num(id), num(line)}
		}
		id := t.nextID
		t.nextID++
		return []change.Value{num(id), num(1)}
	}
	id := t.nextID
	t.nextID++
	return []change.Value{num(id)}
}

// newRow returns a complete new row of t with a fresh key.
func (r *run) newRow(t *tableState) []change.Value {
	row := make([]change.Value, len(t.def.columns))
	if t.def.key != nil {
		for i, v := range r.newKey(t) {
			row[t.def.keyIdx[i]] = v
		}
	}
	for i := range row {
		if !t.isKey(i) {
			row[i] = r.value(t, i, row)
		}
	}
	return row
}

// updated returns a copy of old with one to three non-key columns given new values (or, rarely,
// none: an UPDATE that changed nothing still produces a record).
func (r *run) updated(t *tableState, old []change.Value) []change.Value {
	row := append([]change.Value(nil), old...)
	if r.rng.IntN(20) == 0 {
		return row
	}
	for range 1 + r.rng.IntN(3) {
		i := r.rng.IntN(len(row))
		if !t.isKey(i) {
			row[i] = r.value(t, i, row)
		}
	}
	return row
}
