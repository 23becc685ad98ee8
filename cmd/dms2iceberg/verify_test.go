package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

func sp(s string) *string { return &s }

func keyedTable(rows ...[]*string) workload.ExpectedTable {
	return workload.ExpectedTable{
		Namespace: "shop", Name: "t", Key: []string{"a", "b"},
		Columns: []workload.ExpectedColumn{{Name: "a", Type: "long"}, {Name: "b", Type: "int"}, {Name: "v", Type: "string"}},
		Rows:    rows,
	}
}

func keylessTable(rows ...[]*string) workload.ExpectedTable {
	return workload.ExpectedTable{
		Namespace: "shop", Name: "e",
		Columns: []workload.ExpectedColumn{{Name: "k", Type: "string"}, {Name: "p", Type: "string"}},
		Rows:    rows,
	}
}

func allPresent(n int) []bool {
	p := make([]bool, n)
	for i := range p {
		p[i] = true
	}
	return p
}

func TestCompareRows(t *testing.T) {
	r := func(vs ...*string) []*string { return vs }
	base := []([]*string){r(sp("1"), sp("1"), sp("x")), r(sp("1"), sp("2"), nil), r(sp("2"), sp("1"), sp("y"))}
	for _, tc := range []struct {
		name    string
		et      workload.ExpectedTable
		got     [][]*string
		present []bool
		// counters: missing, unexpected, duplicates, differ
		counts [4]int
		diffs  []string
	}{
		{name: "equal in any order", et: keyedTable(base...), got: [][]*string{base[2], base[0], base[1]}},
		{name: "empty", et: keyedTable()},
		{
			name: "missing key", et: keyedTable(base...), got: base[:2],
			counts: [4]int{1, 0, 0, 0}, diffs: []string{`missing key a="2",b="1"`},
		},
		{
			name: "unexpected key", et: keyedTable(base[:2]...), got: base,
			counts: [4]int{0, 1, 0, 0}, diffs: []string{`unexpected key a="2",b="1": {a="2", b="1", v="y"}`},
		},
		{
			name: "duplicate key", et: keyedTable(base...), got: append([][]*string{base[0]}, base...),
			counts: [4]int{0, 0, 1, 0}, diffs: []string{`duplicate key a="1",b="1": 2 rows`},
		},
		{
			name: "differing columns", et: keyedTable(base...),
			got:    [][]*string{r(sp("1"), sp("1"), sp("z")), r(sp("1"), sp("2"), sp("")), base[2]},
			counts: [4]int{0, 0, 0, 2},
			diffs:  []string{`key a="1",b="1": v got "z" want "x"`, `key a="1",b="2": v got "" want null`},
		},
		{
			name: "absent column is not compared", et: keyedTable(base...),
			got:     [][]*string{r(sp("1"), sp("1"), nil), r(sp("1"), sp("2"), nil), r(sp("2"), sp("1"), nil)},
			present: []bool{true, true, false},
		},
		{
			name: "absent key column", et: keyedTable(base...), got: base, present: []bool{true, false, true},
			diffs: []string{"key column b is missing: rows not compared"},
		},
		{
			name: "multiset equal", et: keylessTable(r(sp("a"), nil), r(sp("a"), nil), r(sp("b"), sp("{}"))),
			got: [][]*string{r(sp("b"), sp("{}")), r(sp("a"), nil), r(sp("a"), nil)},
		},
		{
			name: "multiset counts", et: keylessTable(r(sp("a"), nil), r(sp("a"), nil), r(sp("b"), sp("{}"))),
			got:    [][]*string{r(sp("b"), sp("{}")), r(sp("a"), nil), r(sp("b"), sp("{}")), r(sp("c"), sp("null"))},
			counts: [4]int{0, 0, 0, 3},
			diffs: []string{
				`row {k="a", p=null}: 1 in table, 2 expected`,
				`row {k="b", p="{}"}: 2 in table, 1 expected`,
				`row {k="c", p="null"}: 1 in table, 0 expected`,
			},
		},
		{
			name: "multiset null differs from text null", et: keylessTable(r(sp("a"), nil)), got: [][]*string{r(sp("a"), sp(""))},
			counts: [4]int{0, 0, 0, 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			present := tc.present
			if present == nil {
				present = allPresent(len(tc.et.Columns))
			}
			res := &tableResult{}
			compareRows(res, tc.et, tc.got, present)
			if got := [4]int{res.missingKeys, res.unexpected, res.duplicates, res.differ}; got != tc.counts {
				t.Errorf("counts %v, want %v; diffs %q", got, tc.counts, res.diffs)
			}
			if tc.diffs == nil && tc.counts == [4]int{} && len(res.diffs) > 0 {
				t.Errorf("unexpected diffs %q", res.diffs)
			}
			for _, d := range tc.diffs {
				found := false
				for _, g := range res.diffs {
					found = found || g == d
				}
				if !found {
					t.Errorf("diff %q not reported; got %q", d, res.diffs)
				}
			}
		})
	}
}

