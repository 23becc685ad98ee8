//go:build integration

package integration

// The chaos run's actions: the seeded schedule (chaosSchedule) and the disturber
// (chaosDisturber), one method per kind of disturbance.

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
)

const (
	actKill   = "kill"   // SIGKILL a worker at a random moment; restart it now, later or never
	actFault  = "fault"  // replace a worker by one with a fault point armed; it must die there
	actStop   = "stop"   // SIGSTOP a lease holder until a lease moves, then SIGCONT: a zombie
	actTerm   = "term"   // graceful SIGTERM, then restart
	actAdd    = "add"    // one more worker (up to MaxWorkers)
	actRemove = "remove" // one worker fewer (SIGTERM), at least one stays
	actSplit  = "split"  // split an open shard at the middle of its hash range
	actMerge  = "merge"  // merge two adjacent open shards
)

// chaosSchedule draws the actions of a run: every kind at least once when there are enough
// cycles (a fault cycle per fault point, a split and a merge in the first half, while traffic
// flows), the rest weighted at random.
func chaosSchedule(rng *rand.Rand, cycles int) []string {
	must := []string{actSplit, actMerge, actStop, actKill, actTerm}
	for range fault.Points {
		must = append(must, actFault)
	}
	weighted := []struct {
		a string
		w int
	}{{actKill, 20}, {actFault, 32}, {actStop, 13}, {actTerm, 11}, {actAdd, 8}, {actRemove, 8}, {actSplit, 4}, {actMerge, 4}}
	total := 0
	for _, x := range weighted {
		total += x.w
	}
	plan := make([]string, 0, cycles)
	for _, a := range must {
		if len(plan) < cycles {
			plan = append(plan, a)
		}
	}
	for len(plan) < cycles {
		n := rng.IntN(total)
		for _, x := range weighted {
			if n < x.w {
				plan = append(plan, x.a)
				break
			}
			n -= x.w
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	// The first split and the first merge go into the first half, while the generator writes.
	half := max(1, cycles/2)
	for _, a := range []string{actSplit, actMerge} {
		i := slices.Index(plan, a)
		if i < half {
			continue
		}
		for tries := 0; tries < 100; tries++ {
			j := rng.IntN(half)
			if plan[j] != actSplit && plan[j] != actMerge {
				plan[i], plan[j] = plan[j], plan[i]
				break
			}
		}
	}
	return plan
}

// chaosDisturber carries out the schedule's actions on the cluster and the stream, on the
// driver's goroutine; each action returns what it did, for the cycle's log line.
type chaosDisturber struct {
	t      *testing.T
	ctx    context.Context
	opt    chaosOptions
	rng    *rand.Rand // the run's, drawn in the driver's order
	cl     *chaosCluster
	stream *chaosStream
	gen    *chaosGenerator
	led    *chaosLedger
}

// do carries out action a.
func (d *chaosDisturber) do(a string) string {
	switch a {
	case actKill:
		return d.kill()
	case actFault:
		return d.fault()
	case actStop:
		return d.stop()
	case actTerm:
		return d.term()
	case actAdd:
		return d.add()
	case actRemove:
		return d.remove()
	case actSplit:
		return d.reshard(actSplit, true)
	case actMerge:
		return d.reshard(actMerge, true)
	}
	return ""
}

// pickFault arms the least-armed fault point so far (ties at random): every point is exercised
// about equally. Mostly NAME@N (die at the Nth hit), sometimes NAME%P.
func (d *chaosDisturber) pickFault() (point, spec string) {
	least := -1
	var cands []string
	d.led.with(func(st *chaosStats) {
		for _, p := range fault.Points {
			n := st.faultsArmed[p]
			switch {
			case least < 0 || n < least:
				least, cands = n, []string{p}
			case n == least:
				cands = append(cands, p)
			}
		}
	})
	point = cands[d.rng.IntN(len(cands))]
	maxN := map[string]int{fault.AfterDecode: 10, fault.AfterDataFiles: 4, fault.AfterCommit: 6,
		fault.BeforeCheckpoint: 6, fault.AfterCheckpoint: 6, fault.DuringShutdown: 2}[point]
	if d.rng.IntN(100) < 15 {
		p := map[string]string{fault.AfterDecode: "0.2", fault.AfterDataFiles: "0.3", fault.AfterCommit: "0.2",
			fault.BeforeCheckpoint: "0.2", fault.AfterCheckpoint: "0.2", fault.DuringShutdown: "0.5"}[point]
		return point, point + "%" + p
	}
	return point, fmt.Sprintf("%s@%d", point, 1+d.rng.IntN(maxN))
}

// victim picks a worker to disturb, preferring one that holds leases.
func (d *chaosDisturber) victim() *chaosWorker {
	if hs := d.cl.holders(); len(hs) > 0 && d.rng.IntN(100) < 75 {
		return d.cl.pick(hs)
	}
	var ws []*chaosWorker
	for _, w := range d.cl.sorted() {
		if !w.stopped {
			ws = append(ws, w)
		}
	}
	return d.cl.pick(ws)
}

// restartID is the id a replacement worker runs under: the same (a same-id restart, which
// takes over the old process's leases at once) or another free one (which waits for them to
// expire).
func (d *chaosDisturber) restartID(old string) string {
	if d.rng.IntN(2) == 0 && d.cl.workers[old] == nil {
		return old
	}
	return d.cl.freeID()
}

func (d *chaosDisturber) kill() string {
	w := d.victim()
	if w == nil {
		d.cl.start(d.cl.freeID(), "")
		return "no worker to kill: started one"
	}
	sleepCtx(d.ctx, randBetween(d.rng, 0, 2*time.Second)) // a random moment
	d.cl.kill(w)
	switch r := d.rng.IntN(10); {
	case r < 6 || len(d.cl.workers) == 0:
		id := d.restartID(w.id)
		d.cl.start(id, "")
		return fmt.Sprintf("SIGKILL %s, restarted as %s", w.id, id)
	case r < 8:
		wait := randBetween(d.rng, time.Second, 6*time.Second)
		sleepCtx(d.ctx, wait)
		id := d.restartID(w.id)
		d.cl.start(id, "")
		return fmt.Sprintf("SIGKILL %s, restarted as %s after %s", w.id, id, wait.Round(100*time.Millisecond))
	default:
		return fmt.Sprintf("SIGKILL %s, not restarted", w.id)
	}
}

func (d *chaosDisturber) fault() string {
	point, spec := d.pickFault()
	var how, id string
	// A fault point is reached by a worker that holds leases: replace a lease holder, mostly
	// under its own id (which takes its leases over at once), sometimes under another (which
	// waits for them to expire).
	w := d.cl.pick(d.cl.holders())
	if w == nil {
		w = d.victim()
	}
	switch {
	case w != nil:
		if d.rng.IntN(2) == 0 {
			d.cl.kill(w)
			how = "SIGKILL " + w.id
		} else {
			d.cl.term(w)
			how = "SIGTERM " + w.id
		}
		id = w.id
		if d.rng.IntN(10) == 0 {
			id = d.cl.freeID()
		}
	default:
		id = d.cl.freeID()
		how = "added"
	}
	nw := d.cl.start(id, spec)
	if point == fault.DuringShutdown {
		// Reached when a shard processor shuts down: stop the worker once it runs one.
		pollUntil(d.ctx, 30*time.Second, func() bool { return nw.svc.Exited() || strings.Contains(nw.svc.Log(), "shard processor started") })
		sleepCtx(d.ctx, randBetween(d.rng, 0, 3*time.Second))
		d.cl.term(nw)
	} else {
		pollUntil(d.ctx, 30*time.Second, nw.svc.Exited)
		if nw.svc.Exited() {
			d.cl.exited(nw, "")
		}
	}
	fired := "fired"
	if d.cl.workers[id] == nw {
		fired = "not fired yet (stays armed)"
	} else if firedFault(nw) == "" {
		fired = "not fired (stopped cleanly)"
	}
	return fmt.Sprintf("%s, started %s with %s: %s", how, id, spec, fired)
}

func (d *chaosDisturber) stop() string {
	if len(d.cl.workers) < 2 {
		id := d.cl.freeID()
		d.cl.start(id, "")
		w := d.cl.workers[id]
		pollUntil(d.ctx, 30*time.Second, func() bool { return w.svc.Exited() || strings.Contains(w.svc.Log(), "consuming") })
	}
	var w *chaosWorker
	pollUntil(d.ctx, 30*time.Second, func() bool {
		if hs := d.cl.holders(); len(hs) > 0 {
			w = d.cl.pick(hs)
			return true
		}
		return false
	})
	if w == nil {
		return "no lease holder to freeze"
	}
	had := d.stream.held()[w.id]
	rows0, _ := d.stream.leases(d.ctx)
	if err := d.cl.freeze(w); err != nil {
		d.led.problem("SIGSTOP %s: %v", w.id, err)
		return "SIGSTOP failed"
	}
	start := time.Now()
	moved := pollUntil(d.ctx, 3*d.opt.Failover+30*time.Second, func() bool {
		rows, err := d.stream.leases(d.ctx)
		if err != nil {
			return false
		}
		for _, s := range had {
			if r := rows[s]; r.Owner != w.id && r.Owner != "" && r.Epoch > rows0[s].Epoch {
				return true
			}
		}
		return false
	})
	sleepCtx(d.ctx, randBetween(d.rng, 0, 2*time.Second))
	frozen := time.Since(start)
	if w.svc.Exited() {
		d.cl.exited(w, " while frozen")
		return "frozen worker exited"
	}
	d.cl.thaw(w)
	d.led.with(func(st *chaosStats) {
		st.stops++
		if moved {
			st.stopsMoved++
		}
	})
	return fmt.Sprintf("SIGSTOP %s (held %v) for %s, lease moved: %v, SIGCONT", w.id, had, frozen.Round(100*time.Millisecond), moved)
}

func (d *chaosDisturber) term() string {
	w := d.victim()
	if w == nil {
		return "no worker to stop"
	}
	d.cl.term(w)
	if len(d.cl.workers) > 0 && d.rng.IntN(10) < 2 {
		return fmt.Sprintf("SIGTERM %s, not restarted", w.id)
	}
	id := d.restartID(w.id)
	d.cl.start(id, "")
	return fmt.Sprintf("SIGTERM %s, restarted as %s", w.id, id)
}

func (d *chaosDisturber) add() string {
	if len(d.cl.workers) >= d.opt.MaxWorkers {
		return d.remove()
	}
	id := d.cl.freeID()
	d.cl.start(id, "")
	return "added " + id
}

func (d *chaosDisturber) remove() string {
	if len(d.cl.workers) <= 1 {
		return d.add()
	}
	w := d.victim()
	if w == nil {
		return "no worker to remove"
	}
	d.cl.term(w)
	return "removed " + w.id
}

// reshard splits an open shard at the middle of its hash range or merges two adjacent ones. The
// other kind is done when this one is not possible (shard bounds, no adjacent pair), and a kill
// when the stream's shard budget is spent: kinesis-mock counts closed shards against its
// account limit (50 shards by default, shared by every stream of the emulator).
func (d *chaosDisturber) reshard(kind string, fallback bool) string {
	all, open, err := d.stream.shardList()
	if err != nil {
		d.t.Fatalf("list shards: %v", err)
	}
	var pairs [][2]openShard
	for i := 0; i+1 < len(open); i++ {
		if new(big.Int).Add(open[i].hi, big.NewInt(1)).Cmp(open[i+1].lo) == 0 {
			pairs = append(pairs, [2]openShard{open[i], open[i+1]})
		}
	}
	canSplit := len(open) < d.opt.MaxShards && len(all)+2 <= d.opt.MaxTotalShards
	canMerge := len(open) > d.opt.MinShards && len(pairs) > 0 && len(all)+1 <= d.opt.MaxTotalShards
	switch {
	case kind == actSplit && !canSplit && fallback && canMerge:
		return d.reshard(actMerge, false)
	case kind == actMerge && !canMerge && fallback && canSplit:
		return d.reshard(actSplit, false)
	case (kind == actSplit && !canSplit) || (kind == actMerge && !canMerge):
		return fmt.Sprintf("no %s possible (%d open, %d shards in all): %s", kind, len(open), len(all), d.kill())
	}
	var what string
	if kind == actSplit {
		sh := open[d.rng.IntN(len(open))]
		err = d.stream.split(sh)
		what = fmt.Sprintf("split %s (%d open shards before)", sh.id, len(open))
	} else {
		p := pairs[d.rng.IntN(len(pairs))]
		err = d.stream.merge(p[0], p[1])
		what = fmt.Sprintf("merged %s and %s (%d open shards before)", p[0].id, p[1].id, len(open))
	}
	var limit *kintypes.LimitExceededException
	switch {
	case errors.As(err, &limit):
		// Other tests' streams share the emulator's shard limit.
		return fmt.Sprintf("%s refused by the emulator's shard limit (%v): %s", kind, err, d.kill())
	case err != nil:
		d.t.Fatalf("%s: %v", what, err)
	}
	d.stream.waitActive()
	live := !d.gen.exited()
	d.led.with(func(st *chaosStats) {
		if kind == actSplit {
			st.splits++
		} else {
			st.merges++
		}
		if live {
			st.reshardsLive++
		}
	})
	return what
}
