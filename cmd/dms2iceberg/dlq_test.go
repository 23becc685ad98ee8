package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

type countAck struct{ n atomic.Int64 }

func (c *countAck) Done(n int) { c.n.Add(int64(n)) }

func dmsData(op, table string, data string) []byte {
	return []byte(fmt.Sprintf(`{"data":%s,"metadata":{"timestamp":"2025-01-01T00:00:00.000000Z","record-type":"data","operation":%q,"partition-key-type":"schema-table","schema-name":"shop","table-name":%q,"transaction-id":1}}`+"\n", data, op, table))
}

// runSink feeds raw DMS records (shard s0, sequence numbers from 1) through a sink with cfg and
// its dead-letter table, and closes it.
func runSink(t *testing.T, cfg Config, records ...[]byte) {
	t.Helper()
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	snk, err := sink.New(cfg.Sink, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- snk.Run(ctx) }()
	dec := dms.NewDecoder(cfg.DMS)
	ack := &countAck{}
	for i, raw := range records {
		ev := &change.Event{}
		pos := change.Position{Stream: cfg.Stream, Shard: "s0", Seq: fmt.Sprint(i + 1)}
		if err := dec.Decode(raw, ev); err != nil {
			if err := snk.DeadLetters().DeadLetter(ctx, change.DeadLetter{Stream: pos.Stream, Shard: pos.Shard, Seq: pos.Seq, Reason: err.Error(), Raw: raw}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		ev.Pos, ev.Raw, ev.Ack = pos, raw, ack
		if err := snk.Submit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := snk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDLQReplayAfterAFix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("stream: st\ndata_dir: "+dir+"\nsink:\n  maintenance:\n    enabled: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	// No key configured and no create-table: the table is keyless; the update and the delete
	// are dead-lettered, as is a record that does not decode.
	runSink(t, cfg,
		dmsData("insert", "users", `{"id":1,"name":"a"}`),
		dmsData("insert", "users", `{"id":2,"name":"b"}`),
		dmsData("update", "users", `{"id":1,"name":"a2"}`),
		dmsData("delete", "users", `{"id":2}`),
		[]byte(`{"broken":`),
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
	if len(rows) != 3 || rows[0].Class != sink.ClassKeyless || rows[1].Class != sink.ClassKeyless || rows[2].Class != sink.ClassDecode {
		t.Fatalf("dead letters %+v", rows)
	}
	var list bytes.Buffer
	if err := listDeadLetters(&list, rows, true); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(list.String(), "\n"); n != 3 || !strings.Contains(list.String(), `"error_class":"keyless_change"`) {
		t.Fatalf("list:\n%s", list.String())
	}

	// The fix: a primary key for shop.users. Replay applies the update and the delete; the
	// broken record fails again.
	cfg.Sink.Tables = map[string]sink.TableConfig{"shop.users": {PrimaryKey: []string{"id"}}}
	res, err := replayDeadLetters(ctx, cfg, cat, rows, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if res.applied != 2 || res.failed != 1 {
		t.Fatalf("replay: %+v", res)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"shop", "users"})
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			id, _ := dms.RenderArrow(rec.Column(0), i, tbl.Schema().Field(0).Type)
			name, _ := dms.RenderArrow(rec.Column(1), i, tbl.Schema().Field(1).Type)
			got = append(got, id+"="+name)
		}
		rec.Release()
	}
	if strings.Join(got, ",") != "1=a2" {
		t.Fatalf("rows after replay: %v", got)
	}
	after, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, r := range after {
		if !r.ReplayedAt.IsZero() {
			replayed++
		}
	}
	if len(after) != 3 || replayed != 2 {
		t.Fatalf("after replay: %d rows, %d replayed: %+v", len(after), replayed, after)
	}
	// Nothing left to replay but the broken record.
	var f dlqFilter
	left := 0
	for _, r := range after {
		if f.match(r, "st") {
			left++
		}
	}
	if left != 1 {
		t.Fatalf("%d dead letters left to replay, want 1", left)
	}
}

func TestDecodeStream(t *testing.T) {
	in := `{"control":{"table-def":{"columns":{"id":{"type":"INT4","nullable":false},"d":{"type":"NUMERIC","precision":5,"scale":2}},"primary-key":["id"]}},"metadata":{"record-type":"control","operation":"create-table","schema-name":"s","table-name":"t"}}
{
	"data":	{"id":	1, "d":	1.5},
	"metadata":	{"record-type":	"data", "operation":	"insert", "schema-name":	"s", "table-name":	"t"}
}
{"data":{"id":2,"d":1.234},"metadata":{"record-type":"data","operation":"insert","schema-name":"s","table-name":"t"}}
not json
`
	var out bytes.Buffer
	st, err := decodeStream(context.Background(), strings.NewReader(in), &out, dms.NewNormalizer(dms.DefaultConfig(), dms.TypeOptions{}), false)
	if err != nil {
		t.Fatal(err)
	}
	if st.messages != 4 || st.errors != 1 || st.convertErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var rec dms.Record
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Line != 2 || rec.Op != "insert" || rec.Columns[1].Type != "decimal(5, 2)" || *rec.Columns[1].Value != "1.50" {
		t.Fatalf("record %s", lines[1])
	}
}

func TestTableEnv(t *testing.T) {
	env := map[string]string{
		envInclude:     "shop.*, crm.users",
		envExclude:     "shop.tmp_*",
		envTables:      `{"shop.orders": {primary_key: [id], partition: [{column: id, transform: bucket, n: 8}]}}`,
		envDropTable:   "mark",
		envDeadLetters: "file",
		envHashKey:     "k",
	}
	c := sink.DefaultConfig()
	if err := applyTableEnv(&c, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if len(c.Include) != 2 || c.Include[1] != "crm.users" || c.Exclude[0] != "shop.tmp_*" || c.DropTable != "mark" ||
		c.DeadLetters.Type != "file" || string(c.HashKey) != "k" || c.Tables["shop.orders"].Partition[0].N != 8 {
		t.Fatalf("config %+v", c)
	}
	env[envTables] = `{"shop.orders": {partition: [{column: id}]}}`
	if err := applyTableEnv(&c, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "DMS2ICEBERG_TABLES: sink.tables[shop.orders].partition: requires primary_key") {
		t.Fatalf("error %v", err)
	}
	env[envTables] = `{"shop.orders": {primary_kee: [id]}}`
	if err := applyTableEnv(&c, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "DMS2ICEBERG_TABLES") {
		t.Fatalf("error %v", err)
	}
}

// replay --dry-run --json: one JSON object per dead letter with the action replay would take.
func TestDryReplayJSON(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "stream: s\nsink:\n  exclude: [shop.skip]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(table string) []byte {
		return []byte(`{"data":{"id":1},"metadata":{"timestamp":"2024-01-01T00:00:00.000000Z","record-type":"data","operation":"insert","partition-key-type":"schema-table","schema-name":"shop","table-name":"` + table + `"}}`)
	}
	rows := []sink.StoredDeadLetter{
		{DeadLetter: change.DeadLetter{Shard: "s-1", Seq: "1", Class: "decode", Reason: "bad", Raw: []byte("{not json")}},
		{DeadLetter: change.DeadLetter{Shard: "s-1", Seq: "2", Class: "keyless_change", Reason: "no key", Raw: rec("orders")}},
		{DeadLetter: change.DeadLetter{Shard: "s-1", Seq: "3", Class: "convert", Reason: "x", Raw: rec("skip")}},
	}
	var out bytes.Buffer
	if err := dryReplay(&out, cfg, rows, true); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	var got []string
	for dec.More() {
		var l dryReplayLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Seq+":"+l.Action+":"+l.Table)
	}
	if want := "1:undecodable:,2:apply:shop.orders,3:skip:shop.skip"; strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}
