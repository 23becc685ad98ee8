//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// editConfig rewrites a service's YAML configuration: the keys of set replace those of section
// ("" for the top level, "sink" for the sink section), other keys stay.
func editConfig(t *testing.T, path, section string, set map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	dst := cfg
	if section != "" {
		dst, _ = cfg[section].(map[string]any)
		if dst == nil {
			dst = map[string]any{}
		}
		cfg[section] = dst
	}
	maps.Copy(dst, set)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func opsStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestOpsMetricsAndStatus runs a small generated workload through the service with /metrics on
// a free port and a post-commit hook, waits until the tables are verified, then checks that the
// scrape shows non-zero values for the key per-shard and per-table metrics, that the hook ran for
// every table, and that `dms2iceberg status` lists the run's tables and shards.
func TestOpsMetricsAndStatus(t *testing.T) {
	p := newPipeline(t, 2, 2000, 7)
	addr := opsFreeAddr(t)
	hookOut := filepath.Join(t.TempDir(), "hook.log")
	editConfig(t, p.config, "", map[string]any{
		"http_addr":  addr,
		"log_format": "json",
		"post_commit": map[string]any{
			"command": []string{"sh", "-c", `echo "$DMS2ICEBERG_TABLE $DMS2ICEBERG_SNAPSHOT_ID" >> "$0"`, hookOut},
			"timeout": "10s",
		},
	})
	exp, err := func() (workload.Expected, error) {
		f, err := os.Open(p.expected)
		if err != nil {
			return workload.Expected{}, err
		}
		defer f.Close()
		return workload.DecodeExpected(f)
	}()
	if err != nil {
		t.Fatal(err)
	}
	const worker = "ops-worker-1"
	svc := StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID="+worker)
	base := "http://" + addr

	WaitFor(t, 2*time.Minute, 200*time.Millisecond, func() (bool, error) {
		if svc.Exited() {
			return false, fmt.Errorf("service exited:\n%s", tailFile(svc.LogPath, 8<<10))
		}
		return opsStatus(base+"/readyz") == http.StatusOK, nil
	}, "/readyz to answer 200")
	if got := opsStatus(base + "/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d", got)
	}
	p.waitVerified(10*time.Minute, svc)

	// Checkpoints follow commits by up to one read interval: poll until everything is there.
	var samples []metrictest.Sample
	var tables []string
	WaitFor(t, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		var err error
		if samples, err = metrictest.Scrape(scrapeClient, base+"/metrics"); err != nil {
			return false, err
		}
		var missing []string
		need := func(name, label string, want int) map[string]float64 {
			m := metrictest.ByLabel(samples, name, label)
			n := 0
			for _, v := range m {
				if v > 0 {
					n++
				}
			}
			if n < want {
				missing = append(missing, fmt.Sprintf("%s: %d %s values > 0, want %d (%v)", name, n, label, want, m))
			}
			return m
		}
		nt := len(exp.Tables)
		need("dms2iceberg_shard_records_total", "shard", 2)
		need("dms2iceberg_shard_bytes_total", "shard", 2)
		need("dms2iceberg_shard_checkpoints_total", "shard", 2)
		need("dms2iceberg_shard_last_checkpoint_timestamp_seconds", "shard", 2)
		need("dms2iceberg_shard_lease_held", "shard", 2)
		need("dms2iceberg_shard_get_records_seconds_count", "shard", 2)
		commits := need("dms2iceberg_table_commits_total", "table", nt)
		need("dms2iceberg_table_rows_total", "table", nt)
		need("dms2iceberg_table_commit_duration_seconds_count", "table", nt)
		need("dms2iceberg_table_freshness_seconds", "table", nt)
		need("dms2iceberg_table_last_commit_timestamp_seconds", "table", nt)
		need("dms2iceberg_table_deletes_total", "table", 1) // the keyed tables see deletes and updates
		need("dms2iceberg_post_commit_runs_total", "table", nt)
		need("dms2iceberg_ready", "", 1)
		tables = tables[:0]
		for tbl := range commits {
			tables = append(tables, tbl)
		}
		sort.Strings(tables)
		if len(missing) > 0 {
			return false, fmt.Errorf("%s", strings.Join(missing, "\n"))
		}
		return true, nil
	}, "non-zero per-shard and per-table metrics")

	records := 0.0
	for _, v := range metrictest.ByLabel(samples, "dms2iceberg_shard_records_total", "shard") {
		records += v
	}
	if records < float64(p.records) {
		t.Errorf("dms2iceberg_shard_records_total sums to %.0f, want at least the %d records in the stream", records, p.records)
	}
	if ok := metrictest.ByLabel(samples, "dms2iceberg_post_commit_runs_total", "result")["ok"]; ok == 0 {
		t.Errorf("no successful post-commit hook run: %v", metrictest.ByLabel(samples, "dms2iceberg_post_commit_runs_total", "result"))
	}
	hookLines, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatalf("hook output: %v", err)
	}
	for _, tbl := range tables {
		if !strings.Contains(string(hookLines), tbl+" ") {
			t.Errorf("the post-commit hook never ran for %s:\n%s", tbl, hookLines)
		}
	}

	// status: the readable form lists the tables, the shards and this worker as their owner.
	stdout, stderr, err := RunCLI(t, p.bin, "status", "--config", p.config)
	if err != nil {
		t.Fatalf("status: %v\n%s%s", err, stdout, stderr)
	}
	t.Logf("status:\n%s", stdout)
	shards := metrictest.ByLabel(samples, "dms2iceberg_shard_records_total", "shard")
	for _, want := range append(append([]string{"SHARDS (2)", fmt.Sprintf("TABLES (%d)", len(exp.Tables)), worker}, tables...), keys(shards)...) {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	// The JSON form: every shard has a checkpoint, a committed watermark and a lag; every
	// table a commit and rows.
	stdout, stderr, err = RunCLI(t, p.bin, "status", "--config", p.config, "--json")
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, stderr)
	}
	var rep struct {
		Shards []struct {
			Shard, Owner, Checkpoint string
			Committed                string   `json:"committed_watermark"`
			Lag                      *float64 `json:"lag_seconds"`
			LagError                 string   `json:"lag_error"`
		}
		Tables []struct {
			Table      string
			LastCommit *time.Time `json:"last_commit"`
			Rows       int64
			SnapshotID string `json:"snapshot_id"`
		}
		Errors []string
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	if len(rep.Errors) > 0 {
		t.Errorf("status reported errors: %v", rep.Errors)
	}
	if len(rep.Shards) != 2 {
		t.Errorf("status --json: %d shards, want 2", len(rep.Shards))
	}
	for _, s := range rep.Shards {
		if s.Owner != worker || s.Checkpoint == "" || s.Committed == "" || (s.Lag == nil && s.LagError == "") {
			t.Errorf("status --json shard %+v", s)
		}
	}
	if len(rep.Tables) != len(exp.Tables) {
		t.Errorf("status --json: %d tables, want %d", len(rep.Tables), len(exp.Tables))
	}
	for _, tb := range rep.Tables {
		if tb.LastCommit == nil || tb.Rows == 0 || tb.SnapshotID == "" {
			t.Errorf("status --json table %+v", tb)
		}
	}

	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	// The JSON log carries the routed KCL and iceberg lines as JSON too: every line parses.
	logb, _ := os.ReadFile(svc.LogPath)
	for i, line := range strings.Split(strings.TrimSpace(string(logb)), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("log line %d is not JSON (log_format: json): %q", i+1, line)
			break
		}
	}
	var commitsTotal, rowsTotal, deletesTotal, latSum, latCount, freshMax float64
	for _, s := range samples {
		switch s.Name {
		case "dms2iceberg_table_commits_total":
			commitsTotal += s.Value
		case "dms2iceberg_table_rows_total":
			rowsTotal += s.Value
		case "dms2iceberg_table_deletes_total":
			deletesTotal += s.Value
		case "dms2iceberg_table_commit_duration_seconds_sum":
			latSum += s.Value
		case "dms2iceberg_table_commit_duration_seconds_count":
			latCount += s.Value
		case "dms2iceberg_table_freshness_seconds":
			freshMax = max(freshMax, s.Value)
		}
	}
	t.Logf("MEASURED: %d records over 2 shards, %d tables: %.0f commits, %.0f rows, %.0f deletes, mean commit %.0f ms, last-batch freshness max %.2f s (from /metrics)",
		p.records, len(tables), commitsTotal, rowsTotal, deletesTotal, 1000*latSum/max(latCount, 1), freshMax)
}

func keys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
