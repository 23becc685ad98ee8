package dms

import (
	"errors"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Record is the normalised form of one DMS message: what the decoder made of it and, when a
// table-def of its table was seen earlier in the same input, the Iceberg type and converted
// value of every column exactly as the sink would store them. `dms2iceberg decode` prints one
// Record per message as a JSON line; the golden tests compare the same lines.
type Record struct {
	// N is the 1-based index of the message in its input; Line the line it starts on.
	N    int `json:"n"`
	Line int `json:"line,omitempty"`
	// Error is set when the message could not be decoded; nothing else is set then.
	Error *RecordError `json:"error,omitempty"`
	// RecordType is data or control; Op the operation (load, insert, update, delete, or the
	// control operation as written).
	RecordType string   `json:"record_type,omitempty"`
	Op         string   `json:"op,omitempty"`
	Schema     string   `json:"schema,omitempty"`
	Table      string   `json:"table,omitempty"`
	Meta       *Meta    `json:"meta,omitempty"`
	Columns    []Field  `json:"columns,omitempty"`
	Before     []Field  `json:"before,omitempty"`
	Control    *CtlInfo `json:"control,omitempty"`
	// KeyChange is set for an update whose before-image holds another key than its data: the
	// sink deletes the old key and writes the new one in the same snapshot. Key columns the
	// before-image leaves out (Oracle sends only changed columns) are taken from the data.
	KeyChange *KeyChange `json:"key_change,omitempty"`
	Warnings  []string   `json:"warnings,omitempty"`
	event     *change.Event
}

// Event returns the decoded event behind r (nil for errors). It is valid until the next
// Normalize call.
func (r *Record) Event() *change.Event { return r.event }

// KeyChange is a primary-key change: the old and new key values (canonical text).
type KeyChange struct {
	Columns []string `json:"columns"`
	From    []string `json:"from"`
	To      []string `json:"to"`
}

// RecordError describes a message the decoder rejected.
type RecordError struct {
	// Kind is ErrorKind.String() (syntax, empty, not_object, missing_metadata, ...).
	Kind   string `json:"kind"`
	Offset int    `json:"offset"`
	Reason string `json:"reason"`
}

// Meta is the metadata of a record; empty fields are left out.
type Meta struct {
	Timestamp               string `json:"timestamp,omitempty"`
	PartitionKeyType        string `json:"partition-key-type,omitempty"`
	PartitionKeyValue       string `json:"partition-key-value,omitempty"`
	TransactionID           string `json:"transaction-id,omitempty"`
	TransactionRecordID     string `json:"transaction-record-id,omitempty"`
	PrevTransactionID       string `json:"prev-transaction-id,omitempty"`
	PrevTransactionRecordID string `json:"prev-transaction-record-id,omitempty"`
	CommitTimestamp         string `json:"commit-timestamp,omitempty"`
	StreamPosition          string `json:"stream-position,omitempty"`
}

// Field is one column value of an image.
type Field struct {
	Name string `json:"name"`
	// Kind is the JSON kind: null, number, string, bool or json; Text the literal (numbers
	// exactly as written, strings unescaped, JSON objects and arrays as compact text).
	Kind string `json:"kind"`
	Text string `json:"text"`
	// Key marks a primary-key column of the known table-def.
	Key bool `json:"key,omitempty"`
	// Type is the Iceberg type of the column (from the known table-def); Value the canonical
	// text of the converted value (dms.Render), absent for null; Error why the value does not
	// convert (the sink dead-letters such a record).
	Type  string  `json:"type,omitempty"`
	Value *string `json:"value,omitempty"`
	Error string  `json:"error,omitempty"`
	// Rule is the column's configured rule (TableRules): excluded (not stored: no type, no
	// value), hashed or masked (Value is the stored hash or mask).
	Rule string `json:"rule,omitempty"`
}

// CtlInfo describes a control record.
type CtlInfo struct {
	TableDef *DefInfo `json:"table_def,omitempty"`
	// Changes says what the sink does to the target table's schema (see PlanSchema), judged
	// against the table as the earlier messages of the same input left it.
	Changes []string `json:"changes,omitempty"`
}

// DefInfo is a table-def with the vocabulary detected and each column's Iceberg type.
type DefInfo struct {
	Vocabulary string    `json:"vocabulary"`
	PrimaryKey []string  `json:"primary_key"`
	Columns    []ColInfo `json:"columns"`
}

// ColInfo is one table-def column.
type ColInfo struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Length    int    `json:"length,omitempty"`
	Precision int    `json:"precision,omitempty"`
	Scale     int    `json:"scale,omitempty"`
	Nullable  bool   `json:"nullable"`
	Iceberg   string `json:"iceberg"`
	Error     string `json:"error,omitempty"`
	// Rule is the column's configured rule, as in Field; an excluded column has no Iceberg type.
	Rule string `json:"rule,omitempty"`
}

