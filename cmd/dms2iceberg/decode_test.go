package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// decodeRulesMessages: a create-table and inserts of shop.users, whose configuration masks
// email, hashes code (its configured primary key, overriding the table-def's id), excludes
// secret, and stores TIME as Iceberg time.
const decodeRulesMessages = `{"control":{"table-def":{"columns":{"id":{"type":"INT4","nullable":false},"code":{"type":"STRING","length":10,"nullable":false},"email":{"type":"STRING","length":50},"secret":{"type":"STRING","length":50},"at":{"type":"TIME"},"note":{"type":"STRING","length":50}},"primary-key":["id"]}},"metadata":{"record-type":"control","operation":"create-table","schema-name":"shop","table-name":"users"}}
{"data":{"id":1,"code":"A-1","email":"a@example.com","secret":"s1","at":"12:34:56","note":"first"},"metadata":{"record-type":"data","operation":"load","schema-name":"shop","table-name":"users"}}
{"data":{"id":2,"code":"B-2","email":null,"secret":"s2","at":"01:02:03.5","note":"second"},"metadata":{"record-type":"data","operation":"insert","schema-name":"shop","table-name":"users"}}
`

const decodeRulesConfig = `stream: s
sink:
  time_type: time
  tables:
    shop.users:
      primary_key: [code]
      hash_columns: [code]
      mask_columns: [email]
      exclude_columns: [secret]
`

// decode --config shows the table the sink writes: the same columns (the excluded one marked
// and never typed), the same key and types, and the very values the sink stored (masked,
// hashed, TIME as time), read back from the table the sink wrote from the same messages.
func TestDecodeAppliesTheSinksColumnRules(t *testing.T) {
	t.Setenv(envHashKey, "k")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(decodeRulesConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runDecodeWith(t, decodeRulesMessages, "--config", cfgPath)
	var recs []dms.Record
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var r dms.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("decode printed %d records:\n%s", len(recs), out)
	}

	// What the sink stores from the same messages, with the same configuration.
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sink.Catalog = sink.DefaultCatalogConfig(filepath.Join(dir, "wh"))
	stored := sinkTable(t, cfg.Sink, decodeRulesMessages, table.Identifier{"shop", "users"}, "id")

	def := recs[0].Control.TableDef
	if strings.Join(def.PrimaryKey, ",") != "code" {
		t.Errorf("decode's primary key %v, want the configured [code]", def.PrimaryKey)
	}
	for _, c := range def.Columns {
		want, ok := stored.types[c.Name]
		if c.Iceberg != want || (c.Rule == dms.RuleExclude) == ok {
			t.Errorf("table-def column %s: decode says type %q rule %q, the sink stored type %q (present %v)", c.Name, c.Iceberg, c.Rule, want, ok)
		}
	}
	if strings.Join(stored.key, ",") != "code" {
		t.Errorf("the sink's key %v", stored.key)
	}
	sameAsStored(t, recs[1:], stored)
	if want := map[string]string{"email": dms.RuleMask, "code": dms.RuleHash, "secret": dms.RuleExclude, "id": "", "at": "", "note": ""}; len(recs[1].Columns) != len(want) {
		t.Errorf("columns %+v", recs[1].Columns)
	} else {
		for _, f := range recs[1].Columns {
			if f.Rule != want[f.Name] {
				t.Errorf("column %s: rule %q, want %q", f.Name, f.Rule, want[f.Name])
			}
		}
	}
}

