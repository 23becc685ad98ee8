//go:build integration

package integration

// The crash-anywhere driver. It runs dms2iceberg workers as subprocesses over the
// emulators while `dms2iceberg gen --rate` writes a generated workload, and on a seeded random
// schedule it SIGKILLs workers, restarts them with a fault point armed (pkg/fault) so that they
// die exactly there, freezes one with SIGSTOP until its leases move and then resumes it (a
// zombie), stops workers gracefully, adds and removes workers (one to three at a time, worker
// ids reused), and splits and merges shards. The oracle:
//
//   - all along (sampled) and at the end: no shard's KCL checkpoint passes committed data: for
//     every shard, every table written by a record at or below the checkpoint has a watermark
//     for that shard at or above the table's last such record;
//   - at the end, after the traffic is complete and one last worker has run to completion:
//     `dms2iceberg verify` against the generator's expected state (no missing, changed or
//     duplicate key; the keyless table compared as a multiset), no data or delete file
//     referenced twice by the current snapshot or added by two snapshots, no dead letter;
//   - every graceful stop exits 0 in time and no worker exits unless the driver or an armed
//     fault point killed it.
//
// Who owns what (one type per concept, each in its file):
//
//   - chaosRun (chaos.go): the driver. It builds the parts below, sets the run up, runs the
//     cycles on the test's goroutine and, at the end, drains with one last worker and hands
//     over to the oracle and the report. chaosOptions (chaos_options.go) size the run, from
//     the environment variables below.
//   - chaosLedger (chaos_ledger.go): the record every part writes to: the counters
//     (chaosStats), the violations and problems, the current cycle, the log lines.
//   - chaosEnv and chaosGenerator (chaos_env.go): the run's directories and service
//     configurations, the catalog the oracle reads, the dependency fault proxies (their rules
//     in depfaults.go) and the workers' environment that points them at the AWS ones; the
//     generator process and its progress (the pace of the cycles).
//   - chaosStream (chaos_stream.go): the Kinesis shards and the lease table: reading them,
//     splitting and merging.
//   - chaosCluster (chaos_cluster.go): the worker processes: starting, freezing, stopping,
//     killing, accounting for exits; their /metrics (scraper, chaos_metrics.go) and logs.
//   - chaosDisturber (chaos_actions.go): the schedule's actions (chaosSchedule draws them),
//     one method per kind of disturbance.
//   - chaosObserver (chaos_observer.go): the goroutine that samples the lease table and the
//     /metrics while the cycles run and checks the leases' invariants.
//   - chaosOracle (chaos_oracle.go): the checkpoint-vs-watermark check, completion, verify,
//     the file, orphan and dead-letter checks, over the record cache (recordCache).
//   - chaosReport (chaos_report.go): the CHAOS: lines, from the ledger, the proxies, the
//     /metrics and the evidence in the logs (logEvidence); the recoveries from dependency
//     faults and the generator's rate (chaos_recovery.go), and the fault kinds never injected.

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// Environment variables of the chaos run.
const (
	// EnvChaosSeed replays a run: the seed of the schedule and of the workload.
	EnvChaosSeed = "DMS2ICEBERG_CHAOS_SEED"
	// EnvChaosCycles is the number of cycles (default 12: the short run of the default suite;
	// `make chaos` sets 200).
	EnvChaosCycles = "DMS2ICEBERG_CHAOS_CYCLES"
	// EnvChaosKeep names the directory under which a run puts its data directory and every
	// process's log (default: a new directory under $TMPDIR). They are removed when the run
	// passes and kept, for the reproduction, when it fails.
	EnvChaosKeep = "DMS2ICEBERG_CHAOS_KEEP"
	// EnvChaosRate sets the generator's records per second (default: sized so that traffic
	// lasts about as long as the cycles, about 10/s); the workload grows to last as long.
	EnvChaosRate = "DMS2ICEBERG_CHAOS_RATE"
	// EnvChaosDeps puts faults in the dependencies, through the fault proxy
	// (integration/faultproxy), which injects 5xx, unanswered requests, resets and lost answers
	// (requests that took effect while the worker cannot know), and the AWS services' own
	// refusals. A comma-separated list: "rest" runs the workers on Apache Iceberg's REST catalog
	// server behind the proxy; "s3" keeps the embedded SQL catalog and puts the warehouse (every
	// data, delete, manifest and metadata file) in the S3 emulator behind the proxy; "dynamodb"
	// puts the KCL lease table behind the proxy (throttling, throughput exceeded, 5xx, resets, a
	// write that took effect with its answer lost); "kinesis" puts the workers' Kinesis calls
	// behind the proxy (GetRecords: throughput exceeded, expired iterators, 5xx, resets; the
	// heartbeat PutRecords, heartbeats then always on: partial failures, 5xx, lost answers).
	// "all" is dynamodb,kinesis,s3. The generator and the oracle reach the emulators directly.
	// "rest" with "s3" is refused: the shared REST server's FileIO cannot write s3:// (see
	// parseDeps). Default "": the embedded SQL catalog on local files, no proxy.
	EnvChaosDeps = "DMS2ICEBERG_CHAOS_DEPS"
	// EnvChaosHeartbeat is the workers' consumer.heartbeat_interval ("0": off). Default: 250ms
	// for odd seeds, off for even ones, so that the default suite's runs cover both.
	EnvChaosHeartbeat = "DMS2ICEBERG_CHAOS_HEARTBEAT"
	// EnvChaosDeleteMode is the workers' sink.delete_mode: equality, position or dv (format
	// v3 tables). Default: by seed (seed mod 3: equality, position, dv), so that the default
	// suite's runs cover all three; the maintainer's conversions, rewrites and key cache then
	// run under the same kills, stops and reshards as the writers.
	EnvChaosDeleteMode = "DMS2ICEBERG_CHAOS_DELETE_MODE"
	// EnvChaosLayout is the partitioning of the generated workload: "dms-default" (DMS without
	// ParallelApply, CDC by schema.table) or "primary-key-full" (ParallelApply: every keyed
	// record by primary key, a hot table's changes spread over every shard, with full
	// before-images, MySQL's BeforeImageSettings ColumnFilter all, sent as ParallelApply's
	// threads send: see chaosGenerator.start). Default: by seed ((seed/3) mod 2: dms-default,
	// primary-key-full), so that the default suite's runs cover both.
	EnvChaosLayout = "DMS2ICEBERG_CHAOS_LAYOUT"
	// EnvChaosWorkers bounds the workers running at once (default 3; 2 to 5). With n of 4 or
	// more, the run starts with n workers and keeps n-1 or n running (the schedule's kills,
	// stops and removes take one away, a cycle's end or an add brings it back).
	EnvChaosWorkers = "DMS2ICEBERG_CHAOS_WORKERS"
)