// Normalizer decodes messages and keeps the table-defs of the control records it has seen, so
// that later data records of the same table are shown typed. It is not safe for concurrent use.
type Normalizer struct {
	dec    *Decoder
	opts   TypeOptions
	tables map[string]*simTable
	rules  func(src string) TableRules
	p      fastjson.Parser
	n      int
}

// simTable is the schema the sink's target table would have after the messages seen so far.
type simTable struct {
	cols []ColumnState
	// dom holds the Domain of every column of the latest table-def (ColumnDomain).
	dom map[string]Domain
}

// setDomains records the domains of td's columns.
func (t *simTable) setDomains(td *change.TableDef) {
	v := DetectVocabulary(td.Columns)
	t.dom = make(map[string]Domain, len(td.Columns))
	for _, c := range td.Columns {
		if dm := ColumnDomain(c, v); dm != DomainAny {
			t.dom[c.Name] = dm
		}
	}
}

func (t *simTable) column(name string) (ColumnState, bool) {
	for _, c := range t.cols {
		if c.Name == name {
			return c, true
		}
	}
	return ColumnState{}, false
}

func (t *simTable) keys() []string {
	var out []string
	for _, c := range t.cols {
		if c.Key {
			out = append(out, c.Name)
		}
	}
	return out
}

// NewNormalizer returns a Normalizer decoding with cfg and mapping types with opts.
func NewNormalizer(cfg Config, opts TypeOptions) *Normalizer {
	return &Normalizer{dec: NewDecoder(cfg), opts: opts, tables: map[string]*simTable{}}
}

var kindNames = [...]string{change.KindNull: "null", change.KindNumber: "number",
	change.KindString: "string", change.KindBool: "bool", change.KindJSON: "json"}

// Normalize decodes one message. msg is not retained.
func (n *Normalizer) Normalize(msg []byte) Record {
	n.n++
	rec := Record{N: n.n}
	ev := &change.Event{}
	if err := n.dec.Decode(msg, ev); err != nil {
		rec.Error = recordError(err)
		return rec
	}
	rec.event = ev
	rec.RecordType, rec.Schema, rec.Table = ev.Meta.RecordType, ev.Schema, ev.Table
	rec.Meta = recordMeta(ev.Meta)
	src := ev.Schema + "." + ev.Table
	if ev.Op == change.OpControl {
		n.control(&rec, ev, src)
	} else {
		n.data(&rec, ev, msg, src)
	}
	return rec
}

// recordError describes a decode error.
func recordError(err error) *RecordError {
	var de *DecodeError
	if errors.As(err, &de) {
		return &RecordError{Kind: de.Kind.String(), Offset: de.Offset, Reason: de.Reason}
	}
	return &RecordError{Kind: "other", Offset: -1, Reason: err.Error()}
}

