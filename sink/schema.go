package sink

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// tableProperties are set on every table we create (design.md §3.2).
var tableProperties = iceberg.Properties{
	"format-version":                             "2",
	"write.delete.isolation-level":               "snapshot",
	"write.metadata.delete-after-commit.enabled": "true",
	"write.metadata.previous-versions-max":       "20",
	"write.parquet.compression-codec":            "zstd",
	tableprop.CreatedBy:                          "dms2iceberg",
	tableprop.StateVersion:                       stateversion.CurrentText,
}

// dictionaryProps turns Parquet dictionary encoding off for the table and back on for the string
// columns outside the key, except those whose source type holds long or unique text (unique:
// uniqueText). Hashing every value into a dictionary is a large share of the write cost; it pays
// off only where values repeat (status codes, names, countries), which in a CDC table are the
// short non-key strings. Keys, numbers, decimals and timestamps are mostly distinct per row, and
// zstd compresses what repeats in them. Large objects, JSON, XML and UUIDs rarely repeat, and
// their dictionary outgrows the dictionary page limit (write.parquet.dict-size-bytes, 2 MiB)
// within a flush: arrow-go then writes the dictionary page it built and re-encodes the column
// plain, paying for both (BenchmarkPipeline: ~7 % of its CPU, docs/benchmarks.md).
func dictionaryProps(s *iceberg.Schema, unique map[string]bool) iceberg.Properties {
	props := iceberg.Properties{"parquet.enable.dictionary": "false"}
	keys := map[int]bool{}
	for _, id := range s.IdentifierFieldIDs {
		keys[id] = true
	}
	for _, f := range s.Fields() {
		if keys[f.ID] || strings.HasPrefix(f.Doc, identityDoc) || unique[f.Name] {
			continue // keys and the DMS record identity are distinct per row
		}
		if _, ok := f.Type.(iceberg.StringType); ok {
			props["write.parquet.dict-encoding-enabled.column."+f.Name] = "true"
		}
	}
	return props
}

// uniqueText lists the columns of def (or, without one, of the configured columns cols) whose
// DMS type holds long or mostly unique text: large objects, JSON, XML, arrays, UUIDs.
func uniqueText(def *change.TableDef, cols []change.ColumnDef) map[string]bool {
	if def != nil && len(def.Columns) > 0 {
		cols = def.Columns
	}
	out := map[string]bool{}
	for _, c := range cols {
		switch strings.ToUpper(c.Type) {
		case "CLOB", "NCLOB", "TEXT", "JSON", "JSONB", "XML", "ARRAY", "UUID":
			out[c.Name] = true
		}
	}
	return out
}

// layout is what a writer needs to know about its table's current schema. It is rebuilt after
// every schema change.
type layout struct {
	schema    *iceberg.Schema
	names     []string
	types     []iceberg.Type
	byName    map[string]int
	keyIdx    []int // positions of the identifier fields
	keyIDs    []int
	keyNames  []string // names of the identifier fields, in keyIdx order
	live      []int    // non-key columns not dropped at the source: an update may leave them out (absent_columns keep)
	arrow     *arrow.Schema
	keyArrow  *arrow.Schema
	watermark map[string]string // shard -> highest committed sequence number
	// domains narrows a column's values to its source type's range where the Iceberg type is
	// wider (DMS UINT8 as decimal(20,0)): from the latest table-def this writer saw; nil (no
	// narrowing) when it saw none, e.g. after a restart before the next control record.
	domains []dms.Domain
	// keyDomains is the stored form of the timestamp key columns (dms.KeyDomain), from the
	// table's schema itself so that it holds from the first record after a restart; nil when
	// the key has none.
	keyDomains []dms.Domain
	// hasID: the table has the DMS record identity column of keyless tables (identity.go), at
	// position idIdx; idID is its field id and idArrow the schema of its equality deletes.
	hasID   bool
	idIdx   int
	idID    int
	idArrow *arrow.Schema
}

// domain is column i's value domain: a timestamp key's stored form, else its source-type range
// (dms.DomainAny when unknown).
func (l *layout) domain(i int) dms.Domain {
	if i < len(l.keyDomains) && l.keyDomains[i] != dms.DomainAny {
		return l.keyDomains[i]
	}
	if i < len(l.domains) {
		return l.domains[i]
	}
	return dms.DomainAny
}

// setDomains takes the columns' source-type ranges from the table-def def (nil: none known).
func (l *layout) setDomains(def *change.TableDef) {
	l.domains = nil
	if def == nil {
		return
	}
	voc := dms.DetectVocabulary(def.Columns)
	for _, c := range def.Columns {
		i, ok := l.byName[c.Name]
		if !ok {
			continue
		}
		if d := dms.ColumnDomain(c, voc); d != dms.DomainAny {
			if l.domains == nil {
				l.domains = make([]dms.Domain, len(l.names))
			}
			l.domains[i] = d
		}
	}
}