// chaosRun is the driver: it puts the run's parts together and runs its course (setup, the
// cycles, the end and the report) on the test's goroutine, with the observer on its own.
type chaosRun struct {
	t   *testing.T
	ctx context.Context
	opt chaosOptions
	// rng draws the schedule and every random choice of the driver, in its order: a seed
	// replays a run.
	rng *rand.Rand

	led    *chaosLedger
	env    *chaosEnv
	stream *chaosStream
	gen    *chaosGenerator
	cl     *chaosCluster
	act    *chaosDisturber
	oracle *chaosOracle
	obs    *chaosObserver
}

func newChaosRun(t *testing.T, opt chaosOptions) *chaosRun {
	t.Helper()
	RequireEmulators(t)
	rng := rand.New(rand.NewPCG(uint64(opt.Seed), 0x9e3779b97f4a7c15))
	bin := BuildBinary(t)
	name := UniqueName("chaos")
	stream := &chaosStream{t: t, ctx: t.Context(), kc: Kinesis(t), ddb: DynamoDB(t), name: name, app: "dms2iceberg-" + name}
	// The run's directory's cleanup is registered first, so it runs last, after every process
	// was killed.
	env := newChaosEnv(t, opt, bin, name)
	led := newChaosLedger(t, opt.Seed)
	c := &chaosRun{t: t, ctx: t.Context(), opt: opt, rng: rng, led: led, env: env, stream: stream,
		gen: &chaosGenerator{rate: opt.Rate}, cl: newChaosCluster(t, rng, env, stream, led),
		oracle: newChaosOracle(t, env, stream, led)}
	c.act = &chaosDisturber{t: t, ctx: c.ctx, opt: opt, rng: rng, cl: c.cl, stream: stream, gen: c.gen, led: led}
	c.obs = &chaosObserver{checkEvery: opt.CheckEvery, cl: c.cl, stream: stream, oracle: c.oracle, led: led,
		seen: map[string]checkpoint.LeaseRow{}}
	t.Cleanup(func() { DeleteTable(t, stream.app) })
	return c
}

func (c *chaosRun) run() {
	t := c.t
	c.led.start = time.Now()
	t.Logf("CHAOS seed %d, %d cycles (replay: %s=%d %s=%d %s=%.0f %s=%q %s=%s %s=%s %s=%s %s=%d); workload %d load rows per table + %d changes at %.1f records/s, layout %s; failover %s; heartbeat_interval %s; delete_mode %s; up to %d workers",
		c.opt.Seed, c.opt.Cycles, EnvChaosSeed, c.opt.Seed, EnvChaosCycles, c.opt.Cycles, EnvChaosRate, c.opt.Rate, EnvChaosDeps, c.opt.Deps,
		EnvChaosHeartbeat, c.opt.Heartbeat, EnvChaosDeleteMode, c.opt.DeleteMode, EnvChaosLayout, c.opt.Layout, EnvChaosWorkers, c.opt.MaxWorkers,
		c.opt.LoadRows, c.opt.Changes, c.opt.Rate, c.opt.Layout, c.opt.Failover, c.opt.Heartbeat, c.opt.DeleteMode, c.opt.MaxWorkers)
	c.setup()
	plan := chaosSchedule(c.rng, c.opt.Cycles)
	c.cl.start("w1", "")
	if c.rng.IntN(2) == 0 {
		c.cl.start("w2", "")
	}
	if c.opt.MaxWorkers >= 4 {
		// More workers (EnvChaosWorkers): the run starts with all of them.
		for _, id := range chaosWorkerIDs[1:c.opt.MaxWorkers] {
			if c.cl.workers[id] == nil {
				c.cl.start(id, "")
			}
		}
	}
	obsCtx, stopObs := context.WithCancel(c.ctx)
	var obs sync.WaitGroup
	obs.Add(1)
	go func() { defer obs.Done(); c.obs.observe(obsCtx) }()
	defer func() { stopObs(); obs.Wait() }()

	sleepCtx(c.ctx, randBetween(c.rng, 3*time.Second, 8*time.Second)) // let the first worker take its leases
	cyclesStart := time.Now()
	for i, a := range plan {
		if c.ctx.Err() != nil {
			break
		}
		c.cycle(i+1, len(plan), a)
	}
	c.led.with(func(st *chaosStats) { st.cyclesTook = time.Since(cyclesStart) })
	c.finish(func() { stopObs(); obs.Wait() })
}

