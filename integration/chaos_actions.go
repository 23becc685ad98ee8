//go:build integration

package integration

// The chaos run's actions: the seeded schedule and one function per kind of disturbance.

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
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

// pickFault arms the least-armed fault point so far (ties at random): every point is exercised
// about equally. Mostly NAME@N (die at the Nth hit), sometimes NAME%P.
func (c *chaosRun) pickFault() (point, spec string) {
	c.mu.Lock()
	least := -1
	var cands []string
	for _, p := range fault.Points {
		n := c.st.faultsArmed[p]
		switch {
		case least < 0 || n < least:
			least, cands = n, []string{p}
		case n == least:
			cands = append(cands, p)
		}
	}
	c.mu.Unlock()
	point = cands[c.rng.IntN(len(cands))]
	maxN := map[string]int{fault.AfterDecode: 10, fault.AfterDataFiles: 4, fault.AfterCommit: 6,
		fault.BeforeCheckpoint: 6, fault.AfterCheckpoint: 6, fault.DuringShutdown: 2}[point]
	if c.rng.IntN(100) < 15 {
		p := map[string]string{fault.AfterDecode: "0.2", fault.AfterDataFiles: "0.3", fault.AfterCommit: "0.2",
			fault.BeforeCheckpoint: "0.2", fault.AfterCheckpoint: "0.2", fault.DuringShutdown: "0.5"}[point]
		return point, point + "%" + p
	}
	return point, fmt.Sprintf("%s@%d", point, 1+c.rng.IntN(maxN))
}

// victim picks a worker to disturb, preferring one that holds leases.
func (c *chaosRun) victim() *chaosWorker {
	if hs := c.holders(); len(hs) > 0 && c.rng.IntN(100) < 75 {
		return c.pick(hs)
	}
	var ws []*chaosWorker
	for _, w := range c.sortedWorkers() {
		if !w.stopped {
			ws = append(ws, w)
		}
	}
	return c.pick(ws)
}

// restartID is the id a replacement worker runs under: the same (a same-id restart, which
// takes over the old process's leases at once) or another free one (which waits for them to
// expire).
func (c *chaosRun) restartID(old string) string {
	if c.rng.IntN(2) == 0 && c.workers[old] == nil {
		return old
	}
	return c.freeID()
}

func (c *chaosRun) doKill() string {
	w := c.victim()
	if w == nil {
		c.startWorker(c.freeID(), "")
		return "no worker to kill: started one"
	}
	c.sleep(c.between(0, 2*time.Second)) // a random moment
	c.kill(w)
	switch r := c.rng.IntN(10); {
	case r < 6 || len(c.workers) == 0:
		id := c.restartID(w.id)
		c.startWorker(id, "")
		return fmt.Sprintf("SIGKILL %s, restarted as %s", w.id, id)
	case r < 8:
		d := c.between(time.Second, 6*time.Second)
		c.sleep(d)
		id := c.restartID(w.id)
		c.startWorker(id, "")
		return fmt.Sprintf("SIGKILL %s, restarted as %s after %s", w.id, id, d.Round(100*time.Millisecond))
	default:
		return fmt.Sprintf("SIGKILL %s, not restarted", w.id)
	}
}

func (c *chaosRun) doFault() string {
	point, spec := c.pickFault()
	var how, id string
	// A fault point is reached by a worker that holds leases: replace a lease holder, mostly
	// under its own id (which takes its leases over at once), sometimes under another (which
	// waits for them to expire).
	w := c.pick(c.holders())
	if w == nil {
		w = c.victim()
	}
	switch {
	case w != nil:
		if c.rng.IntN(2) == 0 {
			c.kill(w)
			how = "SIGKILL " + w.id
		} else {
			c.term(w)
			how = "SIGTERM " + w.id
		}
		id = w.id
		if c.rng.IntN(10) == 0 {
			id = c.freeID()
		}
	default:
		id = c.freeID()
		how = "added"
	}
	nw := c.startWorker(id, spec)
	if point == fault.DuringShutdown {
		// Reached when a shard processor shuts down: stop the worker once it runs one.
		c.waitFor(30*time.Second, func() bool { return nw.svc.Exited() || strings.Contains(nw.svc.Log(), "shard processor started") })
		c.sleep(c.between(0, 3*time.Second))
		c.term(nw)
	} else {
		c.waitFor(30*time.Second, nw.svc.Exited)
		if nw.svc.Exited() {
			c.exited(nw, "")
		}
	}
	fired := "fired"
	if c.workers[id] == nw {
		fired = "not fired yet (stays armed)"
	} else if firedFault(nw) == "" {
		fired = "not fired (stopped cleanly)"
	}
	return fmt.Sprintf("%s, started %s with %s: %s", how, id, spec, fired)
}