// recordMeta is the metadata shown for a record; nil when all of it is empty.
func recordMeta(m change.Metadata) *Meta {
	meta := Meta{Timestamp: m.Timestamp, PartitionKeyType: m.PartitionKeyType, PartitionKeyValue: m.PartitionKeyValue,
		TransactionID: m.TransactionID, TransactionRecordID: m.TransactionRecordID, PrevTransactionID: m.PrevTransactionID,
		PrevTransactionRecordID: m.PrevTransactionRecordID, CommitTimestamp: m.CommitTimestamp, StreamPosition: m.StreamPosition}
	if meta == (Meta{}) {
		return nil
	}
	return &meta
}

// knownControlOps are the control operations the sink applies or knowingly refuses, besides
// truncates (IsTruncate).
var knownControlOps = []string{"create-table", "drop-table", "rename-table", "add-column", "drop-column",
	"rename-column", "column-type-change", "change-columns"}

// control fills rec for the control record ev of table src: its table-def, and what the sink
// does to the target table, which it applies to the simulated table.
func (n *Normalizer) control(rec *Record, ev *change.Event, src string) {
	rec.Op = ev.Control.Op
	rec.Control = &CtlInfo{}
	known := IsTruncate(rec.Op) || slices.Contains(knownControlOps, rec.Op)
	if !known {
		rec.Warnings = append(rec.Warnings, "unknown control operation "+rec.Op+": the sink logs and ignores it")
	}
	td := ev.Control.TableDef
	rules := n.rulesFor(src)
	if td != nil {
		rec.Control.TableDef = n.describe(td, rules)
	}
	switch {
	case !known || ev.Table == "":
	case IsTruncate(rec.Op):
		rec.Control.Changes = []string{"truncate: one snapshot removes every row of the target table older than this record (rows after it stay)"}
	case rec.Op == "rename-table":
		rec.Control.Changes = []string{"rename-table is not applied: the sink dead-letters it (class unsupported_control); map the new source name to the target table with sink.tables.<schema.new>.name, or rename the Iceberg table"}
	case rec.Op == "drop-table":
		rec.Control.Changes = []string{"table dropped at the source: the target table is kept; with sink.drop_table mark it stops taking records (they are dead-lettered) until a create-table"}
	case td == nil:
		rec.Control.Changes = []string{"no table-def: nothing to apply (columns are added when they appear in data)"}
	default:
		rec.Control.Changes = n.applyTableDef(src, rec.Op, td, rules)
	}
}

// applyTableDef applies the table-def td of a control record with operation op to the
// simulated table src, creating it when it is not known yet, and says what changed.
func (n *Normalizer) applyTableDef(src, op string, td *change.TableDef, rules TableRules) []string {
	desired := n.desired(td, rules)
	st := n.tables[src]
	if st == nil {
		st = &simTable{}
		if rules != nil {
			cols, _, err := rules.Create(td, nil)
			if err != nil {
				return []string{"the sink cannot create the table: " + err.Error() + " (it pauses the table and dead-letters its records)"}
			}
			st.cols = cols
		} else {
			for _, d := range desired {
				key := slices.Contains(td.PrimaryKey, d.Name)
				st.cols = append(st.cols, ColumnState{Name: d.Name, Type: d.Type, Required: key, Key: key, Doc: d.Doc})
			}
		}
		st.setDomains(td)
		n.tables[src] = st
		return []string{"create table (or reconcile an existing one) from the table-def"}
	}
	plan := PlanSchema(st.cols, desired, op == "rename-column")
	st.cols = ApplyPlan(st.cols, plan)
	st.setDomains(td)
	if changes := plan.Describe(); len(changes) > 0 {
		return changes
	}
	return []string{"no schema change"}
}

// data fills rec for the data record ev of table src (decoded from msg): its images, typed
// when the table is known, and warnings about what the sink would not apply.
func (n *Normalizer) data(rec *Record, ev *change.Event, msg []byte, src string) {
	rec.Op = ev.Op.String()
	rules := n.rulesFor(src)
	st := n.dataTable(rec, ev, src, rules)
	rec.Columns = n.fields(ev.Columns, st, rules, rec, ev.Op == change.OpDelete, "")
	rec.Before = n.fields(ev.Before, st, rules, rec, false, "before-image ")
	if st != nil {
		n.checkKeys(rec, ev, st.keys(), msg)
	}
}

