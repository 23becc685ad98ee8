package main

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// The service sets a soft memory limit that follows what the byte budget holds, unless
// GOMEMLIMIT is set.
func TestApplyMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	t.Setenv("GOMEMLIMIT", "")
	limit, l := applyMemoryLimit(membudget.New(128 << 20))
	if l == nil || limit != memoryLimitBase || debug.SetMemoryLimit(-1) != memoryLimitBase {
		t.Fatalf("limit %d (limiter %v), runtime %d: want %d for an empty budget", limit, l != nil, debug.SetMemoryLimit(-1), memoryLimitBase)
	}
	debug.SetMemoryLimit(old)
	t.Setenv("GOMEMLIMIT", "3GiB") // the runtime read it at start; here only its presence counts
	limit, l = applyMemoryLimit(membudget.New(256 << 20))
	if l != nil || limit != old {
		t.Fatalf("with GOMEMLIMIT set: limit %d (limiter %v), want the runtime's %d untouched and no limiter", limit, l != nil, old)
	}
}

// The limit rises with what the budget holds at the next sample, stays up for a window of
// samples after the bytes are released, then falls back; run stops with its context.
func TestMemoryLimiterFollowsTheBudget(t *testing.T) {
	b := membudget.New(128 << 20)
	acc := b.Account()
	var set []int64
	l := newMemoryLimiter(b)
	l.set = func(v int64) int64 { set = append(set, v); return 0 }
	if got := l.sample(); got != memoryLimitBase {
		t.Fatalf("empty budget: limit %d, want %d", got, memoryLimitBase)
	}
	if err := acc.Acquire(context.Background(), 100<<20); err != nil {
		t.Fatal(err)
	}
	if got, want := l.sample(), int64(memoryLimitBase+400<<20); got != want {
		t.Fatalf("100 MiB held: limit %d, want %d", got, want)
	}
	acc.Release(100 << 20)
	for i := 1; i < len(l.peaks); i++ {
		if got, want := l.sample(), int64(memoryLimitBase+400<<20); got != want {
			t.Fatalf("sample %d after the release: limit %d, want the window's peak %d", i, got, want)
		}
	}
	if got := l.sample(); got != memoryLimitBase {
		t.Fatalf("a window after the release: limit %d, want %d", got, memoryLimitBase)
	}
	if top := l.top.Load(); top != memoryLimitBase+400<<20 {
		t.Fatalf("highest limit %d", top)
	}
	if len(set) != len(l.peaks)+2 {
		t.Fatalf("%d limits set for %d samples", len(set), len(l.peaks)+2)
	}

	// What the key-column cache holds is added as it is.
	var cached int64 = 50 << 20
	l.watchCache(func() int64 { return cached })
	if got, want := l.sample(), int64(memoryLimitBase+50<<20); got != want {
		t.Fatalf("50 MiB of key columns cached: limit %d, want %d", got, want)
	}
	cached = 0
	if got := l.sample(); got != memoryLimitBase {
		t.Fatalf("cache emptied: limit %d, want %d", got, memoryLimitBase)
	}

	ctx, cancel := context.WithCancel(context.Background())
	l.every = time.Millisecond
	done := make(chan error, 1)
	go func() { done <- l.run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The service collects at GOGC 200 unless the operator set GOGC.
func TestApplyGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	t.Setenv("GOGC", "")
	if got := applyGCPercent(); got != gcPercent || debug.SetGCPercent(100) != gcPercent {
		t.Fatalf("GOGC unset: applyGCPercent %d, want %d in effect", got, gcPercent)
	}
	for _, set := range []int{75, -1} { // as the runtime sets it from GOGC=75 or GOGC=off at start
		debug.SetGCPercent(set)
		t.Setenv("GOGC", "set") // here only its presence counts
		if got := applyGCPercent(); got != set || debug.SetGCPercent(100) != set {
			t.Fatalf("with GOGC set: applyGCPercent %d, want the runtime's %d untouched", got, set)
		}
	}
}
