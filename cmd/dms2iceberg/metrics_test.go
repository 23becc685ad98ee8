package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// scrape GETs url and returns its samples keyed as the text format prints them
// ("name{labels}", labels sorted by name).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	samples, err := metrictest.Scrape(http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	return metrictest.ByKey(samples)
}

func TestMetricsScrape(t *testing.T) {
	m := newPromMetrics()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.now = func() time.Time { return now }
	hc := &health{onChange: m.SetReady}
	srv := httptest.NewServer(opsHandler(m.reg, hc))
	defer srv.Close()

	// Sink.
	m.sink.Committed(sink.CommitInfo{Table: "shop.orders", Source: "shop.orders", SnapshotID: 42, Rows: 10, Deletes: 4, Trimmed: 2,
		Attempts: 2, Took: 250 * time.Millisecond, Oldest: now.Add(-3 * time.Second), VectorsDeclined: true})
	m.sink.Committed(sink.CommitInfo{Table: "shop.orders", Rows: 5, Deletes: 1, Attempts: 1, Took: 50 * time.Millisecond, Vectors: true})
	m.sink.CommitFailed("shop.orders")
	m.sink.CommitUnknown("shop.orders", sink.UnknownLanded)
	m.sink.CommitUnknown("shop.orders", sink.UnknownNotLanded)
	m.sink.CommitUnknown("shop.orders", sink.UnknownNotLanded)
	m.sink.CommitUnknown("shop.orders", sink.UnknownAnotherWriter)
	m.sink.DeadLettered("shop.events")
	m.sink.Skipped("shop.orders", 7)
	m.sink.PartialImages("shop.orders", 3, 2, 1)
	// Consumer.
	c := m.consumer
	c.Records("shard-0", 100, 1500)
	c.Records("shard-0", 50, 0)
	c.DeadLettered("shard-1")
	c.Checkpointed("shard-0", "123")
	c.Fenced("shard-1")
	c.TrimmedPast("shard-1")
	c.WaitingForParents("shard-2", true)
	// KCL.
	var k kclMonitorAPI = kclMonitor{promKCLMetrics: m.kcl, onStart: hc.KCLStarted, onStop: hc.KCLStopped}
	k.IncrBytesProcessed("shard-0", 2048)
	k.LeaseGained("shard-0")
	k.LeaseRenewed("shard-0")
	k.RecordGetRecordsTime("shard-0", 20)
	k.RecordProcessRecordsTime("shard-0", 30)
	k.MillisBehindLatest("shard-1", 900)
	k.DeleteMetricMillisBehindLatest("shard-1")
	// Hook.
	m.hook.HookRan("shop.orders", "ok", time.Second)
	m.hook.HookRan("shop.orders", "timeout", time.Second)
	m.hook.HookDropped("shop.orders")
	m.hook.HookQueued(3)

	got := scrape(t, srv.URL+"/metrics")
	want := map[string]float64{
		`dms2iceberg_table_commits_total{table="shop.orders"}`:                                             2,
		`dms2iceberg_table_vector_commits_total{table="shop.orders"}`:                                      1,
		`dms2iceberg_table_vector_declines_total{table="shop.orders"}`:                                     1,
		`dms2iceberg_table_rows_total{table="shop.orders"}`:                                                15,
		`dms2iceberg_table_deletes_total{table="shop.orders"}`:                                             5,
		`dms2iceberg_table_trimmed_total{table="shop.orders"}`:                                             2,
		`dms2iceberg_table_skipped_total{table="shop.orders"}`:                                             7,
		`dms2iceberg_table_partial_images_total{completed_from="batch",table="shop.orders"}`:               3,
		`dms2iceberg_table_partial_images_total{completed_from="table",table="shop.orders"}`:               2,
		`dms2iceberg_table_partial_images_total{completed_from="none",table="shop.orders"}`:                1,
		`dms2iceberg_table_commit_failures_total{table="shop.orders"}`:                                     1,
		`dms2iceberg_table_commit_unknown_outcomes_total{resolution="landed",table="shop.orders"}`:         1,
		`dms2iceberg_table_commit_unknown_outcomes_total{resolution="not_landed",table="shop.orders"}`:     2,
		`dms2iceberg_table_commit_unknown_outcomes_total{resolution="another_writer",table="shop.orders"}`: 1,
		`dms2iceberg_table_dead_letters_total{table="shop.events"}`:                                        1,
		`dms2iceberg_table_commit_duration_seconds_count{table="shop.orders"}`:                             2,
		`dms2iceberg_table_commit_duration_seconds_sum{table="shop.orders"}`:                               0.3,
		`dms2iceberg_table_commit_attempts_sum{table="shop.orders"}`:                                       3,
		`dms2iceberg_table_freshness_seconds{table="shop.orders"}`:                                         3,
		`dms2iceberg_table_last_commit_timestamp_seconds{table="shop.orders"}`:                             float64(now.Unix()),
		`dms2iceberg_shard_records_total{shard="shard-0"}`:                                                 150,
		`dms2iceberg_shard_behind_latest_seconds{shard="shard-0"}`:                                         0,
		`dms2iceberg_shard_undecodable_records_total{shard="shard-1"}`:                                     1,
		`dms2iceberg_shard_checkpoints_total{shard="shard-0"}`:                                             1,
		`dms2iceberg_shard_last_checkpoint_timestamp_seconds{shard="shard-0"}`:                             float64(now.Unix()),
		`dms2iceberg_shard_checkpoints_fenced_total{shard="shard-1"}`:                                      1,
		`dms2iceberg_shard_checkpoint_past_retention_total{shard="shard-1"}`:                               1,
		`dms2iceberg_shard_waiting_for_parents{shard="shard-2"}`:                                           1,
		`dms2iceberg_shard_bytes_total{shard="shard-0"}`:                                                   2048,
		`dms2iceberg_shard_lease_held{shard="shard-0"}`:                                                    1,
		`dms2iceberg_shard_lease_events_total{event="gained"}`:                                             1,
		`dms2iceberg_shard_lease_events_total{event="renewed"}`:                                            1,
		`dms2iceberg_shard_get_records_seconds_sum{shard="shard-0"}`:                                       0.02,
		`dms2iceberg_shard_process_records_seconds_count{shard="shard-0"}`:                                 1,
		`dms2iceberg_post_commit_runs_total{result="ok",table="shop.orders"}`:                              1,
		`dms2iceberg_post_commit_runs_total{result="timeout",table="shop.orders"}`:                         1,
		`dms2iceberg_post_commit_dropped_total{table="shop.orders"}`:                                       1,
		`dms2iceberg_post_commit_queue_length`:                                                             3,
		`dms2iceberg_post_commit_duration_seconds_count`:                                                   2,
		`dms2iceberg_ready`: 0,
	}
	for name, v := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing from the scrape", name)
			continue
		}
		if diff := g - v; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", name, g, v)
		}
	}
	if _, ok := got[`dms2iceberg_shard_behind_latest_seconds{shard="shard-1"}`]; ok {
		t.Error("behind_latest_seconds of shard-1 still exported after its lease was lost")
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("go runtime metrics missing")
	}
}

