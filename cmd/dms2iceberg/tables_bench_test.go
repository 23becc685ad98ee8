package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// BenchmarkManyTables (make bench-tables) runs many tables at a fixed total
// rate through the decoder, the process-wide byte budget and the Iceberg sink (SQLite catalog,
// local warehouse, maintenance on, ordering arrival with a commit bound always past every
// record), as four shard readers do, without Kinesis: each reader admits a delivery of records
// against the budget, decodes it and submits it; every acknowledgement releases its bytes. It
// reports the process's peak RSS (VmHWM: run one record size per process, as the make target
// does), msgs/cpu-s (messages per CPU-second of the whole process), the achieved rate, the
// budget's peak use and the time readers waited for it. Sizes and rate: BENCH_TABLES (200),
// BENCH_RATE (1000 changes/s in total), BENCH_SECONDS (60), BENCH_BUDGET
// (consumer.max_inflight_bytes, default 128 MiB); the Go soft memory limit is the service's
// (applyMemoryLimit: following what the budget holds unless GOMEMLIMIT is set; go-mem-limit-MiB
// is the highest it was set to), and so is GOGC (applyGCPercent, reported as gogc). Maintenance runs as in the
// service (BENCH_MAINTENANCE=0 turns it off). heap-kept-MiB is the heap live after the final
// flush: what the tables keep between flushes. BENCH_HEAPPROFILE writes heap and goroutine
// profiles at nine tenths of the run. Skipped unless DMS2ICEBERG_BENCH_TABLES=1.
func BenchmarkManyTables(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"0.4KiB", 410}, {"64KiB", 64 << 10}} {
		b.Run("record="+size.name, func(b *testing.B) {
			if os.Getenv("DMS2ICEBERG_BENCH_TABLES") != "1" {
				b.Skip("set DMS2ICEBERG_BENCH_TABLES=1 (make bench-tables)")
			}
			for b.Loop() {
				benchManyTables(b, size.bytes)
			}
		})
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// peakRSS is the process's peak resident set (VmHWM) in bytes.
func peakRSS(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// ticks paces a benchmark's sender: one round every tick; a sender that falls behind does not
// catch up (the achieved rate is what is reported).
type ticks struct {
	every time.Duration
	next  time.Time
}

func newTicks(every time.Duration) *ticks { return &ticks{every: every, next: time.Now()} }

// wait sleeps until the next round is due.
func (t *ticks) wait() {
	if d := time.Until(t.next); d > 0 {
		time.Sleep(d)
	}
	t.next = t.next.Add(t.every)
	if now := time.Now(); t.next.Before(now) {
		t.next = now
	}
}

// writeProfiles writes the heap profile to path, after a collection (the profile shows the heap
// as of the last completed one, without what was allocated since), and the goroutine profile
// beside it (path.goroutines).
func writeProfiles(path string) {
	runtime.GC()
	for name, file := range map[string]string{"heap": path, "goroutine": path + ".goroutines"} {
		if f, err := os.Create(file); err == nil {
			_ = pprof.Lookup(name).WriteTo(f, map[string]int{"heap": 0, "goroutine": 1}[name])
			_ = f.Close()
		}
	}
}

// benchRecord is a DMS insert of table bench.<tbl> of about size bytes.
// The record is allocated at its size, as the SDK allocates each record it decodes: the byte
// budget counts len, so a record with spare capacity would hold more than the budget says.
func benchRecord(tbl string, id int, pad string) []byte {
	return fmt.Appendf(make([]byte, 0, len(pad)+256), `{"data":{"id":%d,"payload":%q},"metadata":{"timestamp":"2026-12-01T00:00:00.000000Z","record-type":"data","operation":"insert","partition-key-type":"schema-table","schema-name":"bench","table-name":"%s"}}`,
		id, pad, tbl)
}

func benchManyTables(b *testing.B, size int) {
	tables, rate, seconds := envInt("BENCH_TABLES", 200), envInt("BENCH_RATE", 1000), envInt("BENCH_SECONDS", 60)
	limit := int64(envInt("BENCH_BUDGET", membudget.DefaultLimit))
	const readers = 4
	cfg := sink.DefaultConfig()
	cfg.Catalog = sink.DefaultCatalogConfig(b.TempDir())
	cfg.Stream = "bench"
	cfg.Maintenance.Enabled = os.Getenv("BENCH_MAINTENANCE") != "0" // as the service runs
	cfg.Maintenance.Concurrency = envInt("BENCH_MAINTENANCE_CONCURRENCY", 0)
	cfg.Tables = map[string]sink.TableConfig{"bench.*": {PrimaryKey: []string{"id"}}}
	cat, err := sink.OpenCatalog(context.Background(), cfg.Catalog)
	if err != nil {
		b.Fatal(err)
	}
	budget := membudget.New(limit)
	memLimit, limiter := applyMemoryLimit(budget) // as the service does
	defer debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(gcPercentNow())
	gogc := applyGCPercent()
	var limiterDone sync.WaitGroup
	limiterCtx, stopLimiter := context.WithCancel(context.Background())
	if limiter != nil {
		limiterDone.Go(func() { _ = limiter.run(limiterCtx) })
	}
	stopLimiterOnce := sync.OnceFunc(func() { stopLimiter(); limiterDone.Wait() })
	defer stopLimiterOnce()
	far := time.Now().Add(24 * time.Hour)
	s, err := sink.New(cfg, cat, nopDLQ{}, sink.WithMemoryBudget(budget), sink.WithCommitBound(func() time.Time { return far }))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// A record's fixed part is about 200 bytes; the payload makes up the rest.
	pad := strings.Repeat("x", max(size-200, 1))
	var sent atomic.Int64
	var peakHeld atomic.Int64
	stopSample := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		profileAt := time.After(time.Duration(seconds) * time.Second * 9 / 10)
		for {
			select {
			case <-stopSample:
				return
			case <-profileAt:
				if path := os.Getenv("BENCH_HEAPPROFILE"); path != "" { // near the end, with the goroutines
					writeProfiles(path)
				}
			case <-t.C:
				if h := budget.Held(); h > peakHeld.Load() {
					peakHeld.Store(h)
				}
			}
		}
	})
	// Every reader sends its share of the rate in deliveries every 100 ms, each record to the
	// next table in turn; a reader that falls behind (blocked by the budget) does not catch up.
	const tick = 100 * time.Millisecond
	perTick := max(rate*int(tick/time.Millisecond)/1000/readers, 1)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	w0, c0 := time.Now(), cpuTime()
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Go(func() {
			acct := budget.Account()
			dec := dms.NewDecoder(dms.DefaultConfig())
			ack := &benchAcker{}
			shard := fmt.Sprintf("shardId-%012d", r)
			seq, tk := 0, newTicks(tick)
			for time.Now().Before(deadline) {
				tk.wait()
				recs := make([][]byte, perTick)
				var n int64
				for i := range recs {
					k := seq*readers + r
					recs[i] = benchRecord(fmt.Sprintf("t%03d", k%tables), k/tables%1000, pad)
					n += int64(len(recs[i]))
					seq++
				}
				if err := acct.Acquire(ctx, n); err != nil {
					errs <- err
					return
				}
				events := make([]change.Event, len(recs))
				acks := make([]membudget.Ack, len(recs))
				for i, data := range recs {
					ev := &events[i]
					if err := dec.DecodeShared(data, ev); err != nil {
						errs <- err
						return
					}
					ev.Pos = change.Position{Stream: "bench", Shard: shard, Seq: strconv.Itoa(1_000_000_000 + seq - len(recs) + i)}
					ev.Arrival = time.Now().Truncate(time.Millisecond)
					acks[i] = membudget.Ack{Inner: ack, Account: acct, N: int64(len(data))}
					ev.Raw, ev.Ack = data, &acks[i]
					if err := s.Submit(ctx, ev); err != nil {
						errs <- err
						return
					}
				}
				sent.Add(int64(len(recs)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	wall := time.Since(w0)
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime() - c0
	close(stopSample)
	sampler.Wait()
	stopLimiterOnce()
	if limiter != nil {
		memLimit = limiter.top.Load()
	}
	n := sent.Load()
	if held := budget.Held(); held != 0 {
		b.Fatalf("the budget still holds %d bytes after the final flush: acknowledgements are missing", held)
	}
	rss := peakRSS(b)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms) // Sys: what the Go runtime took from the OS (RSS beyond it is not Go's)
	runtime.GC()              // what the tables keep between flushes: the heap after the last flush
	var kept runtime.MemStats
	runtime.ReadMemStats(&kept)
	_ = s.Close(context.Background())
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatalf("sink Run: %v", err)
	}
	b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(n)/cpu.Seconds(), "msgs/cpu-s")
	b.ReportMetric(float64(n)/wall.Seconds(), "msgs/s")
	b.ReportMetric(float64(peakHeld.Load())/(1<<20), "budget-peak-MiB")
	b.ReportMetric(budget.Blocked().Seconds(), "blocked-s")
	b.ReportMetric(float64(len(s.Buffers())), "tables")
	b.ReportMetric(float64(memLimit)/(1<<20), "go-mem-limit-MiB")
	b.ReportMetric(float64(gogc), "gogc")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "go-sys-MiB")
	b.ReportMetric(float64(kept.HeapAlloc)/(1<<20), "heap-kept-MiB")
}