// dataTable is the simulated table a data record of src is typed by: the known one, else the
// one the sink creates for it when rules are configured; nil when untyped.
func (n *Normalizer) dataTable(rec *Record, ev *change.Event, src string, rules TableRules) *simTable {
	st := n.tables[src]
	switch {
	case st == nil && rules != nil:
		// The sink creates the table from configured columns, else from this record's values.
		cols, source, err := rules.Create(nil, ev)
		if err != nil {
			rec.Warnings = append(rec.Warnings, "no table-def seen for "+src+" earlier in this input and the sink cannot create the table ("+err.Error()+"): values are shown untyped")
			return nil
		}
		st = &simTable{cols: cols}
		n.tables[src] = st
		rec.Warnings = append(rec.Warnings, "no table-def seen for "+src+" earlier in this input: typed as the sink creates the table (schema from "+source+"); a table that exists keeps its own types")
	case st == nil:
		rec.Warnings = append(rec.Warnings, "no table-def seen for "+src+" earlier in this input: values are shown untyped")
	}
	return st
}

// checkKeys sets rec's key change and warns about what the sink cannot apply by the table's
// primary key keys.
func (n *Normalizer) checkKeys(rec *Record, ev *change.Event, keys []string, msg []byte) {
	if len(keys) > 0 && ev.Op == change.OpUpdate && ev.Before == nil && !n.hasBeforeImage(msg) {
		rec.Warnings = append(rec.Warnings, "update without a before-image: a primary-key change cannot be told from an update (enable BeforeImageSettings)")
	}
	if ev.Op == change.OpUpdate && len(keys) > 0 && len(rec.Before) > 0 {
		rec.KeyChange = keyChange(keys, rec.Columns, rec.Before)
	}
	if ev.Op == change.OpDelete || ev.Op.IsUpsert() {
		for _, k := range keys {
			if !slices.ContainsFunc(ev.Columns, func(c change.Column) bool { return c.Name == k }) {
				rec.Warnings = append(rec.Warnings, ev.Op.String()+" without key column "+k+": the sink dead-letters it")
			}
		}
	}
	if len(keys) == 0 && (ev.Op == change.OpUpdate || ev.Op == change.OpDelete) {
		rec.Warnings = append(rec.Warnings, ev.Op.String()+" on a table without a primary key: the sink dead-letters it (configure sink.tables.<table>.primary_key)")
	}
}

// keyChange compares the key columns of the after- and before-image (converted values); a key
// column missing from the before-image is taken from the after-image. Nil when the key did not
// change or the before-image holds no key column at all (pk-only {} of an unchanged key).
func keyChange(keys []string, after, before []Field) *KeyChange {
	value := func(fs []Field, name string) (string, bool) {
		for _, f := range fs {
			if f.Name == name {
				if f.Value == nil {
					return "null", true
				}
				return *f.Value, true
			}
		}
		return "", false
	}
	kc := &KeyChange{Columns: keys}
	found, changed := 0, false
	for _, k := range keys {
		to, _ := value(after, k)
		from, ok := value(before, k)
		if ok {
			found++
		} else {
			from = to
		}
		changed = changed || from != to
		kc.From = append(kc.From, from)
		kc.To = append(kc.To, to)
	}
	if found == 0 || !changed {
		return nil
	}
	return kc
}

// hasBeforeImage reports whether msg carries the configured before-image object (the decoder
// leaves Before nil for an empty one, {}, which pk-only sends when the key did not change).
func (n *Normalizer) hasBeforeImage(msg []byte) bool {
	f := n.dec.cfg.BeforeImageField
	if f == "" {
		return false
	}
	v, err := n.p.ParseBytes(msg)
	if err != nil {
		return false
	}
	bv := v.Get(f)
	return bv != nil && bv.Type() == fastjson.TypeObject
}