// kclMonitorAPI is the part of the KCL's MonitoringService the test drives.
type kclMonitorAPI interface {
	IncrBytesProcessed(string, int64)
	LeaseGained(string)
	LeaseRenewed(string)
	RecordGetRecordsTime(string, float64)
	RecordProcessRecordsTime(string, float64)
	MillisBehindLatest(string, float64)
	DeleteMetricMillisBehindLatest(string)
}

func TestHealthAndReadiness(t *testing.T) {
	m := newPromMetrics()
	hc := &health{onChange: m.SetReady}
	srv := httptest.NewServer(opsHandler(m.reg, hc))
	defer srv.Close()
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	ready := func() float64 { return scrape(t, srv.URL+"/metrics")["dms2iceberg_ready"] }
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d", got)
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before start = %d, want 503", got)
	}
	hc.CatalogOpened()
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the KCL started = %d, want 503", got)
	}
	k := kclMonitor{promKCLMetrics: m.kcl, onStart: hc.KCLStarted, onStop: hc.KCLStopped}
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz after start = %d, want 200", got)
	}
	if ready() != 1 {
		t.Fatal("dms2iceberg_ready != 1 while ready")
	}
	hc.ShuttingDown()
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while shutting down = %d, want 503", got)
	}
	if ready() != 0 {
		t.Fatal("dms2iceberg_ready != 0 while shutting down")
	}
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz while shutting down = %d", got)
	}

	hc2 := &health{}
	hc2.CatalogOpened()
	hc2.KCLStarted()
	hc2.Failed(errors.New("sink: boom"))
	if err := hc2.Ready(); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Ready after a fatal error = %v", err)
	}
	hc3 := &health{}
	hc3.CatalogOpened()
	hc3.KCLStarted()
	hc3.KCLStopped()
	if hc3.Ready() == nil {
		t.Fatal("ready after the KCL worker stopped")
	}
}

func TestOpsServerRunAndShutdown(t *testing.T) {
	m := newPromMetrics()
	ops, err := listenOps("127.0.0.1:0", m.reg, &health{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ops.Run(ctx) }()
	if got := scrape(t, "http://"+ops.Addr()+"/metrics"); len(got) == 0 {
		t.Fatal("empty scrape")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get("http://" + ops.Addr() + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Fatal("server still answering after Run returned")
	}
	// A taken address is an error for listenOps (serve decides whether it is fatal).
	ln, err := listenOps("127.0.0.1:0", m.reg, &health{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.ln.Close()
	if _, err := listenOps(ln.Addr(), m.reg, &health{}, zap.NewNop()); err == nil {
		t.Fatal("listenOps on a taken address succeeded")
	}
}
