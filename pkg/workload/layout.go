package workload

import (
	"fmt"
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Layout selects the partition keys of the records: which Kinesis partition key (and so which
// shard) each record goes to, and the partition-key-type and partition-key-value its metadata
// carries. It changes nothing else: for one Config the records of every layout hold the same
// operations and values in the same order, and the expected state is the same.
type Layout int

const (
	// LayoutTable (the zero value, "table") keeps every version of a key on one partition key:
	// customers, events and types by "shop.<table>" (partition-key-type schema-table, load and
	// CDC), order_items by its primary key (never a key change); the initial create-table
	// records by "<TaskId>.shop.<table>", the schema-change scenario's control records and a
	// reload's create-table by "shop.<table>", in order with their table's data.
	LayoutTable Layout = iota
	// LayoutDMSDefault ("dms-default") is what DMS does without object mapping or
	// ParallelApply (dms-format.md §6): load records of keyed tables by primary key
	// (partition-key-type primary-key, partition-key-value and Kinesis partition key
	// "shop.<table>.<key parts joined by .>", PartitionIncludeSchemaTable), every CDC record by
	// "shop.<table>" (schema-table), control records by the task (partition-key-type task-id,
	// partition-key-value the task id, Kinesis partition key "<TaskId>.shop.<table>", and
	// "<TaskId>" for DMS's own awsdms_apply_exceptions table).
	LayoutDMSDefault
	// LayoutPrimaryKey ("primary-key") is ParallelApply partitioning: every data record of a
	// keyed table, load and CDC, by primary key; a primary-key change goes under its new key
	// while the old key's earlier records sit under the old one (usually another shard).
	// Control records as in LayoutDMSDefault.
	LayoutPrimaryKey
)

var layoutNames = []string{"table", "dms-default", "primary-key"}

// String returns the layout's name as ParseLayout reads it.
func (l Layout) String() string {
	if l >= 0 && int(l) < len(layoutNames) {
		return layoutNames[l]
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// ParseLayout returns the layout named s: table, dms-default or primary-key.
func ParseLayout(s string) (Layout, error) {
	for i, n := range layoutNames {
		if s == n {
			return Layout(i), nil
		}
	}
	return 0, fmt.Errorf("workload: unknown layout %q (want %s)", s, strings.Join(layoutNames, ", "))
}

// MarshalText returns the layout's name.
func (l Layout) MarshalText() ([]byte, error) {
	if l < LayoutTable || l > LayoutPrimaryKey {
		return nil, fmt.Errorf("workload: unknown layout %d", int(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads a layout name (ParseLayout), so that a Layout works with flag.TextVar
// and in JSON and YAML.
func (l *Layout) UnmarshalText(b []byte) error {
	v, err := ParseLayout(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Layouts returns every layout.
func Layouts() []Layout { return []Layout{LayoutTable, LayoutDMSDefault, LayoutPrimaryKey} }

// dataPartition returns the partition-key-type of a data record of t with operation op and row
// image row, and its Kinesis partition key; for primary-key partitioning the key is also the
// metadata's partition-key-value. Keyless tables go by schema-table in every layout (DMS has
// no key to partition them by).
func (r *run) dataPartition(t *tableState, op string, row []change.Value) (string, string) {
	typ := t.def.partitionType
	if t.def.key == nil {
		typ = pkSchemaTable
	} else {
		switch r.cfg.Layout {
		case LayoutDMSDefault:
			typ = pkSchemaTable
			if op == "load" {
				typ = pkPrimaryKey
			}
		case LayoutPrimaryKey:
			typ = pkPrimaryKey
		}
	}
	if typ != pkPrimaryKey {
		return typ, t.def.source()
	}
	// IncludePartitionValue + PartitionIncludeSchemaTable; key parts joined with '.'.
	n := len(Schema) + len(t.def.name) + 1
	for _, k := range t.def.keyIdx {
		n += 1 + len(row[k].Text)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(Schema)
	b.WriteByte('.')
	b.WriteString(t.def.name)
	for _, k := range t.def.keyIdx {
		b.WriteByte('.')
		b.WriteString(row[k].Text)
	}
	return typ, b.String()
}

// tableControlKey is the Kinesis partition key of a control record of table t written during
// CDC (schema changes, a reload's create-table): in LayoutTable "shop.<table>", the key of the
// data of every table but order_items, so a consumer reads it in order with that data;
// otherwise the task's table-level key, as DMS writes it.
func (r *run) tableControlKey(t *tableDef) string {
	if r.cfg.Layout == LayoutTable {
		return t.source()
	}
	return r.cfg.TaskID + "." + t.source()
}
