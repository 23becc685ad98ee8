package main

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Lag is exported in seconds, build info as a constant 1, and a shard's series disappear when
// its lease ends (lost, closed by a reshard, or the worker stopping).
func TestMetricsBaseUnitsBuildInfoAndShardRemoval(t *testing.T) {
	m := newPromMetrics()
	srv := httptest.NewServer(opsHandler(m.reg, &health{}))
	defer srv.Close()
	c := m.consumer
	for _, sh := range []string{"shard-0", "shard-1"} {
		m.kcl.LeaseGained(sh)
		c.Records(sh, 10, 2500)
		c.Checkpointed(sh, "1")
		m.kcl.IncrBytesProcessed(sh, 100)
		m.kcl.RecordGetRecordsTime(sh, 5)
	}
	c.StreamWatermark(time.Unix(100, 0), time.Second, "shard-1", "w")
	m.sink.Filtered("shop.tmp_1", 2)
	m.sink.Filtered("shop.tmp_2", 3)

	got := scrape(t, srv.URL+"/metrics")
	if v := got[`dms2iceberg_shard_behind_latest_seconds{shard="shard-0"}`]; v != 2.5 {
		t.Errorf("behind_latest_seconds = %v, want 2.5", v)
	}
	if v := got[`dms2iceberg_source_filtered_total`]; v != 5 {
		t.Errorf("source_filtered_total = %v, want 5 in one series", v)
	}
	found := false
	for name, v := range got {
		if strings.HasPrefix(name, "dms2iceberg_build_info{") {
			found = v == 1 && strings.Contains(name, `go_version="`+runtime.Version()+`"`) && strings.Contains(name, `version="`)
		}
	}
	if !found {
		t.Error("dms2iceberg_build_info{version,revision,go_version} 1 missing")
	}

	m.kcl.DeleteMetricMillisBehindLatest("shard-1")
	m.kcl.LeaseLost("shard-1")
	got = scrape(t, srv.URL+"/metrics")
	for name := range got {
		if strings.Contains(name, `shard="shard-1"`) {
			t.Errorf("%s still exported after the lease of shard-1 ended", name)
		}
	}
	for _, name := range []string{`dms2iceberg_shard_records_total{shard="shard-0"}`, `dms2iceberg_shard_lease_held{shard="shard-0"}`} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s removed with shard-1's series", name)
		}
	}
	if v := got[`dms2iceberg_shard_lease_events_total{event="lost"}`]; v != 1 {
		t.Errorf("lease_events_total{event=lost} = %v, want 1 (kept after the shard's series are gone)", v)
	}
}

// /healthz fails once a shard's records have waited longer than the stall timeout without a
// checkpoint, and recovers with the checkpoint; idle shards and released shards never fail it.
func TestHealthzFailsWhenRecordsWaitWithoutProgress(t *testing.T) {
	m := newPromMetrics()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	m.consumer.stall.setTimeout(time.Minute)
	srv := httptest.NewServer(opsHandler(m.reg, &health{stall: m.consumer.stall}))
	defer srv.Close()
	status := func() int {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	c := m.consumer
	c.Records("idle", 0, 0) // an empty read waits for nothing
	c.Records("s-0", 5, 0)
	now = now.Add(50 * time.Second)
	c.Records("s-0", 5, 0) // later deliveries do not restart the clock
	if got := status(); got != 200 {
		t.Fatalf("within the timeout: %d", got)
	}
	now = now.Add(11 * time.Second)
	if got := status(); got != 503 {
		t.Fatalf("records waiting 61s without a checkpoint: %d, want 503", got)
	}
	c.Checkpointed("s-0", "9")
	if got := status(); got != 200 {
		t.Fatalf("after the checkpoint: %d", got)
	}
	c.Records("s-1", 1, 0)
	now = now.Add(2 * time.Minute)
	m.kcl.LeaseLost("s-1")
	if got := status(); got != 200 {
		t.Fatalf("after the lease of the waiting shard ended: %d", got)
	}
	m.consumer.stall.setTimeout(0)
	c.Records("s-2", 1, 0)
	now = now.Add(time.Hour)
	if got := status(); got != 200 {
		t.Fatalf("check disabled: %d", got)
	}
}

func TestStallTimeoutDefault(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "stream: s\nshutdown_timeout: 30s\nsink:\n  flush_interval: 2s\n  tables:\n    a.b: {flush_interval: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.stallTimeout(); got != time.Minute {
		t.Fatalf("default %s, want 3 × 10s + 30s", got)
	}
	cfg.StallTimeout = 5 * time.Minute
	if got := cfg.stallTimeout(); got != 5*time.Minute {
		t.Fatalf("set: %s", got)
	}
	cfg.StallTimeout = -1
	if got := cfg.stallTimeout(); got != 0 {
		t.Fatalf("negative: %s, want 0 (off)", got)
	}
}
