package main

import (
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink"
)

// expect fails the test for every series of want that the scrape lacks or has another value.
func expect(t *testing.T, got, want map[string]float64) {
	t.Helper()
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
}

// A commit observes the end-to-end lag: the commit time (the metrics clock) minus the source
// time of the newest change it took; a commit without a source time observes nothing, and a
// source clock ahead of ours counts as no lag.
func TestEndToEndLag(t *testing.T) {
	t.Parallel()
	m := newPromMetrics()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	srv := httptest.NewServer(opsHandler(m.reg, &health{onChange: m.SetReady}))
	defer srv.Close()

	m.sink.Committed(sink.CommitInfo{Table: "shop.orders", Rows: 3, Attempts: 1, SourceNewest: now.Add(-90 * time.Second)})
	m.sink.Committed(sink.CommitInfo{Table: "shop.orders", Rows: 1, Attempts: 1}) // no source time
	m.sink.Committed(sink.CommitInfo{Table: "shop.items", Rows: 1, Attempts: 1, SourceNewest: now.Add(-2 * time.Second)})
	m.sink.Committed(sink.CommitInfo{Table: "shop.items", Rows: 1, Attempts: 1, SourceNewest: now.Add(time.Second)}) // skew
	got := scrape(t, srv.URL+"/metrics")
	expect(t, got, map[string]float64{
		`dms2iceberg_table_end_to_end_lag_seconds_count{table="shop.orders"}`:           1,
		`dms2iceberg_table_end_to_end_lag_seconds_sum{table="shop.orders"}`:             90,
		`dms2iceberg_table_end_to_end_lag_seconds_bucket{table="shop.orders",le="60"}`:  0,
		`dms2iceberg_table_end_to_end_lag_seconds_bucket{table="shop.orders",le="120"}`: 1,
		`dms2iceberg_table_last_end_to_end_lag_seconds{table="shop.orders"}`:            90,
		`dms2iceberg_table_end_to_end_lag_seconds_count{table="shop.items"}`:            2,
		`dms2iceberg_table_end_to_end_lag_seconds_sum{table="shop.items"}`:              2,
		`dms2iceberg_table_last_end_to_end_lag_seconds{table="shop.items"}`:             0,
	})
}

// The queue and buffer gauges read the sink's Buffers at scrape time: a table's series follow
// what it holds, and none exist before the sink is wired.
func TestBufferGauges(t *testing.T) {
	t.Parallel()
	m := newPromMetrics()
	srv := httptest.NewServer(opsHandler(m.reg, &health{onChange: m.SetReady}))
	defer srv.Close()
	if got := scrape(t, srv.URL+"/metrics"); len(got) == 0 {
		t.Fatal("empty scrape")
	} else if _, ok := got[`dms2iceberg_table_queue_length{table="shop.orders"}`]; ok {
		t.Fatal("queue_length exported before a sink was wired")
	}
	var stats atomic.Pointer[[]sink.BufferStat] // read on the server's goroutine
	stats.Store(&[]sink.BufferStat{{Table: "shop.orders", Queued: 7, QueueCapacity: 8192, Rows: 120, Bytes: 40960}})
	m.sink.watchBuffers(func() []sink.BufferStat { return *stats.Load() })
	expect(t, scrape(t, srv.URL+"/metrics"), map[string]float64{
		`dms2iceberg_table_queue_length{table="shop.orders"}`:   7,
		`dms2iceberg_table_queue_capacity{table="shop.orders"}`: 8192,
		`dms2iceberg_table_buffered_rows{table="shop.orders"}`:  120,
		`dms2iceberg_table_buffered_bytes{table="shop.orders"}`: 40960,
	})
	stats.Store(&[]sink.BufferStat{{Table: "shop.orders", QueueCapacity: 8192}})
	expect(t, scrape(t, srv.URL+"/metrics"), map[string]float64{
		`dms2iceberg_table_queue_length{table="shop.orders"}`:   0,
		`dms2iceberg_table_buffered_rows{table="shop.orders"}`:  0,
		`dms2iceberg_table_buffered_bytes{table="shop.orders"}`: 0,
	})
}
