package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

const verifyUsage = `usage: dms2iceberg verify --config FILE --expected FILE [flags]

Compares the Iceberg tables of the service's catalog with an expected-state file written by
'dms2iceberg gen'. Keyed tables compare by key (missing, unexpected and duplicate keys,
differing columns), keyless tables as multisets of rows. Exits 1 on any difference.

flags:
`

func runVerify(ctx context.Context, args []string) error {
	fs := newFlags("verify", verifyUsage).withConfig("service configuration file (its catalog is read; environment overrides apply)")
	expPath := fs.String("expected", "", "expected-state file written by gen (required)")
	maxDiffs := fs.Int("max-diffs", 10, "differences printed per table")
	asJSON := fs.Bool("json", false, "print one JSON object {ok, differing, tables: [{table, rows, expected, ok, reasons, diffs, more_diffs}]}")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *expPath == "" {
		return usageErrorf("--expected is required")
	}
	return verify(ctx, *fs.configPath, *expPath, *maxDiffs, os.Stdout, *asJSON)
}

func readExpected(path string) (workload.Expected, error) {
	f, err := os.Open(path)
	if err != nil {
		return workload.Expected{}, fmt.Errorf("read expected state: %w", err)
	}
	defer f.Close()
	exp, err := workload.DecodeExpected(f)
	if err != nil {
		return exp, fmt.Errorf("%s: %w", path, err)
	}
	return exp, nil
}

// verify compares every expected table and writes a report to out (text, or one JSON object).
// It returns errExplained when anything differs and an error when the comparison itself could
// not be done.
func verify(ctx context.Context, cfgPath, expPath string, maxDiffs int, out io.Writer, asJSON bool) error {
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		return err
	}
	if err := cfg.requireCatalogRegion(ctx); err != nil {
		return err
	}
	exp, err := readExpected(expPath)
	if err != nil {
		return err
	}
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		return err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	rep := verifyReport{OK: true, Tables: []verifyEntry{}}
	for _, et := range exp.Tables {
		et.Namespace, et.Name = targetTable(cfg.Sink, et)
		res, err := verifyTable(ctx, cat, et)
		if err != nil {
			return fmt.Errorf("verify %s.%s: %w", et.Namespace, et.Name, err)
		}
		rep.add(res.entry(et, maxDiffs))
	}
	if exp.DeadLetters != nil {
		e, err := verifyDeadLetters(ctx, cfg, cat, exp.DeadLetters, maxDiffs)
		if err != nil {
			return err
		}
		rep.add(e)
	}
	if asJSON {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else {
		for _, e := range rep.Tables {
			e.print(out)
		}
		if rep.Differing > 0 {
			fmt.Fprintf(out, "verify: %d of %d tables differ\n", rep.Differing, len(rep.Tables))
		} else {
			fmt.Fprintf(out, "verify: all %d tables match\n", len(exp.Tables))
		}
	}
	if rep.Differing > 0 {
		return errExplained
	}
	return nil
}

// verifyReport is verify's outcome (its --json output).
type verifyReport struct {
	OK        bool          `json:"ok"`
	Differing int           `json:"differing"`
	Tables    []verifyEntry `json:"tables"`
}

func (r *verifyReport) add(e verifyEntry) {
	r.Tables = append(r.Tables, e)
	if !e.OK {
		r.OK = false
		r.Differing++
	}
}

// verifyEntry is the outcome of one table (Kind "table") or of the dead letters.
type verifyEntry struct {
	Kind     string   `json:"kind"`
	Table    string   `json:"table"`
	Rows     int      `json:"rows"`
	Expected int      `json:"expected"`
	OK       bool     `json:"ok"`
	Reasons  []string `json:"reasons,omitempty"`
	// Diffs are the first max-diffs differences; MoreDiffs counts the others.
	Diffs     []string `json:"diffs,omitempty"`
	MoreDiffs int      `json:"more_diffs,omitempty"`
}

// newVerifyEntry keeps the first maxDiffs of diffs.
func newVerifyEntry(kind, name string, rows, expected int, reasons, diffs []string, maxDiffs int) verifyEntry {
	e := verifyEntry{Kind: kind, Table: name, Rows: rows, Expected: expected, OK: len(diffs) == 0, Reasons: reasons, Diffs: diffs}
	if maxDiffs >= 0 && len(diffs) > maxDiffs {
		e.Diffs, e.MoreDiffs = diffs[:maxDiffs], len(diffs)-maxDiffs
	}
	return e
}

