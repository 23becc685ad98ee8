//go:build integration

package integration

// The chaos run's cluster (chaosCluster): the worker processes the driver starts, freezes, stops
// and kills, their /metrics (scraper, chaos_metrics.go), every process's log, and how an exit is
// accounted for (only the driver or an armed fault point may end a worker).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type chaosWorker struct {
	id      string
	svc     *Service
	fault   string // armed fault spec, "" for none
	point   string // the armed point
	stopped bool
	m       *procMetrics // its /metrics as last scraped
}

// chaosWorkerIDs is the pool of worker ids; ids are reused, so a worker often restarts under
// the id of one that was killed.
var chaosWorkerIDs = []string{"w1", "w2", "w3", "w4", "w5"}

// chaosCluster is the set of worker processes. Everything but running is the driver's
// goroutine's only.
type chaosCluster struct {
	t      *testing.T
	ctx    context.Context
	rng    *rand.Rand // the run's, drawn in the driver's order
	env    *chaosEnv
	stream *chaosStream
	led    *chaosLedger
	// scr reads every worker process's /metrics.
	scr *scraper

	workers map[string]*chaosWorker // running (or frozen) workers by id
	logs    []string                // every process's log: the generator's and every worker's
	// running is len(workers), for the observer.
	running atomic.Int64
}

func newChaosCluster(t *testing.T, rng *rand.Rand, env *chaosEnv, stream *chaosStream, led *chaosLedger) *chaosCluster {
	return &chaosCluster{t: t, ctx: t.Context(), rng: rng, env: env, stream: stream, led: led,
		scr: &scraper{}, workers: map[string]*chaosWorker{}}
}

// start starts a worker under id, with the fault spec faults armed ("" for none).
func (c *chaosCluster) start(id, faults string) *chaosWorker {
	env := append([]string{"DMS2ICEBERG_WORKER_ID=" + id}, c.env.workerEnv...)
	point := ""
	if faults != "" {
		env = append(env, "DMS2ICEBERG_FAULTS="+faults)
		point = strings.FieldsFunc(faults, func(r rune) bool { return r == '@' || r == '%' })[0]
	}
	// Each process serves /metrics on its own port (up to three workers on one host), for the
	// unknown commit outcomes (scraper).
	addr := opsFreeAddr(c.t)
	n := c.led.stats().starts + 1
	config := c.env.workerConfig(n, id, addr)
	svc := startCommand(c.t, c.env.bin, []string{"run", "--config", config}, env, c.env.logDir, 16<<10)
	w := &chaosWorker{id: id, svc: svc, fault: faults, point: point, m: c.scr.add(id, addr)}
	c.workers[id] = w
	c.counted()
	c.logs = append(c.logs, svc.LogPath)
	c.led.with(func(st *chaosStats) {
		st.starts++
		if point != "" {
			st.faultsArmed[point]++
		}
	})
	return w
}

// counted publishes the number of running workers to the observer; call it after every change
// of c.workers.
func (c *chaosCluster) counted() {
	c.running.Store(int64(len(c.workers)))
}

// freeID returns a worker id no running worker has.
func (c *chaosCluster) freeID() string {
	var free []string
	for _, id := range chaosWorkerIDs {
		if c.workers[id] == nil {
			free = append(free, id)
		}
	}
	return free[c.rng.IntN(len(free))]
}

