package workload

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// ExpectedVersion is the version of the expected-state format written by this package.
const ExpectedVersion = 1

// Expected is the final state of a workload: the content every target table must have once the
// service has applied all records. It is written as JSON (see the package documentation).
type Expected struct {
	Version int   `json:"version"`
	Seed    int64 `json:"seed"`
	// LoadRows and Changes echo the generator configuration.
	LoadRows    int  `json:"load_rows"`
	Changes     int  `json:"changes"`
	TimestampTZ bool `json:"timestamptz"`
	// Tables in a fixed order (customers, order_items, events, types, then the tables the
	// schema-change scenario creates).
	Tables []ExpectedTable `json:"tables"`
	// DeadLetters lists the injected bad records (Config.BadRecords), in stream order; the
	// dead-letter table must hold exactly these. Absent without injected records.
	DeadLetters []ExpectedDeadLetter `json:"dead_letters,omitempty"`
}

// ExpectedTable is the expected content of one target table.
type ExpectedTable struct {
	// Source is the DMS "schema.table".
	Source string `json:"source"`
	// Namespace and Name identify the Iceberg table (the sink's defaults: namespace = source
	// schema, name = source table).
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Key lists the primary-key columns; empty for a keyless table, whose rows compare as a
	// multiset.
	Key []string `json:"key"`
	// Columns in table-def order, with the Iceberg type (iceberg.Type.String()) pkg/dms maps
	// the DMS type to.
	Columns []ExpectedColumn `json:"columns"`
	// Rows holds one array per row, aligned with Columns: dms.Render text of each value, or
	// JSON null. Keyed tables are sorted by key, keyless ones by their text.
	Rows [][]*string `json:"rows"`
}

// ExpectedColumn is a column name and its Iceberg type string.
type ExpectedColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Validate checks the internal consistency of an expected-state document.
func (e *Expected) Validate() error {
	if e.Version != ExpectedVersion {
		return fmt.Errorf("expected state: version %d is not %d", e.Version, ExpectedVersion)
	}
	for ti, t := range e.Tables {
		if t.Namespace == "" || t.Name == "" {
			return fmt.Errorf("expected state: tables[%d]: namespace and name are required", ti)
		}
		names := map[string]bool{}
		for _, c := range t.Columns {
			names[c.Name] = true
		}
		for _, k := range t.Key {
			if !names[k] {
				return fmt.Errorf("expected state: table %s.%s: key column %q is not a column", t.Namespace, t.Name, k)
			}
		}
		for ri, row := range t.Rows {
			if len(row) != len(t.Columns) {
				return fmt.Errorf("expected state: table %s.%s: row %d has %d values for %d columns", t.Namespace, t.Name, ri, len(row), len(t.Columns))
			}
		}
	}
	return nil
}

// Encode writes e as JSON with one table header and one row per line, which keeps large
// files readable and diffable. Decode reads it back (any JSON layout is accepted).
func (e *Expected) Encode(w io.Writer) error {
	bw := bufio.NewWriter(w)
	hdr := *e
	hdr.Tables, hdr.DeadLetters = nil, nil
	h, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	h, ok := bytes.CutSuffix(h, []byte(`,"tables":null}`))
	if !ok {
		return fmt.Errorf("expected state: unexpected header encoding %s", h)
	}
	_, _ = bw.Write(h)
	_, _ = bw.WriteString(`,"tables":[`)
	for i := range e.Tables {
		t := e.Tables[i]
		rows := t.Rows
		t.Rows = nil
		th, err := json.Marshal(t)
		if err != nil {
			return err
		}
		th, ok := bytes.CutSuffix(th, []byte(`,"rows":null}`))
		if !ok {
			return fmt.Errorf("expected state: unexpected table encoding %s", th)
		}
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		_, _ = bw.WriteString("\n")
		_, _ = bw.Write(th)
		_, _ = bw.WriteString(`,"rows":[`)
		for j, row := range rows {
			r, err := json.Marshal(row)
			if err != nil {
				return err
			}
			if j > 0 {
				_ = bw.WriteByte(',')
			}
			_, _ = bw.WriteString("\n")
			_, _ = bw.Write(r)
		}
		_, _ = bw.WriteString("]}")
	}
	_, _ = bw.WriteString("]")
	if len(e.DeadLetters) > 0 {
		_, _ = bw.WriteString(`,"dead_letters":[`)
		for i, dl := range e.DeadLetters {
			b, err := json.Marshal(dl)
			if err != nil {
				return err
			}
			if i > 0 {
				_ = bw.WriteByte(',')
			}
			_, _ = bw.WriteString("\n")
			_, _ = bw.Write(b)
		}
		_, _ = bw.WriteString("]")
	}
	_, _ = bw.WriteString("}\n")
	return bw.Flush()
}