// setup creates the stream, starts the generator in the background and writes the service
// configuration once the generator has written the expected state.
func (c *chaosRun) setup() {
	CreateStream(c.t, c.stream.name, c.opt.Shards)
	c.gen.start(c.env)
	c.cl.logs = append(c.cl.logs, c.gen.svc.LogPath)
	c.led.with(func(st *chaosStats) { st.genStart = time.Now() })
	c.gen.waitExpected(c.t, c.env.expected)
	c.env.configure()
}

// cycle runs cycle n of cycles, whose action is a, and the dwell after it.
func (c *chaosRun) cycle(n, cycles int, a string) {
	c.led.beginCycle(n, a)
	c.cl.reap()
	what := c.act.do(a)
	c.cl.reap()
	// Mostly two or three workers at once (leases move between them), sometimes one; with
	// EnvChaosWorkers n of 4 or more, n-1 or n.
	if k := len(c.cl.workers); k == 0 || (c.opt.MaxWorkers >= 4 && k < c.opt.MaxWorkers-1) ||
		(c.opt.MaxWorkers < 4 && k == 1 && c.rng.IntN(10) < 6) {
		id := c.cl.freeID()
		c.cl.start(id, "")
		what += "; started " + id
	}
	_, open, _ := c.stream.shardList()
	c.led.logf("cycle %d/%d %-6s %s | workers %s | %d open shards | gen %s", n, cycles, a, what, c.cl.describe(), len(open), c.gen.status())
	sleepCtx(c.ctx, randBetween(c.rng, c.opt.MinDwell, c.opt.MaxDwell)+c.gen.pace(float64(n)/float64(cycles)))
}

// finish waits for the traffic, stops every worker gracefully, runs one last worker until every
// shard is checkpointed to its end, stops the observer, and applies the oracle.
func (c *chaosRun) finish(stopObserver func()) {
	c.led.logf("cycles done; waiting for the generator")
	c.gen.waitDone(c.t)
	c.led.with(func(st *chaosStats) {
		if st.genEnd.IsZero() {
			st.genEnd = time.Now()
		}
	})
	for _, d := range c.env.proxies {
		// The last worker drains without dependency faults: the run's end is judged on a
		// healthy catalog and store.
		d.px.Enable(false)
		c.led.logf("%s faults off; injected %s (by rule: %s)", d.dep, d.px.Summary(), d.px.SummaryByRule())
	}
	for _, w := range c.cl.sorted() {
		c.cl.term(w)
	}
	c.cl.reap()
	c.drainLast()
	stopObserver()
	c.oracle.final()
	gl := c.oracle.checkLedger(c.gen)
	c.report(gl)
}

// drainLast runs one last worker, once every other one stopped, until every shard is
// checkpointed to its end, and stops it.
func (c *chaosRun) drainLast() {
	t := c.t
	last := c.cl.start("final", "")
	c.led.logf("traffic complete; every worker stopped; one last worker runs to completion")
	// Let it start, sync the shards and take its leases before judging completion.
	pollUntil(c.ctx, time.Minute, func() bool { return last.svc.Exited() || strings.Contains(last.svc.Log(), "consuming") })
	sleepCtx(c.ctx, 3*time.Second)
	var why string
	done := pollUntil(c.ctx, 20*time.Minute, func() bool {
		if last.svc.Exited() {
			return false
		}
		ok, w := c.oracle.complete()
		why = w
		return ok
	})
	if last.svc.Exited() {
		c.cl.exited(last, " while finishing")
		t.FailNow()
	}
	if !done {
		c.led.problem("hang: the last worker did not checkpoint every shard to its end in 20 minutes: %s; log %s", why, last.svc.LogPath)
		t.FailNow()
	}
	c.cl.term(last)
	c.led.logf("every shard checkpointed to its end; last worker stopped")
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// randBetween draws a duration in [lo, hi) (lo when the range is empty).
func randBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// pollUntil polls cond every 250ms until it holds or d passes (or ctx ends).
func pollUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}
