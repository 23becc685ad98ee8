package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// BenchmarkHotTable (make bench-hot) runs 1, 2, 4 and 8 writers committing to
// one table, as workers do that each own some of a stream's shards under primary-key
// partitioning: every writer is a sink of its own (its own catalog handle, as a separate
// process has), reads its own shard and writes its own keys, and all of them commit to the same
// Iceberg table through a shared catalog. The total rate is fixed (BENCH_RATE changes/s, split
// evenly), for BENCH_SECONDS, flush interval 1 s, maintenance off. It reports successful commits
// per second, commit attempts per successful commit, rows/s and the freshness p50 and p99 (from
// a change's arrival at its writer to the commit that holds it). The catalog is BENCH_CATALOG:
// "postgres" (DMS2ICEBERG_IT_POSTGRES_URI, as `.ci/catalogs.sh env` prints it), "rest"
// (DMS2ICEBERG_IT_REST_URI) or "sqlite" (the embedded default). Skipped unless
// DMS2ICEBERG_BENCH_HOT=1.
func BenchmarkHotTable(b *testing.B) {
	for _, writers := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			if os.Getenv("DMS2ICEBERG_BENCH_HOT") != "1" {
				b.Skip("set DMS2ICEBERG_BENCH_HOT=1 (make bench-hot)")
			}
			for b.Loop() {
				benchHotTable(b, writers)
			}
		})
	}
}

// hotCatalog is the catalog configuration BENCH_CATALOG names, and a namespace of its own.
func hotCatalog(b *testing.B) (sink.CatalogConfig, string) {
	ns := fmt.Sprintf("hot%d", time.Now().UnixNano())
	switch c := os.Getenv("BENCH_CATALOG"); c {
	case "", "postgres":
		uri := os.Getenv("DMS2ICEBERG_IT_POSTGRES_URI")
		if uri == "" {
			b.Fatal(`DMS2ICEBERG_IT_POSTGRES_URI is not set: eval "$(.ci/catalogs.sh env)" after make catalogs-up`)
		}
		return sink.CatalogConfig{Type: "sql", Name: "dms2iceberg", URI: uri, Warehouse: "file://" + b.TempDir()}, ns
	case "rest":
		uri := os.Getenv("DMS2ICEBERG_IT_REST_URI")
		if uri == "" {
			b.Fatal(`DMS2ICEBERG_IT_REST_URI is not set: eval "$(.ci/catalogs.sh env)" after make catalogs-up`)
		}
		return sink.CatalogConfig{Type: "rest", Name: "dms2iceberg", URI: uri}, ns
	case "sqlite":
		return sink.DefaultCatalogConfig(b.TempDir()), ns
	default:
		b.Fatalf("BENCH_CATALOG %q: want postgres, rest or sqlite", c)
	}
	return sink.CatalogConfig{}, ""
}

// hotMetrics counts one writer's commits.
type hotMetrics struct {
	sink.NopMetrics
	mu                      sync.Mutex
	commits, attempts, rows int
	fresh                   []time.Duration
}

func (m *hotMetrics) Committed(info sink.CommitInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commits++
	m.attempts += info.Attempts
	m.rows += info.Rows
	if !info.Oldest.IsZero() {
		m.fresh = append(m.fresh, time.Since(info.Oldest))
	}
}

func benchHotTable(b *testing.B, writers int) {
	rate, seconds := envInt("BENCH_RATE", 2000), envInt("BENCH_SECONDS", 30)
	catCfg, ns := hotCatalog(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	far := time.Now().Add(24 * time.Hour)
	type writer struct {
		s       *sink.Iceberg
		metrics *hotMetrics
		done    chan error
	}
	ws := make([]*writer, writers)
	for i := range ws {
		cfg := sink.DefaultConfig()
		cfg.Catalog = catCfg
		cfg.Stream = "bench"
		cfg.Namespace = ns
		cfg.FlushInterval = time.Second
		cfg.Maintenance.Enabled = false
		cfg.Tables = map[string]sink.TableConfig{"bench.*": {PrimaryKey: []string{"id"}}}
		cat, err := sink.OpenCatalog(ctx, cfg.Catalog)
		if err != nil {
			b.Fatal(err)
		}
		w := &writer{metrics: &hotMetrics{}, done: make(chan error, 1)}
		s, err := sink.New(cfg, cat, nopDLQ{}, sink.WithMetrics(w.metrics), sink.WithCommitBound(func() time.Time { return far }))
		if err != nil {
			b.Fatal(err)
		}
		w.s = s
		go func() { w.done <- s.Run(ctx) }()
		ws[i] = w
	}
	const tick = 100 * time.Millisecond
	perTick := max(rate*int(tick/time.Millisecond)/1000/writers, 1)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	w0 := time.Now()
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for wi, w := range ws {
		wg.Go(func() {
			dec := dms.NewDecoder(dms.DefaultConfig())
			ack := &benchAcker{}
			rng := rand.New(rand.NewPCG(uint64(wi), 1))
			shard := fmt.Sprintf("shardId-%012d", wi)
			seq, tk := 0, newTicks(tick)
			for time.Now().Before(deadline) {
				tk.wait()
				for range perTick {
					// This writer's keys: a key's changes stay on one shard (primary-key partitioning).
					id := rng.IntN(100_000)*writers + wi
					ev := &change.Event{}
					if err := dec.Decode(benchRecord("hot", id, "payload"), ev); err != nil {
						errs <- err
						return
					}
					seq++
					ev.Pos = change.Position{Stream: "bench", Shard: shard, Seq: strconv.Itoa(1_000_000_000 + seq)}
					ev.Arrival = time.Now().Truncate(time.Millisecond)
					ev.Ack = ack
					if err := w.s.Submit(ctx, ev); err != nil {
						errs <- err
						return
					}
				}
				sent.Add(int64(perTick))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for _, w := range ws {
		if err := w.s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	wall := time.Since(w0)
	commits, attempts, rows := 0, 0, 0
	var fresh []time.Duration
	for _, w := range ws {
		_ = w.s.Close(context.Background())
		w.metrics.mu.Lock()
		commits += w.metrics.commits
		attempts += w.metrics.attempts
		rows += w.metrics.rows
		fresh = append(fresh, w.metrics.fresh...)
		w.metrics.mu.Unlock()
	}
	cancel()
	for _, w := range ws {
		if err := <-w.done; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatalf("sink Run: %v", err)
		}
	}
	if commits == 0 {
		b.Fatal("no commit")
	}
	slices.Sort(fresh)
	pct := func(p float64) time.Duration { return fresh[min(len(fresh)-1, int(p*float64(len(fresh))))] }
	b.ReportMetric(float64(commits)/wall.Seconds(), "commits/s")
	b.ReportMetric(float64(attempts)/float64(commits), "attempts/commit")
	b.ReportMetric(float64(rows)/wall.Seconds(), "rows/s")
	b.ReportMetric(float64(sent.Load())/wall.Seconds(), "sent/s")
	b.ReportMetric(pct(0.5).Seconds(), "fresh-p50-s")
	b.ReportMetric(pct(0.99).Seconds(), "fresh-p99-s")
}