// writeTables creates the tables of a workload's final state in the catalog under dir, with the
// sink's type mapping, and appends the rows (plus the extra rows given per table).
func writeTables(t *testing.T, dir string, g *workload.Generator, extra map[string][][]change.Value, skip map[string]bool) {
	t.Helper()
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cat.(interface{ Close() error }); ok {
		defer c.Close()
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	defs := workload.TableDefs()
	for src, rows := range g.FinalRows() {
		name := strings.TrimPrefix(src, "shop.")
		if skip[name] {
			continue
		}
		def := defs[src]
		types, err := workload.IcebergTypes(def.Columns, false)
		if err != nil {
			t.Fatal(err)
		}
		var fields []iceberg.NestedField
		var ids []int
		for i, c := range def.Columns {
			isKey := false
			for _, k := range def.PrimaryKey {
				isKey = isKey || k == c.Name
			}
			fields = append(fields, iceberg.NestedField{ID: i + 1, Name: c.Name, Type: types[i], Required: isKey})
			if isKey {
				ids = append(ids, i+1)
			}
		}
		tbl, err := cat.CreateTable(ctx, table.Identifier{"shop", name}, iceberg.NewSchemaWithIdentifiers(0, ids, fields...))
		if err != nil {
			t.Fatal(err)
		}
		sc, err := dms.ArrowSchema(tbl.Schema())
		if err != nil {
			t.Fatal(err)
		}
		b := array.NewRecordBuilder(mem, sc)
		for _, row := range append(rows, extra[name]...) {
			for i, v := range row {
				d, err := dms.Convert(types[i], v)
				if err != nil {
					t.Fatal(err)
				}
				dms.AppendDatum(b.Field(i), types[i], d)
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		rdr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Append(ctx, rdr, nil); err != nil {
			t.Fatal(err)
		}
		rdr.Release()
		rec.Release()
	}
}

func writeConfigAndExpected(t *testing.T, dir string, exp workload.Expected) (cfgPath, expPath string) {
	t.Helper()
	cfgPath = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("stream: s\ndata_dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expPath = filepath.Join(t.TempDir(), "expected.json")
	if err := writeExpected(expPath, exp); err != nil {
		t.Fatal(err)
	}
	return cfgPath, expPath
}

func TestVerifyAgainstCatalog(t *testing.T) {
	ctx := context.Background()
	g := workload.New(workload.Config{Seed: 21, LoadRows: 40, Changes: 400})
	exp, err := g.Expected()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("equal", func(t *testing.T) {
		dir := t.TempDir()
		writeTables(t, dir, g, nil, nil)
		cfgPath, expPath := writeConfigAndExpected(t, dir, exp)
		var out bytes.Buffer
		if err := verify(ctx, cfgPath, expPath, 10, &out, false); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for _, et := range exp.Tables {
			want := "table shop." + et.Name + ": rows="
			if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "DIFF") {
				t.Fatalf("output:\n%s", out.String())
			}
		}
		// The whole command path, through runVerify's flags.
		if err := runVerify(ctx, []string{"--config", cfgPath, "--expected", expPath}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("differences", func(t *testing.T) {
		dir := t.TempDir()
		rows := g.FinalRows()
		// The table gets a duplicate of one customer and of one event; types is missing.
		extra := map[string][][]change.Value{
			"customers": {rows["shop.customers"][0]},
			"events":    {rows["shop.events"][0]},
		}
		writeTables(t, dir, g, extra, map[string]bool{"types": true})
		// The expected state loses an order item (→ unexpected key), gains a customer
		// (→ missing key) and has a changed value (→ differing row).
		mut := exp
		mut.Tables = append([]workload.ExpectedTable(nil), exp.Tables...)
		cust := &mut.Tables[0]
		cust.Rows = append([][]*string(nil), cust.Rows...)
		ghost := append([]*string(nil), cust.Rows[0]...)
		ghost[0] = sp("99999999")
		cust.Rows = append(cust.Rows, ghost)
		changed := append([]*string(nil), cust.Rows[1]...)
		changed[1] = sp("Somebody Else")
		cust.Rows[1] = changed
		items := &mut.Tables[1]
		items.Rows = items.Rows[1:]
		cfgPath, expPath := writeConfigAndExpected(t, dir, mut)
		var out bytes.Buffer
		err := verify(ctx, cfgPath, expPath, 10, &out, false)
		var ec exitCode
		if !errors.As(err, &ec) || ec != 1 {
			t.Fatalf("got %v, want exit code 1\n%s", err, out.String())
		}
		s := out.String()
		t.Log("\n" + s)
		for _, want := range []string{
			"table shop.customers: rows=",
			"DIFF (1 missing keys, 1 duplicate keys, 1 differing rows)",
			`missing key id="99999999"`,
			`duplicate key id=`,
			`name got `, `want "Somebody Else"`,
			"table shop.order_items: rows=",
			"DIFF (1 unexpected keys)",
			"unexpected key order_id=",
			"table shop.events: rows=",
			"1 distinct rows with a different count",
			"in table, 1 expected",
			"table shop.types: rows=0 expected=",
			"DIFF (table does not exist)",
			"verify: 4 of 4 tables differ",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("output lacks %q:\n%s", want, s)
			}
		}
		// The same outcome as one JSON object (--json).
		out.Reset()
		err = verify(ctx, cfgPath, expPath, 10, &out, true)
		var rep verifyReport
		if !errors.Is(err, exitCode(1)) || json.Unmarshal(out.Bytes(), &rep) != nil {
			t.Fatalf("--json: %v\n%s", err, out.String())
		}
		if rep.OK || rep.Differing != 4 || len(rep.Tables) != 4 || rep.Tables[0].Table != "shop.customers" ||
			strings.Join(rep.Tables[0].Reasons, ", ") != "1 missing keys, 1 duplicate keys, 1 differing rows" || len(rep.Tables[0].Diffs) != 3 {
			t.Fatalf("--json report %+v", rep)
		}
	})

	t.Run("type mismatch and absent column", func(t *testing.T) {
		dir := t.TempDir()
		writeTables(t, dir, g, nil, nil)
		mut := exp
		mut.Tables = append([]workload.ExpectedTable(nil), exp.Tables...)
		ev := &mut.Tables[2]
		ev.Columns = append([]workload.ExpectedColumn(nil), ev.Columns...)
		ev.Columns[1].Type = "int"
		ev.Columns = append(ev.Columns, workload.ExpectedColumn{Name: "gone", Type: "string"})
		rows := make([][]*string, len(ev.Rows))
		for i, r := range ev.Rows {
			rows[i] = append(append([]*string(nil), r...), nil)
		}
		ev.Rows = rows
		mut.Tables = mut.Tables[2:3]
		cfgPath, expPath := writeConfigAndExpected(t, dir, mut)
		var out bytes.Buffer
		err := verify(ctx, cfgPath, expPath, 10, &out, false)
		if !errors.Is(err, exitCode(1)) {
			t.Fatalf("got %v\n%s", err, out.String())
		}
		for _, want := range []string{"column kind has type string, want int", "column gone (string) does not exist", "DIFF (2 column differences)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	})
}

func TestTargetTable(t *testing.T) {
	et := workload.ExpectedTable{Source: "shop.customers", Namespace: "shop", Name: "customers"}
	for _, tc := range []struct {
		cfg      sink.Config
		ns, name string
	}{
		{sink.Config{}, "shop", "customers"},
		{sink.Config{Namespace: "lake"}, "lake", "customers"},
		{sink.Config{Namespace: "lake", Tables: map[string]sink.TableConfig{"shop.customers": {Name: "cust"}}}, "lake", "cust"},
		{sink.Config{Namespace: "lake", Tables: map[string]sink.TableConfig{"shop.customers": {Namespace: "crm"}}}, "crm", "customers"},
		{sink.Config{Tables: map[string]sink.TableConfig{"shop.other": {Namespace: "x", Name: "y"}}}, "shop", "customers"},
	} {
		ns, name := targetTable(tc.cfg, et)
		if ns != tc.ns || name != tc.name {
			t.Errorf("%+v: got %s.%s, want %s.%s", tc.cfg, ns, name, tc.ns, tc.name)
		}
	}
}

func TestVerifyInputErrors(t *testing.T) {
	ctx := context.Background()
	if err := runVerify(ctx, nil); err == nil || !strings.Contains(err.Error(), "--expected is required") {
		t.Fatalf("got %v", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	b, _ := json.Marshal(map[string]any{"version": 99})
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("stream: s\ndata_dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verify(ctx, cfgPath, bad, 10, &bytes.Buffer{}, false); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("got %v", err)
	}
	if err := verify(ctx, cfgPath, filepath.Join(dir, "nope.json"), 10, &bytes.Buffer{}, false); err == nil {
		t.Fatal("missing expected file accepted")
	}
}