// DecodeExpected reads an expected-state document and validates it.
func DecodeExpected(r io.Reader) (Expected, error) {
	var e Expected
	if err := json.NewDecoder(r).Decode(&e); err != nil {
		return Expected{}, fmt.Errorf("expected state: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Expected{}, err
	}
	return e, nil
}

// KeyIndexes returns the indexes of the key columns in Columns.
func (t *ExpectedTable) KeyIndexes() []int {
	var idx []int
	for _, k := range t.Key {
		for i, c := range t.Columns {
			if c.Name == k {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

// IcebergTypes returns the Iceberg type of every column of a table-def as the sink derives it.
func IcebergTypes(cols []change.ColumnDef, timestampTZ bool) ([]iceberg.Type, error) {
	voc := dms.DetectVocabulary(cols)
	out := make([]iceberg.Type, len(cols))
	for i, c := range cols {
		t, err := dms.IcebergType(c, voc, dms.TypeOptions{TimestampTZ: timestampTZ})
		if err != nil {
			return nil, fmt.Errorf("column %s (%s): %w", c.Name, c.Type, err)
		}
		out[i] = t
	}
	return out, nil
}

// RenderRow renders one model row: dms.Render of dms.Convert for every non-null value.
func RenderRow(types []iceberg.Type, cols []change.ColumnDef, row []change.Value) ([]*string, error) {
	out := make([]*string, len(row))
	for i, v := range row {
		if v.Kind == change.KindNull {
			continue
		}
		d, err := dms.Convert(types[i], v)
		if err != nil {
			return nil, fmt.Errorf("column %s (%s) value %q: %w", cols[i].Name, types[i], v.Text, err)
		}
		if d.Null {
			continue
		}
		s := dms.Render(types[i], d)
		out[i] = &s
	}
	return out, nil
}

func (r *run) expected() (Expected, error) {
	e := Expected{
		Version:     ExpectedVersion,
		Seed:        r.cfg.Seed,
		LoadRows:    r.cfg.LoadRows,
		Changes:     r.cfg.Changes,
		TimestampTZ: r.cfg.TimestampTZ,
	}
	for _, t := range r.tables {
		et, err := expectedTable(t.def, r.cfg.TimestampTZ, t.finalRows())
		if err != nil {
			return Expected{}, err
		}
		e.Tables = append(e.Tables, et)
	}
	if r.sc != nil {
		e.DeadLetters = r.sc.deadLetter
	}
	return e, nil
}

// ExpectedTableOf renders the rows of a modelled table (by name: customers, order_items,
// events, types) as an ExpectedTable; tests use it to build the state of an independent model.
func ExpectedTableOf(name string, timestampTZ bool, rows [][]change.Value) (ExpectedTable, error) {
	for _, d := range tableDefs() {
		if d.name == name {
			return expectedTable(d, timestampTZ, rows)
		}
	}
	return ExpectedTable{}, fmt.Errorf("workload: no table %q", name)
}

func expectedTable(d *tableDef, timestampTZ bool, rows [][]change.Value) (ExpectedTable, error) {
	types, err := IcebergTypes(d.columns, timestampTZ)
	if err != nil {
		return ExpectedTable{}, fmt.Errorf("expected state of %s: %w", d.source(), err)
	}
	et := ExpectedTable{
		Source:    d.source(),
		Namespace: Schema,
		Name:      d.name,
		Key:       append([]string{}, d.key...),
		Rows:      make([][]*string, 0, len(rows)),
	}
	for i, c := range d.columns {
		et.Columns = append(et.Columns, ExpectedColumn{Name: c.Name, Type: types[i].String()})
	}
	if d.key != nil {
		// Keys are integers in every modelled table: sort numerically.
		rows = slices.Clone(rows)
		slices.SortFunc(rows, func(a, b []change.Value) int {
			for _, k := range d.keyIdx {
				if c := cmpIntText(a[k].Text, b[k].Text); c != 0 {
					return c
				}
			}
			return 0
		})
	}
	for _, row := range rows {
		out, err := RenderRow(types, d.columns, row)
		if err != nil {
			return ExpectedTable{}, fmt.Errorf("expected state of %s: %w", d.source(), err)
		}
		et.Rows = append(et.Rows, out)
	}
	if d.key == nil {
		slices.SortFunc(et.Rows, cmpRendered)
	}
	return et, nil
}

func cmpIntText(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return cmp.Compare(x, y)
}

func cmpRendered(a, b []*string) int {
	for i := range a {
		switch {
		case a[i] == nil && b[i] == nil:
			continue
		case a[i] == nil:
			return -1
		case b[i] == nil:
			return 1
		}
		if c := strings.Compare(*a[i], *b[i]); c != 0 {
			return c
		}
	}
	return 0
}

func (t *tableState) finalRows() [][]change.Value {
	if t.def.key == nil {
		return t.keyless
	}
	rows := make([][]change.Value, 0, len(t.keys))
	for _, k := range t.keys {
		rows = append(rows, t.rows[k])
	}
	return rows
}