func newLayout(tbl *table.Table, stream string) (*layout, error) {
	s := tbl.Schema()
	fields := s.Fields()
	l := &layout{schema: s, byName: make(map[string]int, len(fields))}
	for i, f := range fields {
		l.names = append(l.names, f.Name)
		l.types = append(l.types, f.Type)
		l.byName[f.Name] = i
	}
	for _, id := range s.IdentifierFieldIDs {
		for i, f := range fields {
			if f.ID == id {
				l.keyIdx = append(l.keyIdx, i)
				l.keyIDs = append(l.keyIDs, id)
				l.keyNames = append(l.keyNames, f.Name)
			}
		}
	}
	for i, f := range fields {
		if !slices.Contains(l.keyIdx, i) && !strings.HasPrefix(f.Doc, droppedDoc) && !strings.HasPrefix(f.Doc, identityDoc) {
			l.live = append(l.live, i)
		}
	}
	for _, i := range l.keyIdx {
		if d := dms.KeyDomain(fields[i].Type, fields[i].Doc); d != dms.DomainAny {
			if l.keyDomains == nil {
				l.keyDomains = make([]dms.Domain, len(fields))
			}
			l.keyDomains[i] = d
		}
	}
	as, err := dms.ArrowSchema(s)
	if err != nil {
		return nil, fmt.Errorf("arrow schema: %w", err)
	}
	l.arrow = as
	keyFields := make([]arrow.Field, 0, len(l.keyIdx))
	for _, i := range l.keyIdx {
		keyFields = append(keyFields, as.Field(i))
	}
	l.keyArrow = arrow.NewSchema(keyFields, nil)
	l.findIdentity(fields)
	l.watermark = tableprop.Watermarks(tbl.Properties(), stream)
	return l, nil
}

func (l *layout) keyed() bool { return len(l.keyIdx) > 0 }

// index finds a column by name, trying the position it has in the record first (DMS writes
// columns in table order, so this avoids a map lookup per value).
func (l *layout) index(pos int, name string) (int, bool) {
	if pos < len(l.names) && l.names[pos] == name {
		return pos, true
	}
	i, ok := l.byName[name]
	return i, ok
}

// columnSource is one column of a table being created.
type columnSource struct {
	name string
	typ  iceberg.Type
	doc  string
}

// buildSchema chooses the schema of a new table: from the DMS table-def when one was seen, else
// from configuration, else inferred from the first event's values. The primary key comes from
// configuration when set there, else from the table-def; no key column may be excluded or
// masked (settings.keyRule). Excluded columns are left out; hashed and masked columns are
// strings. A keyless table gets the DMS record identity column last (sink.keyless_identity
// auto, identity.go).
func buildSchema(def *change.TableDef, st *settings, ev *change.Event) (*iceberg.Schema, string, error) {
	var cols []columnSource
	var key []string
	source := ""
	switch {
	case def != nil && len(def.Columns) > 0:
		source = "table-def"
		for _, c := range st.desired(def) {
			cols = append(cols, columnSource{name: c.Name, typ: c.Type, doc: c.Doc})
		}
		key = def.PrimaryKey
	case len(st.columns) > 0:
		source = "configuration"
		vocab := dms.DetectVocabulary(st.columns)
		for _, c := range st.columns {
			if st.exclude[c.Name] {
				continue
			}
			t, err := st.typeOf(c, vocab)
			if err != nil {
				return nil, "", fmt.Errorf("column %s: %w", c.Name, err)
			}
			var doc string
			if slices.Contains(st.primaryKey, c.Name) {
				t, doc = dms.KeyType(c, t)
			}
			cols = append(cols, columnSource{name: c.Name, typ: t, doc: doc})
		}
	case ev != nil && len(ev.Columns) > 0:
		source = "inferred"
		for _, c := range ev.Columns {
			if st.exclude[c.Name] {
				continue
			}
			cols = append(cols, columnSource{name: c.Name, typ: st.inferType(c)})
		}
	default:
		return nil, "", fmt.Errorf("no table-def, no configured columns and no values to infer a schema from")
	}
	keyFrom := "the " + source
	if len(st.primaryKey) > 0 {
		keyFrom = "sink.tables primary_key"
	}
	key = st.key(key)
	if err := st.keyRule(key, keyFrom); err != nil {
		return nil, "", err
	}
	fields := make([]iceberg.NestedField, len(cols))
	var keyIDs []int
	for i, c := range cols {
		fields[i] = iceberg.NestedField{ID: i + 1, Name: c.name, Type: c.typ}
		if slices.Contains(key, c.name) {
			fields[i].Doc = c.doc // only a key column's form is documented (dms.KeyType)
			fields[i].Required = true
			keyIDs = append(keyIDs, i+1)
		}
	}
	if len(keyIDs) != len(key) {
		return nil, "", fmt.Errorf("primary key %v names a column the table does not have (columns from %s)", key, source)
	}
	if len(key) == 0 && st.identity && !slices.ContainsFunc(cols, func(c columnSource) bool { return c.name == KeylessIdentityColumn }) {
		// A keyless table carries its rows' DMS record identity from the start (identity.go).
		fields = append(fields, identityField(len(fields)+1))
	}
	for _, id := range keyIDs {
		if err := keyType(fields[id-1]); err != nil {
			return nil, "", err
		}
	}
	return iceberg.NewSchemaWithIdentifiers(0, keyIDs, fields...), source, nil
}