// sorted returns the running workers in id order (map order is random; the schedule must
// not be).
func (c *chaosCluster) sorted() []*chaosWorker {
	ws := make([]*chaosWorker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	return ws
}

func (c *chaosCluster) pick(ws []*chaosWorker) *chaosWorker {
	if len(ws) == 0 {
		return nil
	}
	return ws[c.rng.IntN(len(ws))]
}

// holders returns the running, unfrozen workers that hold at least one lease.
func (c *chaosCluster) holders() []*chaosWorker {
	h := c.stream.held()
	var out []*chaosWorker
	for _, w := range c.sorted() {
		if len(h[w.id]) > 0 && !w.stopped && !w.svc.Exited() {
			out = append(out, w)
		}
	}
	return out
}

func (c *chaosCluster) describe() string {
	var parts []string
	for _, w := range c.sorted() {
		s := w.id
		if w.fault != "" {
			s += "[" + w.fault + "]"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

var (
	faultLine     = regexp.MustCompile(`fault point ([a-z-]+): killing the process`)
	undrainedLine = regexp.MustCompile(`shutdown: pending changes not committed[^\n]*`)
	// heldLine is a stop whose final commit waited for the stream watermark, held by a shard this
	// worker does not read (its owner was killed and no other worker has taken it yet), or for
	// another worker's older load rows or control records (the cross-process gates): the
	// ordering guard keeps the tables correct, and the records are read again. Reported, not a
	// problem.
	heldLine = regexp.MustCompile(`shutdown: pending changes wait for [^\n]*`)
)

// firedFault returns the fault point the worker's log says it died at, or "".
func firedFault(w *chaosWorker) string {
	if m := faultLine.FindStringSubmatch(w.svc.Log()); m != nil {
		return m[1]
	}
	return ""
}

// exited accounts for a worker that exited without the driver killing it: only an armed fault
// point may do that.
func (c *chaosCluster) exited(w *chaosWorker, during string) {
	c.scr.setDone(w.m)
	delete(c.workers, w.id)
	c.counted()
	if p := firedFault(w); p != "" {
		c.led.with(func(st *chaosStats) { st.faultKills[p]++ })
		c.led.logf("worker %s (pid %d) died at fault point %s (armed %s)%s", w.id, w.svc.Pid(), p, w.fault, during)
		return
	}
	code, _ := w.svc.ExitCode()
	c.led.problem("worker %s (pid %d, faults %q) exited with status %d%s without being killed; log %s; tail:\n%s",
		w.id, w.svc.Pid(), w.fault, code, during, w.svc.LogPath, tailFile(w.svc.LogPath, 6<<10))
}

// reap accounts for every worker that has exited.
func (c *chaosCluster) reap() {
	for _, w := range c.sorted() {
		if w.svc.Exited() {
			c.exited(w, "")
		}
	}
}

func (c *chaosCluster) kill(w *chaosWorker) {
	if w.svc.Exited() {
		c.exited(w, " before the SIGKILL")
		return
	}
	c.scr.last(w.m) // (not when frozen)
	w.svc.Kill()    // SIGKILL reaches a frozen process too
	delete(c.workers, w.id)
	c.counted()
	c.led.with(func(st *chaosStats) { st.kills++ })
}

// freeze SIGSTOPs a worker's process group: a zombie until thaw.
func (c *chaosCluster) freeze(w *chaosWorker) error {
	if err := syscall.Kill(-w.svc.Pid(), syscall.SIGSTOP); err != nil {
		return err
	}
	w.stopped = true
	c.scr.setFrozen(w.m, true)
	return nil
}

// thaw SIGCONTs a frozen worker's process group.
func (c *chaosCluster) thaw(w *chaosWorker) {
	_ = syscall.Kill(-w.svc.Pid(), syscall.SIGCONT)
	w.stopped = false
	c.scr.setFrozen(w.m, false)
}

// stopScraping scrapes a stopping worker's /metrics every 250 ms until it exits (the service
// serves them until its sink has closed, so the final flush's counts are seen) or bound passes;
// it reports whether the worker exited.
func (c *chaosCluster) stopScraping(w *chaosWorker, bound time.Duration) bool {
	defer c.scr.setDone(w.m)
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.svc.Done():
			return true
		case <-deadline.C:
			return false
		case <-tick.C:
			c.scr.scrape(w.m)
		}
	}
}

// term stops a worker gracefully. It must exit 0 within the bound (the service's own shutdown
// bound plus slack for a loaded machine), unless an armed fault point kills it on the way.
func (c *chaosCluster) term(w *chaosWorker) {
	if w.stopped {
		c.thaw(w)
	}
	if w.svc.Exited() {
		c.exited(w, " before the SIGTERM")
		return
	}
	// A process that has written nothing may not have installed its signal handlers yet.
	pollUntil(c.ctx, 15*time.Second, func() bool { return w.svc.Exited() || len(w.svc.Log()) > 0 })
	c.scr.scrape(w.m)
	start := time.Now()
	_ = w.svc.cmd.Process.Signal(syscall.SIGTERM)
	const bound = 2 * time.Minute
	if !c.stopScraping(w, bound) {
		c.led.problem("hang: worker %s (pid %d) still running %s after SIGTERM (shutdown_timeout 30s); log %s; tail:\n%s",
			w.id, w.svc.Pid(), bound, w.svc.LogPath, tailFile(w.svc.LogPath, 8<<10))
		w.svc.Kill()
		delete(c.workers, w.id)
		c.counted()
		return
	}
	if code, _ := w.svc.ExitCode(); code == 0 {
		c.stoppedGracefully(w, time.Since(start))
		return
	}
	c.exited(w, " during a graceful stop")
}

// stoppedGracefully accounts for a worker that exited 0 after SIGTERM, in took. A graceful stop
// commits and checkpoints everything it handed on, within shutdown_timeout, also while its
// commits lose races to other writers of the table (a conflict is re-staged within a quarter
// second while closing).
func (c *chaosCluster) stoppedGracefully(w *chaosWorker, took time.Duration) {
	delete(c.workers, w.id)
	c.counted()
	c.led.with(func(st *chaosStats) {
		st.terms++
		st.maxStop = max(st.maxStop, took)
	})
	c.led.logf("worker %s stopped gracefully in %s", w.id, took.Round(100*time.Millisecond))
	log := w.svc.Log()
	if m := heldLine.FindString(log); m != "" {
		c.led.logf("worker %s: its final commit waited for the stream watermark held by a shard nobody read (%s)", w.id, m)
	}
	if m := undrainedLine.FindString(log); m != "" {
		contended := ""
		if i := strings.LastIndex(log, "shutting down: flushing"); i >= 0 {
			contended = fmt.Sprintf("; %d commit attempts lost during the stop", strings.Count(log[i:], "commit failed; reloading"))
		}
		c.led.with(func(st *chaosStats) { st.slowStops++ })
		c.led.problem("worker %s (pid %d) stopped without committing what it had handed on within shutdown_timeout (%s, after %s%s); log %s",
			w.id, w.svc.Pid(), m, took.Round(100*time.Millisecond), contended, w.svc.LogPath)
	}
}