// print writes the entry as verify's text lines.
func (e verifyEntry) print(out io.Writer) {
	label := "table"
	if e.Kind == "dead_letters" {
		label = "dead letters"
	}
	if e.OK {
		fmt.Fprintf(out, "%s %s: rows=%d expected=%d ok\n", label, e.Table, e.Rows, e.Expected)
		return
	}
	fmt.Fprintf(out, "%s %s: rows=%d expected=%d DIFF (%s)\n", label, e.Table, e.Rows, e.Expected, strings.Join(e.Reasons, ", "))
	for _, d := range e.Diffs {
		fmt.Fprintf(out, "  %s\n", d)
	}
	if e.MoreDiffs > 0 {
		fmt.Fprintf(out, "  ... %d more\n", e.MoreDiffs)
	}
}

// targetTable resolves where the service writes a source table, as the sink does: a per-table
// namespace and name from sink.tables win over sink.namespace, which wins over the expected
// file's namespace and name (the source schema and table).
func targetTable(sc sink.Config, et workload.ExpectedTable) (string, string) {
	ns, name := et.Namespace, et.Name
	if sc.Namespace != "" {
		ns = sc.Namespace
	}
	if tc, key := sc.TableConfigFor(et.Source); key != "" {
		if tc.Namespace != "" {
			ns = tc.Namespace
		}
		if tc.Name != "" {
			name = tc.Name
		}
	}
	return ns, name
}

// tableResult is the outcome of comparing one table.
type tableResult struct {
	missing bool // the table does not exist
	rows    int  // rows in the table
	// diffs lists every difference; the counters classify the row differences.
	diffs                                       []string
	missingKeys, unexpected, duplicates, differ int
	schemaDiffs                                 int
}

