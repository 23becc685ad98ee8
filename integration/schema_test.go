//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// TestSchemaChangesAndDeadLetters runs the generated workload's schema-change scenario (columns
// added, renamed, widened and dropped; a table created, another created and dropped, mid-stream)
// with injected bad records through a 4-shard stream. verify must pass (it also checks the
// dead-letter table), the dead-letter table must hold exactly the injected records, the dropped
// table must be marked, and `dms2iceberg dlq list` and `decode` must work on the result.
func TestSchemaChangesAndDeadLetters(t *testing.T) {
	RequireEmulators(t)
	const bad = 16
	p := preparePipeline(t)
	start := time.Now()
	_, stderr, err := RunCLI(t, p.bin, "gen", "--stream", p.stream, "--shards", "4", "--changes", "6000",
		"--load-rows", "300", "--seed", "11", "--schema-changes", "--bad-records", strconv.Itoa(bad),
		"--expected", p.expected, "--tables-config", p.tablesCfg)
	if err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	p.records = countRecords(t, p.stream)
	t.Logf("gen wrote %d records in %s", p.records, time.Since(start).Round(time.Millisecond))
	p.writeConfig(map[string]any{"drop_table": "mark"})

	svc := StartService(t, p.bin, p.config)
	p.waitVerified(10*time.Minute, svc)
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	ok, report := p.verify()
	if !ok {
		t.Fatalf("verify after stop:\n%s", report)
	}
	if !strings.Contains(report, "dead letters dms2iceberg.dead_letters: rows="+strconv.Itoa(bad)+" expected="+strconv.Itoa(bad)+" ok") {
		t.Fatalf("verify did not check the dead letters:\n%s", report)
	}

	// The dead-letter table holds exactly the injected records, each once, with its class.
	f, err := os.Open(p.expected)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := workload.DecodeExpected(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(p.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sink.ReadDeadLetters(ctx, cat, table.Identifier{"dms2iceberg", "dead_letters"})
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, dl := range exp.DeadLetters {
		raw, _ := base64.StdEncoding.DecodeString(dl.Payload)
		want = append(want, dl.Class+"|"+dl.Table+"|"+string(raw))
	}
	classes := map[string]int{}
	for _, r := range rows {
		got = append(got, r.Class+"|"+r.Table+"|"+string(r.Raw))
		classes[r.Class]++
		if r.Stream != p.stream || r.Shard == "" || r.Seq == "" || r.Reason == "" {
			t.Errorf("incomplete dead letter %+v", r)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("dead-letter table:\n%s\nwant exactly the injected records:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("dead letters by class: %v", classes)

	// The table dropped at the source is marked; the renamed, added, widened and dropped
	// columns are in place (verify compared the rows).
	sessions, err := cat.LoadTable(ctx, table.Identifier{"shop", "sessions"})
	if err != nil {
		t.Fatal(err)
	}
	if st := sessions.Properties()["dms2iceberg.status"]; st != "dropped" {
		t.Fatalf("shop.sessions status %q, want dropped", st)
	}
	customers, err := cat.LoadTable(ctx, table.Identifier{"shop", "customers"})
	if err != nil {
		t.Fatal(err)
	}
	email, _ := customers.Schema().FindFieldByName("email")
	if !strings.HasPrefix(email.Doc, "dms2iceberg: dropped at the source") {
		t.Fatalf("customers.email doc %q", email.Doc)
	}

	// dlq list shows them; decode explains one of them.
	stdout, stderr, err := RunCLI(t, p.bin, "dlq", "list", "--config", p.config, "--json")
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, stderr)
	}
	if n := strings.Count(stdout, "\n"); n != bad {
		t.Fatalf("dlq list printed %d lines, want %d:\n%s", n, bad, stdout)
	}
	var first struct {
		Payload string `json:"payload"`
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Contains(line, `"error_class":"decode"`) && strings.Contains(line, `"payload":"{`) {
			if err := json.Unmarshal([]byte(line), &first); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	cmd := exec.CommandContext(t.Context(), p.bin, "decode")
	cmd.Stdin = strings.NewReader(first.Payload)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if first.Payload == "" || err == nil || !strings.Contains(o.String(), `"error":{"kind":`) || !strings.Contains(e.String(), "1 undecodable") {
		t.Fatalf("decode of a dead letter that does not decode: err %v\n%s\n%s", err, o.String(), e.String())
	}
}