func (n *Normalizer) desired(td *change.TableDef, rules TableRules) []DesiredColumn {
	if rules != nil {
		return rules.Desired(td)
	}
	v := DetectVocabulary(td.Columns)
	out := make([]DesiredColumn, len(td.Columns))
	for i, c := range td.Columns {
		t, _ := IcebergType(c, v, n.opts)
		var doc string
		if slices.Contains(td.PrimaryKey, c.Name) {
			t, doc = KeyType(c, t)
		}
		out[i] = DesiredColumn{Name: c.Name, Type: t, Doc: doc}
	}
	return out
}

func (n *Normalizer) fields(cols []change.Column, st *simTable, rules TableRules, rec *Record, keyOnly bool, what string) []Field {
	if len(cols) == 0 {
		return nil
	}
	out := make([]Field, len(cols))
	for i, c := range cols {
		f := Field{Name: c.Name, Kind: kindNames[c.Value.Kind], Text: c.Value.Text}
		v := c.Value
		if rules != nil {
			if f.Rule = rules.Rule(c.Name); f.Rule == RuleExclude {
				out[i] = f // never stored, never added to the table
				continue
			}
			v, _ = rules.Value(c.Name, v)
		}
		if st != nil {
			cs, ok := st.column(c.Name)
			t := cs.Type
			f.Key = cs.Key
			if !ok && what == "" && !keyOnly {
				// The sink adds a column that appears in data as optional, typed from the value.
				if rules != nil {
					t = rules.InferType(c)
				} else {
					t = InferType(c.Value)
				}
				st.cols = append(st.cols, ColumnState{Name: c.Name, Type: t})
				rec.Warnings = append(rec.Warnings, "column "+c.Name+" is not in the table: the sink adds it as optional column of type "+t.String())
				ok = true
			}
			switch {
			case !ok:
				rec.Warnings = append(rec.Warnings, what+"column "+c.Name+" is not in the table: ignored")
			case keyOnly && !f.Key:
				// Deletes are applied by key; other columns are not converted.
				f.Type = t.String()
			default:
				f.Type = t.String()
				dom := st.dom[c.Name]
				if kd := KeyDomain(t, cs.Doc); cs.Key && kd != DomainAny {
					dom = kd // a timestamp key's stored form, as the sink's layout has it
				}
				d, err := ConvertIn(t, dom, v)
				switch {
				case err != nil:
					f.Error = err.Error()
				case !d.Null:
					s := Render(t, d)
					f.Value = &s
				}
			}
		}
		out[i] = f
	}
	return out
}

func (n *Normalizer) describe(td *change.TableDef, rules TableRules) *DefInfo {
	v := DetectVocabulary(td.Columns)
	info := &DefInfo{Vocabulary: v.String(), PrimaryKey: td.PrimaryKey, Columns: make([]ColInfo, 0, len(td.Columns))}
	var stored map[string]iceberg.Type
	if rules != nil {
		info.PrimaryKey = rules.Key(td.PrimaryKey)
		stored = map[string]iceberg.Type{}
		for _, d := range rules.Desired(td) {
			stored[d.Name] = d.Type
		}
	}
	if info.PrimaryKey == nil {
		info.PrimaryKey = []string{}
	}
	for _, c := range td.Columns {
		t, err := IcebergType(c, v, n.opts)
		ci := ColInfo{Name: c.Name, Type: c.Type, Length: c.Length, Precision: c.Precision, Scale: c.Scale,
			Nullable: c.Nullable}
		if err != nil {
			ci.Error = err.Error()
		}
		if rules != nil {
			ci.Rule = rules.Rule(c.Name)
			t = stored[c.Name] // nil for an excluded column
		}
		if t != nil {
			ci.Iceberg = t.String()
		}
		info.Columns = append(info.Columns, ci)
	}
	return info
}
