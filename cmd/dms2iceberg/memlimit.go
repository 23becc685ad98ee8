package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// memoryLimitBase is the part of the Go soft memory limit that does not follow the byte budget:
// the tables' queues and loaded metadata, the garbage of their commits, the SDKs. 200 tables of
// small records keep about 100 MiB after a collection (docs/benchmarks.md "Many tables").
const memoryLimitBase = 384 << 20

// memoryLimitFor is the Go soft memory limit (runtime/debug.SetMemoryLimit) for held bytes
// admitted by the byte budget (consumer.max_inflight_bytes): memoryLimitBase plus four times
// held. What the budget admits is live about twice (the raw record and its decoded copy), plus
// its converted row and a flush's Arrow batch and Parquet pages. Without a limit the garbage
// collector lets the heap grow to twice the live heap and more under a high allocation rate
// (64 KiB records: peak RSS 12 times the budget); a fixed limit low enough for many tables of
// small records (which hold almost nothing in flight) halves the throughput of large records,
// whose live heap is mostly what the budget holds. So the limit follows what is held.
func memoryLimitFor(held int64) int64 { return memoryLimitBase + 4*max(held, 0) }

// memoryLimiter keeps the Go soft memory limit at memoryLimitFor of the most the budget held in
// the last window: a burst raises it at the next sample, and it falls back a window after.
type memoryLimiter struct {
	budget *membudget.Budget
	// cached is what the sink's key-column cache holds (sink.Iceberg.KeyCache; nil: nothing),
	// added to the limit as it is: live memory that the budget does not count.
	cached atomic.Pointer[func() int64]
	every  time.Duration
	peaks  []int64 // the most held in each of the last samples (a ring)
	next   int
	set    func(int64) int64 // debug.SetMemoryLimit
	top    atomic.Int64      // the highest limit set
}

func newMemoryLimiter(budget *membudget.Budget) *memoryLimiter {
	return &memoryLimiter{budget: budget, every: 250 * time.Millisecond, peaks: make([]int64, 40), set: debug.SetMemoryLimit}
}

// sample records what the budget holds now and sets the limit for the window's peak.
func (l *memoryLimiter) sample() int64 {
	l.peaks[l.next] = l.budget.Held()
	l.next = (l.next + 1) % len(l.peaks)
	var peak int64
	for _, p := range l.peaks {
		peak = max(peak, p)
	}
	limit := memoryLimitFor(peak)
	if f := l.cached.Load(); f != nil {
		limit += max((*f)(), 0)
	}
	l.set(limit)
	if limit > l.top.Load() {
		l.top.Store(limit)
	}
	return limit
}

// watchCache adds what held returns (the sink's key-column cache) to every later limit; safe
// while the limiter runs.
func (l *memoryLimiter) watchCache(held func() int64) { l.cached.Store(&held) }

// run samples until ctx ends.
func (l *memoryLimiter) run(ctx context.Context) error {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.sample()
		}
	}
}

// applyMemoryLimit sets the limit for an empty budget and returns the limiter that moves it
// with what the budget holds (to be run by the caller), unless the operator set GOMEMLIMIT
// (which the Go runtime applies itself; the limiter is then nil). It returns the limit in
// effect.
func applyMemoryLimit(budget *membudget.Budget) (limit int64, l *memoryLimiter) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), nil
	}
	l = newMemoryLimiter(budget)
	return l.sample(), l
}

// gcPercent is the collector's proportional target (GOGC) the service runs with: the heap may
// grow to three times what is live before a collection, instead of the Go default of twice. The
// soft memory limit above caps the heap whatever GOGC says, so this changes how often the
// collector runs below the limit, not how much memory the service may take. Measured on the
// pipeline benchmark (docs/benchmarks.md, "Side-by-side ratio", 2026-12-06): about 15 % more
// messages per CPU-second on two cores, where the collector's background workers ran beside the
// pipeline; 300 and off (collect at the limit only) were no better, a larger heap touching more
// fresh memory.
const gcPercent = 200

// applyGCPercent sets gcPercent unless the operator set GOGC (which the runtime applies itself).
// It returns the GOGC in effect.
func applyGCPercent() int {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	return gcPercentNow()
}

// gcPercentNow is the GOGC in effect (-1: off), read without setting it.
func gcPercentNow() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())) // off reads as -1 in two's complement
}