// decode --config without a table-def types the values as the sink creates the table: from
// the configured columns and primary_key, with a column the configuration does not declare
// added as the sink adds it (inferred, here masked).
func TestDecodeTypesLikeTheSinksConfiguredTable(t *testing.T) {
	const msgs = `{"data":{"sku":"X-1","qty":3,"price":"12.5","note":"n1"},"metadata":{"record-type":"data","operation":"insert","schema-name":"shop","table-name":"items"}}
{"data":{"sku":"X-2","qty":-1,"price":7,"note":null},"metadata":{"record-type":"data","operation":"insert","schema-name":"shop","table-name":"items"}}
`
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(`stream: s
sink:
  tables:
    shop.items:
      primary_key: [sku]
      mask_columns: [note]
      columns:
        - {name: sku, type: STRING, length: 10, nullable: false}
        - {name: qty, type: INT2}
        - {name: price, type: NUMERIC, precision: 8, scale: 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var recs []dms.Record
	for line := range strings.SplitSeq(runDecodeWith(t, msgs, "--config", cfgPath), "\n") {
		var r dms.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		recs = append(recs, r)
	}
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sink.Catalog = sink.DefaultCatalogConfig(filepath.Join(dir, "wh"))
	stored := sinkTable(t, cfg.Sink, msgs, table.Identifier{"shop", "items"}, "sku")
	if len(recs) != 2 || stored.types["price"] != "decimal(8, 2)" || strings.Join(stored.key, ",") != "sku" {
		t.Fatalf("decode printed %d records; the sink stored types %v key %v", len(recs), stored.types, stored.key)
	}
	sameAsStored(t, recs, stored)
	if f := recs[0].Columns[0]; !f.Key {
		t.Errorf("sku is not shown as the key: %+v", f)
	}
}

// sameAsStored fails unless every column of the data records recs shows the type and value the
// sink stored in the row of the same key (the first column), or is excluded and not stored.
func sameAsStored(t *testing.T, recs []dms.Record, stored storedTable) {
	t.Helper()
	for _, r := range recs {
		row := stored.rows[r.Columns[0].Text]
		if row == nil {
			t.Fatalf("the sink stored no row with key %s: %v", r.Columns[0].Text, stored.rows)
		}
		for _, f := range r.Columns {
			got, ok := "", f.Rule != dms.RuleExclude
			if f.Value != nil {
				got = *f.Value
			}
			want, has := row[f.Name]
			if ok != has || got != want || (ok && f.Type != stored.types[f.Name]) {
				t.Errorf("record %d column %s: decode shows %q (type %q, rule %q, error %q), the sink stored %q (type %q, present %v)",
					r.N, f.Name, got, f.Type, f.Rule, f.Error, want, stored.types[f.Name], has)
			}
		}
	}
}

// runDecodeWith runs the decode command on in and returns its stdout.
func runDecodeWith(t *testing.T, in string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(inPath, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	inF, err := os.Open(inPath)
	if err != nil {
		t.Fatal(err)
	}
	defer inF.Close()
	outF, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outF.Close()
	stdin, stdout, stderr := os.Stdin, os.Stdout, os.Stderr
	os.Stdin, os.Stdout, os.Stderr = inF, outF, outF
	err = runDecode(context.Background(), args)
	os.Stdin, os.Stdout, os.Stderr = stdin, stdout, stderr
	if err != nil {
		t.Fatalf("decode %v: %v", args, err)
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	// The summary went to the same file (stderr); keep the JSON lines.
	var lines []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "{") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// storedTable is a table as the sink wrote it: column types, key, and every row's rendered
// values by column name, keyed by the rendered value of one column.
type storedTable struct {
	types map[string]string
	key   []string
	rows  map[string]map[string]string
}

// sinkTable runs msgs through the decoder and the sink with cfg and reads the table back.
func sinkTable(t *testing.T, cfg sink.Config, msgs string, ident table.Identifier, keyCol string) storedTable {
	t.Helper()
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.New(cfg, cat, nopDLQ{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	dec := dms.NewDecoder(dms.DefaultConfig())
	ack := &benchAcker{}
	sc := dms.NewScanner(strings.NewReader(msgs))
	n := 0
	for sc.Scan() {
		ev := &change.Event{}
		data := bytes.Clone(sc.Message())
		if err := dec.Decode(data, ev); err != nil {
			t.Fatal(err)
		}
		n++
		ev.Pos = change.Position{Stream: cfg.Stream, Shard: "shardId-000000000000", Seq: string(rune('0' + n))}
		ev.Raw, ev.Ack = data, ack
		if err := s.Submit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ack.n.Load(); got != int64(n) {
		t.Fatalf("the sink acknowledged %d of %d records", got, n)
	}
	_ = s.Close(ctx)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("sink Run: %v", err)
	}
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	sch := tbl.Schema()
	st := storedTable{types: map[string]string{}, rows: map[string]map[string]string{}}
	for _, f := range sch.Fields() {
		st.types[f.Name] = f.Type.String()
	}
	for _, id := range sch.IdentifierFieldIDs {
		f, _ := sch.FindFieldByID(id)
		st.key = append(st.key, f.Name)
	}
	sort.Strings(st.key)
	_, recs, err := tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]string{}
			for ci, f := range sch.Fields() {
				v, _ := dms.RenderArrow(rec.Column(ci), i, f.Type)
				row[f.Name] = v
			}
			st.rows[row[keyCol]] = row
		}
		rec.Release()
	}
	return st
}
