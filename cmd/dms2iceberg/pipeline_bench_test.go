package main

import (
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

type benchAcker struct{ n atomic.Int64 }

var benchShards = [...]string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}

var arrival0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func (a *benchAcker) Done(n int) { a.n.Add(int64(n)) }

type nopDLQ struct{}

func (nopDLQ) DeadLetter(context.Context, change.DeadLetter) error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPipeline runs the generated DMS workload (create-table, full load, CDC with updates,
// deletes and primary-key changes over four tables) through the decoder and the Iceberg sink
// (SQLite catalog, local warehouse), as the shard processors do, without Kinesis. One op is the
// whole workload; msgs/cpu-s is messages per CPU-second of the whole process, ns/msg the wall
// time per message, MBjson/cpu-s the messages' bytes per CPU-second. The process runs with the
// service's collector settings (serviceGC).
//
// ordering=arrival is what a user gets: sink.DefaultConfig (ordering arrival, delete mode
// equality, keyless identity auto), the records spread round-robin over four shards with arrival
// times, and the ordering guard's commit bound, as the service passes it (run.go), always past
// every record (a caught-up stream: the guard orders everything by arrival and source position
// and holds the control records). make bench-ratio takes its figure from this one. The others
// are the other settings beside it: ordering=shard (no guard), and ordering=arrival,unbound
// (one shard, no arrival times, no commit bound: the guard orders but holds nothing back, what
// this benchmark alone measured before 2026-12-07). The difference between the first two is
// the guard's CPU cost.
func BenchmarkPipeline(b *testing.B) {
	b.Run("ordering=arrival", func(b *testing.B) { benchPipeline(b, userDefaults) })
	b.Run("ordering=shard", func(b *testing.B) {
		benchPipeline(b, pipelineSetup{ordering: sink.OrderingShard, shards: 4})
	})
	b.Run("ordering=arrival,unbound", func(b *testing.B) {
		benchPipeline(b, pipelineSetup{ordering: sink.OrderingArrival, shards: 1})
	})
}

// BenchmarkPipelineKeylessIdentity is BenchmarkPipeline's ordering=arrival with
// sink.keyless_identity auto (the default: the keyless table's inserts that carry transaction
// details, about half, are written with an equality delete of their DMS record identity) and off
// (plain appends): the difference is the identity's cost.
func BenchmarkPipelineKeylessIdentity(b *testing.B) {
	b.Run("keyless_identity=auto", func(b *testing.B) {
		s := userDefaults
		s.identity = sink.KeylessIdentityAuto
		benchPipeline(b, s)
	})
	b.Run("keyless_identity=off", func(b *testing.B) {
		s := userDefaults
		s.identity = sink.KeylessIdentityOff
		benchPipeline(b, s)
	})
}

// pipelineSetup is how benchPipeline runs the workload: the sink's ordering, over how many
// shards (more than one: with arrival times), with a commit bound past every record when bound,
// and sink.keyless_identity identity ("": the default).
type pipelineSetup struct {
	ordering string
	shards   int
	bound    bool
	identity string
}

// userDefaults is the service's defaults: ordering arrival under a commit bound, over four
// shards with arrival times.
var userDefaults = pipelineSetup{ordering: sink.OrderingArrival, shards: 4, bound: true}

// serviceGC sets the Go collector as the service runs it, for an empty byte budget (the soft
// memory limit of applyMemoryLimit, GOGC of applyGCPercent; GOMEMLIMIT and GOGC still override),
// and returns what restores the test binary's.
func serviceGC() (restore func()) {
	oldLimit, oldPercent := debug.SetMemoryLimit(-1), gcPercentNow()
	applyMemoryLimit(membudget.New(membudget.DefaultLimit)) // the limiter is not run: nothing is held
	applyGCPercent()
	return func() { debug.SetMemoryLimit(oldLimit); debug.SetGCPercent(oldPercent) }
}

// benchDelivery is how many records the benchmark decodes before handing them on, as the
// consumer decodes a whole delivery (one GetRecords response; the KCL asks for up to 10,000)
// before it submits the events. Decoding and submitting one record at a time instead made the
// decoder write the next event in the cache lines the table writer was reading on the other
// core: the decoder's own time rose 3× on two cores, which the service does not do.
const benchDelivery = 1000

// benchPipeline runs the workload as setup says.
func benchPipeline(b *testing.B, setup pipelineSetup) {
	shards := setup.shards
	gen := workload.New(workload.Config{Seed: 1, LoadRows: 5000, Changes: 50000})
	var msgs [][]byte
	size := 0
	for m := range gen.Messages() {
		msgs = append(msgs, m.Data)
		size += len(m.Data)
	}
	defer serviceGC()()
	var wall, cpu time.Duration
	ops := 0
	for b.Loop() {
		cfg := sink.DefaultConfig()
		cfg.Catalog = sink.DefaultCatalogConfig(b.TempDir())
		cfg.Stream = "bench"
		cfg.Ordering = setup.ordering
		if setup.identity != "" {
			cfg.KeylessIdentity = setup.identity
		}
		if err := demoTables(&cfg); err != nil {
			b.Fatal(err)
		}
		cat, err := sink.OpenCatalog(context.Background(), cfg.Catalog)
		if err != nil {
			b.Fatal(err)
		}
		var opts []sink.Option
		if setup.bound {
			far := time.Now().Add(24 * time.Hour)
			opts = append(opts, sink.WithCommitBound(func() time.Time { return far }))
		}
		s, err := sink.New(cfg, cat, nopDLQ{}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		dec := dms.NewDecoder(dms.DefaultConfig())
		ack := &benchAcker{}
		w0, c0 := time.Now(), cpuTime()
		// As the consumer does with a delivery (consumer/processor.go): decode every record of
		// it into a slice of events of its own, then hand them on one by one.
		for start := 0; start < len(msgs); start += benchDelivery {
			batch := msgs[start:min(start+benchDelivery, len(msgs))]
			events := make([]change.Event, len(batch))
			for j, data := range batch {
				i, ev := start+j, &events[j]
				if err := dec.DecodeShared(data, ev); err != nil {
					b.Fatal(err)
				}
				ev.Pos = change.Position{Stream: "bench", Shard: benchShards[i%shards], Seq: strconv.Itoa(1_000_000 + i)}
				if shards > 1 {
					ev.Arrival = arrival0.Add(time.Duration(i/4) * time.Millisecond)
				}
				ev.Raw, ev.Ack = data, ack
			}
			for j := range events {
				if err := s.Submit(ctx, &events[j]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(w0)
		cpu += cpuTime() - c0
		ops++
		if got := ack.n.Load(); got != int64(len(msgs)) {
			b.Fatalf("acknowledged %d of %d", got, len(msgs))
		}
		_ = s.Close(context.Background())
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatalf("sink Run: %v", err)
		}
	}
	n := float64(len(msgs) * ops)
	b.ReportMetric(n/cpu.Seconds(), "msgs/cpu-s")
	b.ReportMetric(float64(wall.Nanoseconds())/n, "ns/msg")
	// JSON bytes per CPU-second: the workload's messages average about 660 bytes, the
	// reference fast path's (.ci/bench-ratio.sh) about 410, so its per-byte ratio is printed too.
	b.ReportMetric(float64(size*ops)/1e6/cpu.Seconds(), "MBjson/cpu-s")
}