// keyType rejects key columns Iceberg equality deletes cannot use.
func keyType(f iceberg.NestedField) error {
	switch f.Type.(type) {
	case iceberg.Float32Type, iceberg.Float64Type:
		return fmt.Errorf("primary key column %s is floating point; Iceberg equality deletes cannot use it", f.Name)
	}
	return nil
}

// sourceStates is columnStates without the DMS record identity column, which is not a source
// column: a table-def never names it, so schema evolution must not mark it dropped or rename
// it.
func (l *layout) sourceStates() []dms.ColumnState {
	states := l.columnStates()
	if l.hasID {
		states = slices.Delete(states, l.idIdx, l.idIdx+1)
	}
	return states
}

// droppedDoc starts the doc of a column that a table-def no longer has: the column is kept with
// its data (schema evolution never deletes) and no longer expected in records.
const droppedDoc = "dms2iceberg: dropped at the source"

// columnStates describes the table's columns for dms.PlanSchema.
func (l *layout) columnStates() []dms.ColumnState {
	fields := l.schema.Fields()
	out := make([]dms.ColumnState, len(fields))
	for i, f := range fields {
		out[i] = dms.ColumnState{Name: f.Name, Type: f.Type, Required: f.Required, Key: isKey(l, i),
			Dropped: strings.HasPrefix(f.Doc, droppedDoc), Doc: f.Doc}
	}
	return out
}

// relayRows re-lays rows built for layout old for layout nu, the table's schema after another
// worker changed it: values move by field id, columns the old schema did not have are null, and
// promoted values are converted (float to double; int to long and decimal widening keep their
// Datum). Files written before the change stay valid (Iceberg reads them by field id); this is
// for writing the rows again, which a re-planned batch does.
func relayRows(rows *rowList, old, nu *layout) {
	if old.schema.ID == nu.schema.ID {
		return // the same schema (a refresh or commit without a schema change)
	}
	oldFields, nuFields := old.schema.Fields(), nu.schema.Fields()
	oldPos := make(map[int]int, len(old.types))
	for i, f := range oldFields {
		oldPos[f.ID] = i
	}
	from := make([]int, len(nu.types)) // new position -> old position, or -1
	to := make([]int, len(old.types))  // old position -> new position, or -1
	for i := range to {
		to[i] = -1
	}
	same := len(old.types) == len(nu.types)
	for j, f := range nuFields {
		i, ok := oldPos[f.ID]
		if !ok {
			from[j] = -1
			same = false
			continue
		}
		from[j], to[i] = i, j
		if i != j || !old.types[i].Equals(nu.types[j]) {
			same = false
		}
	}
	if same {
		return
	}
	// Key columns by field id: keyFrom[k] is the position in the old key of the new key's
	// column k (the old key's datum order follows old.keyIdx), or -1.
	oldKeyPos := make(map[int]int, len(old.keyIdx))
	for ki, ci := range old.keyIdx {
		oldKeyPos[oldFields[ci].ID] = ki
	}
	keyFrom := make([]int, len(nu.keyIdx))
	for ki, ci := range nu.keyIdx {
		oi, ok := oldKeyPos[nuFields[ci].ID]
		if !ok {
			oi = -1
		}
		keyFrom[ki] = oi
	}
	for k := range rows.len() {
		r := rows.at(k)
		vals := make([]dms.Datum, len(nu.types))
		for j, i := range from {
			if i < 0 || i >= len(r.vals) {
				vals[j] = dms.Datum{Null: true}
				continue
			}
			vals[j] = promote(r.vals[i], old.types[i], nu.types[j])
		}
		r.vals = vals
		if r.oldKey != nil {
			key := make([]dms.Datum, len(nu.keyIdx))
			for ki, ci := range nu.keyIdx {
				oi := keyFrom[ki]
				if oi < 0 || oi >= len(r.oldKey) {
					key[ki] = dms.Datum{Null: true}
					continue
				}
				key[ki] = promote(r.oldKey[oi], old.types[old.keyIdx[oi]], nu.types[ci])
			}
			r.oldKey = key
		}
		if len(r.absent) > 0 {
			absent := r.absent[:0]
			for _, i := range r.absent {
				if j := to[i]; j >= 0 {
					absent = append(absent, int32(j))
				}
			}
			slices.Sort(absent)
			r.absent = absent
		}
	}
}

// promote converts a value of type from to the promoted type to. Only float to double changes
// the Datum's bits; every other promotion Iceberg allows keeps them.
func promote(d dms.Datum, from, to iceberg.Type) dms.Datum {
	if d.Null {
		return d
	}
	if _, ok := from.(iceberg.Float32Type); ok {
		if _, ok := to.(iceberg.Float64Type); ok {
			d.I = int64(math.Float64bits(float64(math.Float32frombits(uint32(d.I)))))
		}
	}
	return d
}

func isKey(l *layout, i int) bool {
	for _, k := range l.keyIdx {
		if k == i {
			return true
		}
	}
	return false
}

// single is a record sequence of one batch.
func single(rec arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }
}
