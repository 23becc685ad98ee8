//go:build integration

package integration

// The chaos run's ledger (chaosLedger): the counters, the broken invariants and the other
// problems, and the current cycle, shared by the driver's goroutine and the observer's. Every
// other part of the run records into it; the report and the test read it.

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// chaosStats are the run's counters (guarded by chaosLedger.mu).
type chaosStats struct {
	cycles      int
	actions     map[string]int
	kills       int            // SIGKILLs sent by the driver
	faultsArmed map[string]int // workers started with a fault point armed, per point
	faultKills  map[string]int // workers that died at an armed fault point, per point
	stops       int            // SIGSTOP/SIGCONT cycles
	stopsMoved  int            // ... during which a lease of the frozen worker moved
	terms       int            // graceful stops (exit 0 in time)
	maxStop     time.Duration  // the longest graceful stop
	slowStops   int            // graceful stops that left handed-on changes uncommitted at shutdown_timeout
	// workerSamples counts the observer's one-second samples by running workers (0-5).
	workerSamples [6]int
	starts        int // worker processes started
	splits        int
	merges        int
	reshardsLive  int // splits and merges while the generator was still writing

	acquisitions int // lease epochs observed (every acquisition, including first ones)
	leaseMoves   int // observed owner changes of a lease
	checks       int // checkpoint-vs-watermark checks
	records      int // records checked by the last such check
	rows         int // rows compared by verify
	files        int // data and delete files checked for double references
	branches     int // positional branches checked (delete_mode position and dv)
	// vectorCommits are the retained snapshots, over every table, of table batches committed
	// with the writer's deletion vectors (delete_mode dv, writer_vectors).
	vectorCommits int

	genStart, genEnd time.Time     // the generator's traffic
	cyclesTook       time.Duration // from the first cycle to the end of the last (dwell included)
	// The orphan oracle (orphans.go): unreferenced data files before cleanup, files removed by
	// it, and data files left unreferenced after it (each a difference).
	orphansBefore, orphansRemoved, orphansAfter int

	violations []string // broken invariants: the differences
	problems   []string // hangs, unexpected exits, failed stops
}

// chaosLedger is the run's record; safe for concurrent use.
type chaosLedger struct {
	t     *testing.T
	seed  int64
	start time.Time // the run's start, for the log lines and the duration (set once, before the observer)

	mu    sync.Mutex
	st    chaosStats
	cycle int
}

func newChaosLedger(t *testing.T, seed int64) *chaosLedger {
	l := &chaosLedger{t: t, seed: seed}
	l.st.actions, l.st.faultsArmed, l.st.faultKills = map[string]int{}, map[string]int{}, map[string]int{}
	return l
}

func (l *chaosLedger) logf(format string, args ...any) {
	l.t.Helper()
	l.t.Logf("chaos %6.1fs: "+format, append([]any{time.Since(l.start).Seconds()}, args...)...)
}

// violation records a broken invariant (a difference).
func (l *chaosLedger) violation(format string, args ...any) {
	msg := fmt.Sprintf("cycle %d: ", l.currentCycle()) + fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.st.violations = append(l.st.violations, msg)
	l.mu.Unlock()
	l.t.Errorf("CHAOS VIOLATION (seed %d): %s", l.seed, msg)
}

// problem records misbehaviour that is not a data difference: a hang, an unexpected exit.
func (l *chaosLedger) problem(format string, args ...any) {
	msg := fmt.Sprintf("cycle %d: ", l.currentCycle()) + fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.st.problems = append(l.st.problems, msg)
	l.mu.Unlock()
	l.t.Errorf("CHAOS PROBLEM (seed %d): %s", l.seed, msg)
}

func (l *chaosLedger) currentCycle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cycle
}

// beginCycle enters cycle n (1-based), whose action is a.
func (l *chaosLedger) beginCycle(n int, a string) {
	l.mu.Lock()
	l.cycle = n
	l.st.cycles = n
	l.st.actions[a]++
	l.mu.Unlock()
}

// with runs f on the counters under the lock.
func (l *chaosLedger) with(f func(st *chaosStats)) {
	l.mu.Lock()
	f(&l.st)
	l.mu.Unlock()
}

// stats returns a copy of the counters (its maps and slices are shared).
func (l *chaosLedger) stats() chaosStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}