func (r *tableResult) entry(et workload.ExpectedTable, maxDiffs int) verifyEntry {
	name := et.Namespace + "." + et.Name
	var why []string
	if r.missing {
		why = append(why, "table does not exist")
	}
	for _, c := range []struct {
		n    int
		what string
	}{
		{r.schemaDiffs, "column differences"}, {r.missingKeys, "missing keys"}, {r.unexpected, "unexpected keys"},
		{r.duplicates, "duplicate keys"}, {r.differ, "differing rows"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(et.Key) == 0 && !r.missing && r.differ > 0 {
		why[len(why)-1] = fmt.Sprintf("%d distinct rows with a different count", r.differ)
	}
	return newVerifyEntry("table", name, r.rows, len(et.Rows), why, r.diffs, maxDiffs)
}

// verifyTable loads, scans and compares one table.
func verifyTable(ctx context.Context, cat catalog.Catalog, et workload.ExpectedTable) (*tableResult, error) {
	tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		return &tableResult{missing: true, diffs: []string{"table does not exist"}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load table: %w", err)
	}
	res := &tableResult{}
	schema := tbl.Schema()
	types := make([]iceberg.Type, len(et.Columns))
	var selected []string
	for i, c := range et.Columns {
		f, ok := schema.FindFieldByName(c.Name)
		if !ok {
			res.schemaDiffs++
			res.diffs = append(res.diffs, fmt.Sprintf("column %s (%s) does not exist", c.Name, c.Type))
			continue
		}
		if got := f.Type.String(); got != c.Type {
			res.schemaDiffs++
			res.diffs = append(res.diffs, fmt.Sprintf("column %s has type %s, want %s", c.Name, got, c.Type))
		}
		types[i] = f.Type
		selected = append(selected, c.Name)
	}
	var rows [][]*string
	if len(selected) > 0 {
		rows, err = scanRendered(ctx, tbl, et, types, selected)
		if err != nil {
			return nil, err
		}
	}
	res.rows = len(rows)
	present := make([]bool, len(types))
	for i, t := range types {
		present[i] = t != nil
	}
	compareRows(res, et, rows, present)
	return res, nil
}

// scanRendered reads the selected columns of the table's current snapshot and renders every
// value with dms.RenderArrow; rows are aligned with et.Columns (nil where a column is absent).
func scanRendered(ctx context.Context, tbl *table.Table, et workload.ExpectedTable, types []iceberg.Type, selected []string) ([][]*string, error) {
	if tbl.CurrentSnapshot() == nil {
		return nil, nil // created but never written
	}
	_, recs, err := tbl.Scan(table.WithSelectedFields(selected...)).ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan scan: %w", err)
	}
	var rows [][]*string
	var iterErr error
	for rec, err := range recs {
		if err != nil {
			iterErr = err
			break
		}
		idx := make([]int, len(et.Columns))
		for i, c := range et.Columns {
			idx[i] = -1
			if types[i] != nil {
				if f := rec.Schema().FieldIndices(c.Name); len(f) > 0 {
					idx[i] = f[0]
				}
			}
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			row := make([]*string, len(et.Columns))
			for i, ci := range idx {
				if ci < 0 {
					continue
				}
				if s, ok := dms.RenderArrow(rec.Column(ci), r, types[i]); ok {
					row[i] = &s
				}
			}
			rows = append(rows, row)
		}
		rec.Release()
	}
	if iterErr != nil {
		return nil, fmt.Errorf("scan: %w", iterErr)
	}
	return rows, nil
}

// compareRows compares scanned rows with the expected ones, considering only the columns marked
// present, and records the differences in res.
func compareRows(res *tableResult, et workload.ExpectedTable, got [][]*string, present []bool) {
	keyIdx := et.KeyIndexes()
	for _, k := range keyIdx {
		if !present[k] {
			res.diffs = append(res.diffs, "key column "+et.Columns[k].Name+" is missing: rows not compared")
			return
		}
	}
	if len(keyIdx) == 0 {
		compareMultiset(res, et, got, present)
		return
	}
	keyText := func(row []*string) string {
		parts := make([]string, len(keyIdx))
		for i, k := range keyIdx {
			parts[i] = et.Columns[k].Name + "=" + showValue(row[k])
		}
		return strings.Join(parts, ",")
	}
	want := make(map[string][]*string, len(et.Rows))
	var wantOrder []string
	for _, row := range et.Rows {
		k := keyText(row)
		if _, dup := want[k]; !dup {
			wantOrder = append(wantOrder, k)
		}
		want[k] = row
	}
	have := make(map[string][][]*string, len(got))
	var haveOrder []string
	for _, row := range got {
		k := keyText(row)
		if _, seen := have[k]; !seen {
			haveOrder = append(haveOrder, k)
		}
		have[k] = append(have[k], row)
	}
	sort.Strings(haveOrder) // scan order is not deterministic

	for _, k := range haveOrder {
		if n := len(have[k]); n > 1 {
			res.duplicates++
			res.diffs = append(res.diffs, fmt.Sprintf("duplicate key %s: %d rows", k, n))
		}
	}
	for _, k := range wantOrder {
		if _, ok := have[k]; !ok {
			res.missingKeys++
			res.diffs = append(res.diffs, fmt.Sprintf("missing key %s", k))
		}
	}
	for _, k := range haveOrder {
		if _, ok := want[k]; !ok {
			res.unexpected++
			res.diffs = append(res.diffs, fmt.Sprintf("unexpected key %s: %s", k, showRow(et, have[k][0], present)))
		}
	}
	for _, k := range wantOrder {
		rows, ok := have[k]
		if !ok {
			continue
		}
		w := want[k]
		for _, g := range rows {
			var cols []string
			for i := range et.Columns {
				if present[i] && !equalValue(g[i], w[i]) {
					cols = append(cols, fmt.Sprintf("%s got %s want %s", et.Columns[i].Name, showValue(g[i]), showValue(w[i])))
				}
			}
			if len(cols) > 0 {
				res.differ++
				res.diffs = append(res.diffs, fmt.Sprintf("key %s: %s", k, strings.Join(cols, "; ")))
				break
			}
		}
	}
}

// compareMultiset compares a keyless table: every distinct row must occur as often as expected.
func compareMultiset(res *tableResult, et workload.ExpectedTable, got [][]*string, present []bool) {
	rowKey := func(row []*string) string {
		var b strings.Builder
		for i, v := range row {
			if !present[i] {
				continue
			}
			if v == nil {
				b.WriteString("\x00N")
			} else {
				b.WriteString("\x00S")
				b.WriteString(*v)
			}
		}
		return b.String()
	}
	type entry struct {
		row        []*string
		want, have int
	}
	counts := map[string]*entry{}
	var order []string
	add := func(row []*string, isWant bool) {
		k := rowKey(row)
		e := counts[k]
		if e == nil {
			e = &entry{row: row}
			counts[k] = e
			order = append(order, k)
		}
		if isWant {
			e.want++
		} else {
			e.have++
		}
	}
	for _, row := range et.Rows {
		add(row, true)
	}
	for _, row := range got {
		add(row, false)
	}
	sort.Strings(order)
	for _, k := range order {
		e := counts[k]
		if e.want != e.have {
			res.differ++
			res.diffs = append(res.diffs, fmt.Sprintf("row %s: %d in table, %d expected", showRow(et, e.row, present), e.have, e.want))
		}
	}
}

func equalValue(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func showValue(v *string) string {
	if v == nil {
		return "null"
	}
	s := *v
	if len(s) > 60 {
		n := 60
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}

func showRow(et workload.ExpectedTable, row []*string, present []bool) string {
	parts := make([]string, 0, len(row))
	for i, v := range row {
		if present[i] {
			parts = append(parts, et.Columns[i].Name+"="+showValue(v))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// verifyDeadLetters compares the dead letters of the configured stream with the injected bad
// records of the expected state: the same payloads with the same classes, each exactly once.
func verifyDeadLetters(ctx context.Context, cfg Config, cat catalog.Catalog, want []workload.ExpectedDeadLetter, maxDiffs int) (verifyEntry, error) {
	type key struct{ class, payload string }
	counts := map[key]int{}
	for _, dl := range want {
		raw, err := base64.StdEncoding.DecodeString(dl.Payload)
		if err != nil {
			return verifyEntry{}, fmt.Errorf("expected dead letter: %w", err)
		}
		// Dead letters keep the column rules: expect the payload as the sink redacts it.
		raw = cfg.Sink.RedactDeadLetter(change.DeadLetter{Table: dl.Table, Raw: raw}).Raw
		counts[key{dl.Class, string(raw)}]--
	}
	name := ""
	got := 0
	switch cfg.Sink.DeadLetters.Type {
	case sink.DeadLettersTable:
		name = cfg.Sink.DeadLetters.Namespace + "." + cfg.Sink.DeadLetters.Table
		rows, err := sink.ReadDeadLetters(ctx, cat, table.Identifier{cfg.Sink.DeadLetters.Namespace, cfg.Sink.DeadLetters.Table})
		if err != nil {
			return verifyEntry{}, err
		}
		for _, r := range rows {
			if r.Stream == cfg.Stream {
				counts[key{r.Class, string(r.Raw)}]++
				got++
			}
		}
	default:
		name = cfg.DeadLetterFile
		b, err := os.ReadFile(cfg.DeadLetterFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return verifyEntry{}, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			var l struct {
				Stream    string `json:"stream"`
				Table     string `json:"table"`
				Raw       string `json:"raw"`
				RawBase64 []byte `json:"raw_base64"`
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				return verifyEntry{}, fmt.Errorf("dead-letter file: %w", err)
			}
			if l.Stream != cfg.Stream {
				continue
			}
			raw := l.Raw
			if l.RawBase64 != nil {
				raw = string(l.RawBase64)
			}
			// The file has no class column: compare payloads only.
			for k := range counts {
				if k.payload == raw && counts[k] < 0 {
					counts[k]++
					raw = ""
					break
				}
			}
			if raw != "" {
				counts[key{"?", raw}]++
			}
			got++
		}
	}
	var diffs []string
	for k, n := range counts {
		switch {
		case n < 0:
			diffs = append(diffs, fmt.Sprintf("missing %s dead letter: %s", k.class, showValue(&k.payload)))
		case n > 0:
			diffs = append(diffs, fmt.Sprintf("unexpected %s dead letter (%d×): %s", k.class, n, showValue(&k.payload)))
		}
	}
	sort.Strings(diffs)
	var why []string
	if len(diffs) > 0 {
		why = []string{fmt.Sprintf("%d differences", len(diffs))}
	}
	return newVerifyEntry("dead_letters", name, got, len(want), why, diffs, maxDiffs), nil
}
