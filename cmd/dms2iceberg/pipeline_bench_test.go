package main

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

type benchAcker struct{ n atomic.Int64 }

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
// time per message.
func BenchmarkPipeline(b *testing.B) {
	gen := workload.New(workload.Config{Seed: 1, LoadRows: 5000, Changes: 50000})
	var msgs [][]byte
	for m := range gen.Messages() {
		msgs = append(msgs, m.Data)
	}
	var wall, cpu time.Duration
	ops := 0
	for b.Loop() {
		cfg := sink.DefaultConfig()
		cfg.Catalog = sink.DefaultCatalogConfig(b.TempDir())
		cfg.Stream = "bench"
		if err := demoTables(&cfg); err != nil {
			b.Fatal(err)
		}
		cat, err := sink.OpenCatalog(context.Background(), cfg.Catalog)
		if err != nil {
			b.Fatal(err)
		}
		s, err := sink.New(cfg, cat, nopDLQ{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		dec := dms.NewDecoder(dms.DefaultConfig())
		ack := &benchAcker{}
		events := make([]change.Event, len(msgs))
		w0, c0 := time.Now(), cpuTime()
		for i, data := range msgs {
			ev := &events[i]
			if err := dec.Decode(data, ev); err != nil {
				b.Fatal(err)
			}
			ev.Pos = change.Position{Stream: "bench", Shard: "shardId-000000000000", Seq: strconv.Itoa(1_000_000 + i)}
			ev.Raw, ev.Ack = data, ack
			if err := s.Submit(ctx, ev); err != nil {
				b.Fatal(err)
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
}
