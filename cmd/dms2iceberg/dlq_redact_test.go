package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// The values sink.tables keeps out of the lake; none may appear in a dead letter. They are long
// enough that a listing's timestamps and hashes cannot hold them by chance (a 4-digit value once
// matched a microsecond timestamp, ".301238Z").
var clearValues = []string{"new@example.com", "222-22-2222", "secret note", "c@example.com", "333-33-3333",
	"other note", "0999888777", "555-55-5555"}

func noClearValue(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range clearValues {
		if strings.Contains(s, v) {
			t.Fatalf("%s holds the clear value %q:\n%s", what, v, s)
		}
	}
}

func TestDLQRedactsColumnRulesAndReplays(t *testing.T) {
	t.Setenv(envHashKey, "k")
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	conf := "stream: st\ndata_dir: " + dir + "\nsink:\n  maintenance:\n    enabled: false\n  tables:\n    shop.people:\n" +
		"      hash_columns: [email]\n      mask_columns: [ssn]\n      exclude_columns: [notes]\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	// A keyless table (no key configured, no create-table): the update is dead-lettered; a
	// non-number in the int column age fails conversion; a malformed number in the masked
	// column does not decode (its reason quotes it); a record that is not JSON cannot be
	// matched with a table.
	runSink(t, cfg,
		dmsData("insert", "people", `{"id":1,"email":"a@example.com","ssn":"111-11-1111","notes":"n","age":30}`),
		dmsData("update", "people", `{"id":1,"email":"new@example.com","ssn":"222-22-2222","notes":"secret note","age":31}`),
		dmsData("insert", "people", `{"id":2,"email":"c@example.com","ssn":"333-33-3333","notes":"other note","age":"abc"}`),
		dmsData("insert", "people", `{"id":3,"ssn":0999888777}`),
		[]byte(`{"data":{"ssn":"555-55-5555"`),
	)
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	ident := table.Identifier{"dms2iceberg", "dead_letters"}
	rows, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Class)
		noClearValue(t, "dead letter "+r.Seq, string(r.Raw)+"\n"+r.Reason)
	}
	if !slices.Equal(got, []string{sink.ClassKeyless, sink.ClassConvert, sink.ClassDecode, sink.ClassDecode}) {
		t.Fatalf("dead letters %v", got)
	}
	if cols := dms.RedactedColumns(rows[0].Raw); cols["email"] != dms.RuleHash || cols["ssn"] != dms.RuleMask || cols["notes"] != dms.RuleExclude {
		t.Fatalf("redacted columns of %s: %v", rows[0].Raw, cols)
	}
	for _, asJSON := range []bool{false, true} {
		var list bytes.Buffer
		if err := listDeadLetters(&list, rows, asJSON); err != nil {
			t.Fatal(err)
		}
		noClearValue(t, "dlq list", list.String())
	}

	// The fix: a primary key. The update replays with the values the sink stores (email hashed
	// once, ssn masked, notes absent); so does the record that did not decode only because of
	// its masked value. The others fail again, still redacted.
	pc := cfg.Sink.Tables["shop.people"]
	pc.PrimaryKey = []string{"id"}
	cfg.Sink.Tables["shop.people"] = pc
	res, err := replayDeadLetters(ctx, cfg, cat, rows, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if res.applied != 2 || res.failed != 2 {
		t.Fatalf("replay: %+v", res)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"shop", "people"})
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := cfg.Sink.Rules("shop.people").Value("email", change.Value{Kind: change.KindString, Text: "new@example.com"})
	// The table was created keyless, so it keeps the (null) DMS record identity column.
	want := "id=1,email=" + hash.Text + ",ssn=****,age=31,_dms_record_id=null\nid=3,email=null,ssn=****,age=null,_dms_record_id=null"
	if got := renderRows(t, tbl); strings.Join(got, "\n") != want {
		t.Fatalf("rows after replay:\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
	after, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range after {
		noClearValue(t, "dead letter "+r.Seq+" after replay", string(r.Raw)+"\n"+r.Reason)
	}
}

// renderRows renders each row of tbl as "col=value,..." in schema order.
func renderRows(t *testing.T, tbl *table.Table) []string {
	t.Helper()
	_, recs, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var parts []string
			for _, f := range tbl.Schema().Fields() {
				idx := rec.Schema().FieldIndices(f.Name)
				if len(idx) == 0 {
					continue
				}
				v, ok := dms.RenderArrow(rec.Column(idx[0]), i, f.Type)
				if !ok {
					v = "null"
				}
				parts = append(parts, f.Name+"="+v)
			}
			out = append(out, strings.Join(parts, ","))
		}
		rec.Release()
	}
	slices.Sort(out)
	return out
}

