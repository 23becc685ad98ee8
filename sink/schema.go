package sink

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// tableProperties are set on every table we create (design.md §3).
var tableProperties = iceberg.Properties{
	"format-version":                             "2",
	"write.delete.isolation-level":               "snapshot",
	"write.metadata.delete-after-commit.enabled": "true",
	"write.metadata.previous-versions-max":       "20",
	"commit.retry.num-retries":                   "0",
	"write.parquet.compression-codec":            "zstd",
	"dms2iceberg.created-by":                     "dms2iceberg",
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
	arrow     *arrow.Schema
	keyArrow  *arrow.Schema
	watermark map[string]string // shard -> highest committed sequence number
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
			}
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
	l.watermark = checkpoint.Watermarks(tbl.Properties(), stream)
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
	name     string
	typ      iceberg.Type
	required bool
}

// buildSchema chooses the schema of a new table: from the DMS table-def when one was seen, else
// from configuration, else inferred from the first event's values. The primary key comes from
// configuration when set there, else from the table-def.
func buildSchema(def *change.TableDef, tc TableConfig, ev *change.Event, opts dms.TypeOptions) (*iceberg.Schema, string, error) {
	var cols []columnSource
	var key []string
	source := ""
	switch {
	case def != nil && len(def.Columns) > 0:
		source = "table-def"
		vocab := dms.DetectVocabulary(def.Columns)
		for _, c := range def.Columns {
			t, err := dms.IcebergType(c, vocab, opts)
			if err != nil {
				t = iceberg.PrimitiveTypes.String
			}
			cols = append(cols, columnSource{name: c.Name, typ: t})
		}
		key = def.PrimaryKey
	case len(tc.Columns) > 0:
		source = "configuration"
		defs := make([]change.ColumnDef, len(tc.Columns))
		for i, c := range tc.Columns {
			defs[i] = change.ColumnDef{Name: c.Name, Type: c.Type, Length: c.Length, Precision: c.Precision, Scale: c.Scale, Nullable: c.Nullable == nil || *c.Nullable}
		}
		vocab := dms.DetectVocabulary(defs)
		for _, c := range defs {
			t, err := dms.IcebergType(c, vocab, opts)
			if err != nil {
				return nil, "", fmt.Errorf("column %s: %w", c.Name, err)
			}
			cols = append(cols, columnSource{name: c.Name, typ: t})
		}
	case ev != nil && len(ev.Columns) > 0:
		source = "inferred"
		for _, c := range ev.Columns {
			cols = append(cols, columnSource{name: c.Name, typ: dms.InferType(c.Value)})
		}
	default:
		return nil, "", fmt.Errorf("no table-def, no configured columns and no values to infer a schema from")
	}
	if len(tc.PrimaryKey) > 0 {
		key = tc.PrimaryKey
	}
	fields := make([]iceberg.NestedField, len(cols))
	var keyIDs []int
	for i, c := range cols {
		fields[i] = iceberg.NestedField{ID: i + 1, Name: c.name, Type: c.typ}
		if slices.Contains(key, c.name) {
			fields[i].Required = true
			keyIDs = append(keyIDs, i+1)
		}
	}
	if len(keyIDs) != len(key) {
		return nil, "", fmt.Errorf("primary key %v names a column the table does not have", key)
	}
	for _, id := range keyIDs {
		switch fields[id-1].Type.(type) {
		case iceberg.Float32Type, iceberg.Float64Type:
			return nil, "", fmt.Errorf("primary key column %s is floating point; Iceberg equality deletes cannot use it", fields[id-1].Name)
		}
	}
	return iceberg.NewSchemaWithIdentifiers(0, keyIDs, fields...), source, nil
}
