package workload

import (
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Schema is the source schema of every modelled table.
const Schema = "shop"

// Table names of the model.
const (
	Customers  = "customers"
	OrderItems = "order_items"
	Events     = "events"
	Types      = "types"
)

// applyExceptions is DMS's own control table; the generator announces it with a create-table
// record (schema-name "") and never writes data to it.
const applyExceptions = "awsdms_apply_exceptions"

// Partition-key types written to metadata.partition-key-type.
const (
	pkSchemaTable = "schema-table"
	pkPrimaryKey  = "primary-key"
	pkTaskID      = "task-id"
)

// tableDef describes one modelled source table the way DMS announces it in control.table-def.
type tableDef struct {
	name    string
	columns []change.ColumnDef
	key     []string // nil for keyless tables
	// keyIdx are the indexes of the key columns in columns.
	keyIdx []int
	// partitionType is the partition-key-type of every data record (load and CDC).
	partitionType string
	// dropped marks columns dropped at the source by the schema-change scenario (nil without):
	// records leave them out, the target table keeps them.
	dropped []bool
}

func (t *tableDef) isDropped(i int) bool { return t.dropped != nil && t.dropped[i] }

func (t *tableDef) source() string { return Schema + "." + t.name }

func col(name, typ string, length, precision, scale int, nullable bool) change.ColumnDef {
	return change.ColumnDef{Name: name, Type: typ, Length: length, Precision: precision, Scale: scale, Nullable: nullable}
}

func newTableDef(name, partitionType string, key []string, cols ...change.ColumnDef) *tableDef {
	t := &tableDef{name: name, columns: cols, key: key, partitionType: partitionType}
	for _, k := range key {
		for i, c := range cols {
			if c.Name == k {
				t.keyIdx = append(t.keyIdx, i)
			}
		}
	}
	if len(t.keyIdx) != len(key) {
		panic("workload: key column missing in " + name)
	}
	return t
}

// Column indexes, kept in step with the definitions below.
const (
	cID = iota
	cName
	cEmail
	cBalance
	cActive
	cCreatedAt
)

const (
	oOrderID = iota
	oLineNo
	oSKU
	oQty
	oPrice
	oNote
)

const (
	eEventTime = iota
	eKind
	ePayload
)

// Columns of the types table, one per DMS type family (dms-format.md §7).
const (
	tID = iota
	tInt1
	tInt2
	tInt4
	tInt8
	tUint1
	tUint2
	tUint4
	tUint8
	tReal4
	tReal8
	tNum38
	tNum5
	tDate
	tTime
	tDT0
	tDT3
	tDT6
	tBlob
	tBool
	tWstr
	tJSON
	tCount
)

// tableDefs returns the four modelled tables in a fixed order. DATETIME, DATE, TIME, BLOB and
// NCLOB columns carry no length; NUMERIC columns carry precision and scale; WSTRING columns
// carry their length in characters.
func tableDefs() []*tableDef {
	customers := newTableDef(Customers, pkSchemaTable, []string{"id"},
		col("id", "INT4", 0, 0, 0, false),
		col("name", "WSTRING", 64, 0, 0, true),
		col("email", "WSTRING", 128, 0, 0, true),
		col("balance", "NUMERIC", 0, 12, 2, true),
		col("active", "BOOLEAN", 0, 0, 0, true),
		col("created_at", "DATETIME", 0, 0, 0, true),
	)
	orderItems := newTableDef(OrderItems, pkPrimaryKey, []string{"order_id", "line_no"},
		col("order_id", "INT8", 0, 0, 0, false),
		col("line_no", "INT4", 0, 0, 0, false),
		col("sku", "WSTRING", 32, 0, 0, true),
		col("qty", "INT4", 0, 0, 0, true),
		col("price", "NUMERIC", 0, 10, 2, true),
		col("note", "NCLOB", 0, 0, 0, true),
	)
	events := newTableDef(Events, pkSchemaTable, nil,
		col("event_time", "DATETIME", 0, 0, 0, true),
		col("kind", "WSTRING", 32, 0, 0, true),
		col("payload", "NCLOB", 0, 0, 0, true),
	)
	types := newTableDef(Types, pkSchemaTable, []string{"id"},
		col("id", "INT8", 0, 0, 0, false),
		col("c_int1", "INT1", 0, 0, 0, true),
		col("c_int2", "INT2", 0, 0, 0, true),
		col("c_int4", "INT4", 0, 0, 0, true),
		col("c_int8", "INT8", 0, 0, 0, true),
		col("c_uint1", "UINT1", 0, 0, 0, true),
		col("c_uint2", "UINT2", 0, 0, 0, true),
		col("c_uint4", "UINT4", 0, 0, 0, true),
		col("c_uint8", "UINT8", 0, 0, 0, true),
		col("c_real4", "REAL4", 0, 0, 0, true),
		col("c_real8", "REAL8", 0, 0, 0, true),
		col("c_num38", "NUMERIC", 0, 38, 10, true),
		col("c_num5", "NUMERIC", 0, 5, 0, true),
		col("c_date", "DATE", 0, 0, 0, true),
		col("c_time", "TIME", 0, 0, 0, true),
		col("c_dt0", "DATETIME", 0, 0, 0, true),
		col("c_dt3", "DATETIME", 0, 0, 0, true),
		col("c_dt6", "DATETIME", 0, 0, 0, true),
		col("c_blob", "BLOB", 0, 0, 0, true),
		col("c_bool", "BOOLEAN", 0, 0, 0, true),
		col("c_wstr", "WSTRING", 100, 0, 0, true),
		col("c_json", "NCLOB", 0, 0, 0, true),
	)
	if len(types.columns) != tCount {
		panic("workload: types column constants out of step")
	}
	return []*tableDef{customers, orderItems, events, types}
}

// applyExceptionsDef is the table-def DMS announces for its apply-exceptions table.
func applyExceptionsDef() *tableDef {
	return newTableDef(applyExceptions, pkTaskID, nil,
		col("TASK_NAME", "WSTRING", 128, 0, 0, false),
		col("TABLE_OWNER", "WSTRING", 128, 0, 0, false),
		col("TABLE_NAME", "WSTRING", 128, 0, 0, false),
		col("ERROR_TIME", "DATETIME", 0, 0, 0, false),
		col("STATEMENT", "NCLOB", 0, 0, 0, false),
		col("ERROR", "NCLOB", 0, 0, 0, false),
	)
}

// TableConfig mirrors sink.TableConfig (same YAML tags) so that this package stays free of the
// sink: it declares a table's primary key and column types before any create-table control
// record is seen. Marshal a map of them under sink.tables.
type TableConfig struct {
	Namespace  string       `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Name       string       `yaml:"name,omitempty" json:"name,omitempty"`
	PrimaryKey []string     `yaml:"primary_key,omitempty" json:"primary_key,omitempty"`
	Columns    []ColumnSpec `yaml:"columns" json:"columns"`
}

// ColumnSpec mirrors sink.ColumnSpec.
type ColumnSpec struct {
	Name      string `yaml:"name" json:"name"`
	Type      string `yaml:"type" json:"type"`
	Length    int    `yaml:"length,omitempty" json:"length,omitempty"`
	Precision int    `yaml:"precision,omitempty" json:"precision,omitempty"`
	Scale     int    `yaml:"scale,omitempty" json:"scale,omitempty"`
	Nullable  *bool  `yaml:"nullable,omitempty" json:"nullable,omitempty"`
}

// TableConfigs returns, keyed by "schema.table", the primary keys and column specs of the
// modelled tables, equal to the table-defs of the create-table control records.
func TableConfigs() map[string]TableConfig {
	out := map[string]TableConfig{}
	for _, t := range tableDefs() {
		tc := TableConfig{PrimaryKey: append([]string(nil), t.key...)}
		for _, c := range t.columns {
			nullable := c.Nullable
			tc.Columns = append(tc.Columns, ColumnSpec{
				Name: c.Name, Type: c.Type, Length: c.Length, Precision: c.Precision, Scale: c.Scale,
				Nullable: &nullable,
			})
		}
		out[t.source()] = tc
	}
	return out
}

// TableDefs returns the column definitions and primary key of each modelled table, keyed by
// "schema.table", exactly as the create-table control records carry them.
func TableDefs() map[string]change.TableDef {
	out := map[string]change.TableDef{}
	for _, t := range tableDefs() {
		out[t.source()] = change.TableDef{
			Columns:    append([]change.ColumnDef(nil), t.columns...),
			PrimaryKey: append([]string(nil), t.key...),
		}
	}
	return out
}