// A dead letter stored in clear before dead letters kept the column rules loses its clear
// values when dlq replay marks it replayed.
func TestDLQReplayRedactsAClearRow(t *testing.T) {
	t.Setenv(envHashKey, "k")
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	conf := "stream: st\ndata_dir: " + dir + "\nsink:\n  maintenance:\n    enabled: false\n  tables:\n    shop.people:\n" +
		"      primary_key: [id]\n      mask_columns: [ssn]\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	// The table itself, without the redacting wrapper: how rows were written before.
	tdl := sink.NewTableDeadLetters(cat, cfg.Sink.DeadLetters, 3, nil, nil)
	done := make(chan error, 1)
	go func() { done <- tdl.Run(ctx) }()
	raw := dmsData("insert", "people", `{"id":7,"ssn":"222-22-2222"}`)
	if err := tdl.DeadLetter(ctx, change.DeadLetter{Stream: "st", Shard: "s0", Seq: "1", Table: "shop.people", Class: sink.ClassConvert, Reason: "old", Raw: raw}); err != nil {
		t.Fatal(err)
	}
	// One that still does not decode (a malformed number in the key) stays dead-lettered,
	// redacted now.
	bad := dmsData("insert", "people", `{"id":07,"ssn":"555-55-5555"}`)
	if err := tdl.DeadLetter(ctx, change.DeadLetter{Stream: "st", Shard: "s0", Seq: "2", Reason: "old", Raw: bad}); err != nil {
		t.Fatal(err)
	}
	tdl.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ident := table.Identifier{"dms2iceberg", "dead_letters"}
	rows, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	res, err := replayDeadLetters(ctx, cfg, cat, rows, zap.NewNop())
	if err != nil || res.applied != 1 || res.failed != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	after, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 || after[0].ReplayedAt.IsZero() || !after[1].ReplayedAt.IsZero() {
		t.Fatalf("after replay: %+v", after)
	}
	for _, r := range after {
		noClearValue(t, "dead letter "+r.Seq+" after replay", string(r.Raw)+"\n"+r.Reason)
	}
}

// verify expects the injected bad records as the sink stores them: redacted.
func TestVerifyDeadLettersExpectsRedactedPayloads(t *testing.T) {
	t.Setenv(envHashKey, "k")
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	conf := "stream: st\ndata_dir: " + dir + "\nsink:\n  maintenance:\n    enabled: false\n  tables:\n    shop.people:\n" +
		"      mask_columns: [ssn]\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	update := dmsData("update", "people", `{"id":1,"ssn":"222-22-2222"}`)
	runSink(t, cfg, dmsData("insert", "people", `{"id":1,"ssn":"111-11-1111"}`), update)
	cat, err := sink.OpenCatalog(context.Background(), cfg.Sink.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	want := []workload.ExpectedDeadLetter{{Class: sink.ClassKeyless, Table: "shop.people", Payload: base64.StdEncoding.EncodeToString(update)}}
	e, err := verifyDeadLetters(context.Background(), cfg, cat, want, 5)
	if err != nil || !e.OK {
		t.Fatalf("verify: %+v, %v", e, err)
	}
}