func (c *chaosRun) doStop() string {
	if len(c.workers) < 2 {
		id := c.freeID()
		c.startWorker(id, "")
		w := c.workers[id]
		c.waitFor(30*time.Second, func() bool { return w.svc.Exited() || strings.Contains(w.svc.Log(), "consuming") })
	}
	var w *chaosWorker
	c.waitFor(30*time.Second, func() bool {
		if hs := c.holders(); len(hs) > 0 {
			w = c.pick(hs)
			return true
		}
		return false
	})
	if w == nil {
		return "no lease holder to freeze"
	}
	had := c.held()[w.id]
	rows0, _ := c.leases(c.ctx)
	if err := syscall.Kill(-w.svc.Pid(), syscall.SIGSTOP); err != nil {
		c.problem("SIGSTOP %s: %v", w.id, err)
		return "SIGSTOP failed"
	}
	w.stopped = true
	c.scr.setFrozen(w.m, true)
	start := time.Now()
	moved := c.waitFor(3*c.opt.Failover+30*time.Second, func() bool {
		rows, err := c.leases(c.ctx)
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
	c.sleep(c.between(0, 2*time.Second))
	frozen := time.Since(start)
	if w.svc.Exited() {
		c.exited(w, " while frozen")
		return "frozen worker exited"
	}
	_ = syscall.Kill(-w.svc.Pid(), syscall.SIGCONT)
	w.stopped = false
	c.scr.setFrozen(w.m, false)
	c.mu.Lock()
	c.st.stops++
	if moved {
		c.st.stopsMoved++
	}
	c.mu.Unlock()
	return fmt.Sprintf("SIGSTOP %s (held %v) for %s, lease moved: %v, SIGCONT", w.id, had, frozen.Round(100*time.Millisecond), moved)
}

func (c *chaosRun) doTerm() string {
	w := c.victim()
	if w == nil {
		return "no worker to stop"
	}
	c.term(w)
	if len(c.workers) > 0 && c.rng.IntN(10) < 2 {
		return fmt.Sprintf("SIGTERM %s, not restarted", w.id)
	}
	id := c.restartID(w.id)
	c.startWorker(id, "")
	return fmt.Sprintf("SIGTERM %s, restarted as %s", w.id, id)
}

func (c *chaosRun) doAdd() string {
	if len(c.workers) >= c.opt.MaxWorkers {
		return c.doRemove()
	}
	id := c.freeID()
	c.startWorker(id, "")
	return "added " + id
}

func (c *chaosRun) doRemove() string {
	if len(c.workers) <= 1 {
		return c.doAdd()
	}
	w := c.victim()
	if w == nil {
		return "no worker to remove"
	}
	c.term(w)
	return "removed " + w.id
}

func (c *chaosRun) doSplit() string { return c.reshard(actSplit, true) }

func (c *chaosRun) doMerge() string { return c.reshard(actMerge, true) }

// reshard splits an open shard at the middle of its hash range or merges two adjacent ones. The
// other kind is done when this one is not possible (shard bounds, no adjacent pair), and a kill
// when the stream's shard budget is spent: kinesis-mock counts closed shards against its
// account limit (50 shards by default, shared by every stream of the emulator).
func (c *chaosRun) reshard(kind string, fallback bool) string {
	all, open, err := c.shardList()
	if err != nil {
		c.t.Fatalf("list shards: %v", err)
	}
	var pairs [][2]openShard
	for i := 0; i+1 < len(open); i++ {
		if new(big.Int).Add(open[i].hi, big.NewInt(1)).Cmp(open[i+1].lo) == 0 {
			pairs = append(pairs, [2]openShard{open[i], open[i+1]})
		}
	}
	canSplit := len(open) < c.opt.MaxShards && len(all)+2 <= c.opt.MaxTotalShards
	canMerge := len(open) > c.opt.MinShards && len(pairs) > 0 && len(all)+1 <= c.opt.MaxTotalShards
	switch {
	case kind == actSplit && !canSplit && fallback && canMerge:
		return c.reshard(actMerge, false)
	case kind == actMerge && !canMerge && fallback && canSplit:
		return c.reshard(actSplit, false)
	case (kind == actSplit && !canSplit) || (kind == actMerge && !canMerge):
		return fmt.Sprintf("no %s possible (%d open, %d shards in all): %s", kind, len(open), len(all), c.doKill())
	}
	var what string
	if kind == actSplit {
		sh := open[c.rng.IntN(len(open))]
		mid := new(big.Int).Rsh(new(big.Int).Add(sh.lo, sh.hi), 1)
		mid.Add(mid, big.NewInt(1))
		_, err = c.kc.SplitShard(c.ctx, &kinesis.SplitShardInput{StreamName: aws.String(c.stream),
			ShardToSplit: aws.String(sh.id), NewStartingHashKey: aws.String(mid.String())})
		what = fmt.Sprintf("split %s (%d open shards before)", sh.id, len(open))
	} else {
		p := pairs[c.rng.IntN(len(pairs))]
		_, err = c.kc.MergeShards(c.ctx, &kinesis.MergeShardsInput{StreamName: aws.String(c.stream),
			ShardToMerge: aws.String(p[0].id), AdjacentShardToMerge: aws.String(p[1].id)})
		what = fmt.Sprintf("merged %s and %s (%d open shards before)", p[0].id, p[1].id, len(open))
	}
	var limit *kintypes.LimitExceededException
	switch {
	case errors.As(err, &limit):
		// Other tests' streams share the emulator's shard limit.
		return fmt.Sprintf("%s refused by the emulator's shard limit (%v): %s", kind, err, c.doKill())
	case err != nil:
		c.t.Fatalf("%s: %v", what, err)
	}
	c.waitActive()
	c.mu.Lock()
	if kind == actSplit {
		c.st.splits++
	} else {
		c.st.merges++
	}
	if !c.gen.Exited() {
		c.st.reshardsLive++
	}
	c.mu.Unlock()
	return what
}
