//go:build integration

package integration

// The crash-anywhere driver (issue 3). It runs dms2iceberg workers as subprocesses over the
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
// The files: chaos.go (options, the run's state and its course), chaos_cluster.go (the stream,
// the generator, the workers, the lease table and shards as the driver sees them),
// chaos_actions.go (the schedule and the disturbances), chaos_oracle.go (the invariants and the
// final verification) and chaos_report.go (the numbers and the evidence from the logs).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
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
	// (requests that took effect while the worker cannot know): "rest" runs the workers on
	// Apache Iceberg's REST catalog server behind the proxy; "s3" keeps the embedded SQL catalog
	// and puts the warehouse (every data, delete, manifest and metadata file) in the S3 emulator
	// behind the proxy. "rest,s3" is refused: the shared REST server's FileIO cannot write s3://
	// (see chaosOptionsFromEnv). Default "": the embedded SQL catalog on local files, no proxy.
	EnvChaosDeps = "DMS2ICEBERG_CHAOS_DEPS"
	// EnvChaosHeartbeat is the workers' consumer.heartbeat_interval ("0": off). Default: 250ms
	// for odd seeds, off for even ones, so that the default suite's runs cover both.
	EnvChaosHeartbeat = "DMS2ICEBERG_CHAOS_HEARTBEAT"
	// EnvChaosDeleteMode is the workers' sink.delete_mode: equality, position or dv (format
	// v3 tables). Default: by seed (seed mod 3: equality, position, dv), so that the default
	// suite's runs cover all three; the maintainer's conversions, rewrites and key cache then
	// run under the same kills, stops and reshards as the writers.
	EnvChaosDeleteMode = "DMS2ICEBERG_CHAOS_DELETE_MODE"
)

// chaosOptions sizes a run.
type chaosOptions struct {
	Seed      int64
	Cycles    int
	Shards    int32 // initial shard count
	MinShards int   // merges keep at least this many open shards
	MaxShards int   // splits keep at most this many open shards
	// MaxTotalShards bounds the stream's shards, closed ones included.
	MaxTotalShards int
	MaxWorkers     int
	LoadRows       int
	Changes        int
	// Rate is the generator's records per second, sized so that traffic lasts about as long as
	// the cycles.
	Rate     float64
	Failover time.Duration
	// CheckEvery is the interval of the sampled checkpoint check.
	CheckEvery time.Duration
	// Dwell bounds the random pause after each cycle.
	MinDwell, MaxDwell time.Duration
	// Deps is EnvChaosDeps ("", "rest" or "s3"); DepsREST and DepsS3 its parts.
	Deps             string
	DepsREST, DepsS3 bool
	// Heartbeat is the workers' consumer.heartbeat_interval (0: off).
	Heartbeat time.Duration
	// DeleteMode is the workers' sink.delete_mode.
	DeleteMode string
}

// cycleEstimate sizes the generator's rate: traffic is to last about cycles × cycleEstimate,
// a little longer than the cycles take, and the cycles wait for the traffic when they run ahead
// of it (pace), so that every cycle happens while records flow.
const cycleEstimate = 12 * time.Second

func chaosOptionsFromEnv(t *testing.T) chaosOptions {
	t.Helper()
	o := chaosOptions{Seed: time.Now().UnixNano() % 1_000_000_000, Cycles: 12, Shards: 4, MinShards: 2, MaxShards: 7, MaxTotalShards: 28,
		MaxWorkers: 3, LoadRows: 100, Failover: 4 * time.Second, CheckEvery: 5 * time.Second,
		MinDwell: time.Second, MaxDwell: 4 * time.Second}
	if v := os.Getenv(EnvChaosSeed); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvChaosSeed, v, err)
		}
		o.Seed = n
	}
	if v := os.Getenv(EnvChaosCycles); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", EnvChaosCycles, v)
		}
		o.Cycles = n
	}
	o.Changes = max(1500, 110*o.Cycles)
	records := float64(5 + 4*o.LoadRows + o.Changes)
	o.Rate = max(5, records/(float64(o.Cycles)*cycleEstimate.Seconds()))
	if v := os.Getenv(EnvChaosRate); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 1 {
			t.Fatalf("%s=%q: want records per second", EnvChaosRate, v)
		}
		o.Rate = r
		o.Changes = max(o.Changes, int(r*float64(o.Cycles)*cycleEstimate.Seconds())-(5+4*o.LoadRows))
	}
	if o.Seed%2 != 0 {
		o.Heartbeat = 250 * time.Millisecond
	}
	if v := os.Getenv(EnvChaosHeartbeat); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration (0: off)", EnvChaosHeartbeat, v)
		}
		o.Heartbeat = d
	}
	o.DeleteMode = []string{maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV}[(o.Seed%3+3)%3]
	if v := os.Getenv(EnvChaosDeleteMode); v != "" {
		switch v {
		case maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV:
			o.DeleteMode = v
		default:
			t.Fatalf("%s=%q: want %s, %s or %s", EnvChaosDeleteMode, v,
				maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV)
		}
	}
	for _, d := range strings.Split(os.Getenv(EnvChaosDeps), ",") {
		switch d = strings.TrimSpace(d); d {
		case "":
		case "rest":
			o.DepsREST = true
		case "s3":
			o.DepsS3 = true
		default:
			t.Fatalf("%s=%q: want rest, s3 or nothing", EnvChaosDeps, os.Getenv(EnvChaosDeps))
		}
	}
	if o.DepsREST && o.DepsS3 {
		// The REST server decides every table's location under its own warehouse and writes
		// the metadata files itself; the shared server (.ci/catalogs.sh) has a file://
		// warehouse and Hadoop's FileIO without an S3 file system, so it cannot put a table
		// in the S3 emulator. Faults on both at once need that server started with an S3
		// FileIO (ResolvingFileIO and s3.endpoint): a change to the shared emulators.
		t.Fatalf("%s=rest,s3: the shared REST catalog server cannot write s3:// (its FileIO has no S3); run rest and s3 separately", EnvChaosDeps)
	}
	o.Deps = map[[2]bool]string{{true, false}: "rest", {false, true}: "s3"}[[2]bool{o.DepsREST, o.DepsS3}]
	return o
}

// chaosStats are the run's counters (guarded by chaosRun.mu).
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
	// workerSamples counts the observer's one-second samples by running workers (0-3).
	workerSamples [4]int
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

type chaosWorker struct {
	id      string
	svc     *Service
	fault   string // armed fault spec, "" for none
	point   string // the armed point
	stopped bool
	m       *procMetrics // its /metrics as last scraped
}

// depProxy is a fault proxy in front of one dependency ("rest" or "s3").
type depProxy struct {
	dep string
	px  *faultproxy.Proxy
}

type chaosRun struct {
	t   *testing.T
	ctx context.Context
	opt chaosOptions
	rng *rand.Rand

	bin, stream, app, root, dataDir, logDir, config, expected string
	kc                                                        *kinesis.Client
	ddb                                                       *dynamodb.Client
	gen                                                       *Service

	// catCfg is the catalog the oracle reads (directly, never through a fault proxy);
	// verifyConfig the service configuration `verify` runs with; namespace the target
	// namespace ("" the source schema); proxies the fault proxies in front of the dependencies
	// (none without EnvChaosDeps); s3c lists the warehouse when it is in S3 (nil: local).
	catCfg       sink.CatalogConfig
	verifyConfig string
	namespace    string
	proxies      []depProxy
	s3c          *s3.Client
	// workerCfg is the workers' configuration; each worker process gets a copy with its own
	// http_addr, whose /metrics scr reads.
	workerCfg map[string]any
	scr       *scraper

	workers map[string]*chaosWorker // running (or frozen) workers by id (the driver's goroutine only)
	logs    []string                // every process's log
	recs    *recordCache
	start   time.Time

	mu   sync.Mutex
	st   chaosStats
	seen map[string]checkpoint.LeaseRow // last observed lease per shard (observer)
	// running is len(workers), for the observer.
	running int
	cycle   int
}

// chaosWorkerIDs is the pool of worker ids; ids are reused, so a worker often restarts under
// the id of one that was killed.
var chaosWorkerIDs = []string{"w1", "w2", "w3", "w4", "w5"}

func newChaosRun(t *testing.T, opt chaosOptions) *chaosRun {
	t.Helper()
	RequireEmulators(t)
	c := &chaosRun{t: t, ctx: t.Context(), opt: opt, rng: rand.New(rand.NewPCG(uint64(opt.Seed), 0x9e3779b97f4a7c15)),
		bin: BuildBinary(t), stream: UniqueName("chaos"), kc: Kinesis(t), ddb: DynamoDB(t),
		workers: map[string]*chaosWorker{}, seen: map[string]checkpoint.LeaseRow{}, scr: &scraper{}}
	c.app = "dms2iceberg-" + c.stream
	// One directory holds the data and every process's log; it is kept when the run fails. Its
	// cleanup is registered first, so it runs last, after every process was killed.
	var err error
	if keep := os.Getenv(EnvChaosKeep); keep != "" {
		c.root = filepath.Join(keep, fmt.Sprintf("seed-%d-%s", opt.Seed, c.stream))
		err = os.MkdirAll(c.root, 0o755)
	} else {
		c.root, err = os.MkdirTemp("", fmt.Sprintf("dms2iceberg-chaos-%d-", opt.Seed))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("CHAOS: seed %d failed; logs and data kept in %s (replay: %s=%d %s=%d)", opt.Seed, c.root, EnvChaosSeed, opt.Seed, EnvChaosCycles, opt.Cycles)
			return
		}
		_ = os.RemoveAll(c.root)
	})
	c.dataDir, c.logDir = filepath.Join(c.root, "data"), filepath.Join(c.root, "logs")
	for _, d := range []string{c.dataDir, c.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.expected = filepath.Join(c.dataDir, "expected.json")
	c.recs = &recordCache{kc: c.kc, stream: c.stream, shards: map[string]*shardRecords{}}
	c.st.actions, c.st.faultsArmed, c.st.faultKills = map[string]int{}, map[string]int{}, map[string]int{}
	t.Cleanup(func() { DeleteTable(t, c.app) })
	return c
}

func (c *chaosRun) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("chaos %6.1fs: "+format, append([]any{time.Since(c.start).Seconds()}, args...)...)
}

// violation records a broken invariant (a difference).
func (c *chaosRun) violation(format string, args ...any) {
	msg := fmt.Sprintf("cycle %d: ", c.currentCycle()) + fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.st.violations = append(c.st.violations, msg)
	c.mu.Unlock()
	c.t.Errorf("CHAOS VIOLATION (seed %d): %s", c.opt.Seed, msg)
}

// problem records misbehaviour that is not a data difference: a hang, an unexpected exit.
func (c *chaosRun) problem(format string, args ...any) {
	msg := fmt.Sprintf("cycle %d: ", c.currentCycle()) + fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.st.problems = append(c.st.problems, msg)
	c.mu.Unlock()
	c.t.Errorf("CHAOS PROBLEM (seed %d): %s", c.opt.Seed, msg)
}

func (c *chaosRun) currentCycle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cycle
}

func (c *chaosRun) sleep(d time.Duration) {
	select {
	case <-c.ctx.Done():
	case <-time.After(d):
	}
}

func (c *chaosRun) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)))
}

func (c *chaosRun) run() {
	t := c.t
	c.start = time.Now()
	t.Logf("CHAOS seed %d, %d cycles (replay: %s=%d %s=%d %s=%.0f %s=%q %s=%s %s=%s); workload %d load rows per table + %d changes at %.1f records/s; failover %s; heartbeat_interval %s; delete_mode %s",
		c.opt.Seed, c.opt.Cycles, EnvChaosSeed, c.opt.Seed, EnvChaosCycles, c.opt.Cycles, EnvChaosRate, c.opt.Rate, EnvChaosDeps, c.opt.Deps,
		EnvChaosHeartbeat, c.opt.Heartbeat, EnvChaosDeleteMode, c.opt.DeleteMode, c.opt.LoadRows, c.opt.Changes, c.opt.Rate, c.opt.Failover,
		c.opt.Heartbeat, c.opt.DeleteMode)
	c.setup()
	plan := chaosSchedule(c.rng, c.opt.Cycles)
	c.startWorker("w1", "")
	if c.rng.IntN(2) == 0 {
		c.startWorker("w2", "")
	}
	obsCtx, stopObs := context.WithCancel(c.ctx)
	var obs sync.WaitGroup
	obs.Add(1)
	go func() { defer obs.Done(); c.observe(obsCtx) }()
	defer func() { stopObs(); obs.Wait() }()

	c.sleep(c.between(3*time.Second, 8*time.Second)) // let the first worker take its leases
	cyclesStart := time.Now()
	for i, a := range plan {
		if c.ctx.Err() != nil {
			break
		}
		c.mu.Lock()
		c.cycle = i + 1
		c.st.cycles = i + 1
		c.st.actions[a]++
		c.mu.Unlock()
		c.reap()
		var what string
		switch a {
		case actKill:
			what = c.doKill()
		case actFault:
			what = c.doFault()
		case actStop:
			what = c.doStop()
		case actTerm:
			what = c.doTerm()
		case actAdd:
			what = c.doAdd()
		case actRemove:
			what = c.doRemove()
		case actSplit:
			what = c.doSplit()
		case actMerge:
			what = c.doMerge()
		}
		c.reap()
		// Mostly two or three workers at once (leases move between them), sometimes one.
		if n := len(c.workers); n == 0 || (n == 1 && c.rng.IntN(10) < 6) {
			id := c.freeID()
			c.startWorker(id, "")
			what += "; started " + id
		}
		_, open, _ := c.shardList()
		c.logf("cycle %d/%d %-6s %s | workers %s | %d open shards | gen %s", i+1, len(plan), a, what, c.describeWorkers(), len(open), c.genStatus())
		c.sleep(c.between(c.opt.MinDwell, c.opt.MaxDwell) + c.pace(float64(i+1)/float64(len(plan))))
	}
	c.mu.Lock()
	c.st.cyclesTook = time.Since(cyclesStart)
	c.mu.Unlock()
	c.finish(func() { stopObs(); obs.Wait() })
}

// finish waits for the traffic, stops every worker gracefully, runs one last worker until every
// shard is checkpointed to its end, stops the observer, and applies the oracle.
func (c *chaosRun) finish(stopObserver func()) {
	t := c.t
	c.logf("cycles done; waiting for the generator")
	select {
	case <-c.gen.Done():
	case <-time.After(time.Hour):
		t.Fatalf("gen still running an hour after the cycles")
	}
	if code, _ := c.gen.ExitCode(); code != 0 {
		t.Fatalf("gen failed (status %d); the traffic is incomplete:\n%s", code, tailFile(c.gen.LogPath, 8<<10))
	}
	c.mu.Lock()
	if c.st.genEnd.IsZero() {
		c.st.genEnd = time.Now()
	}
	c.mu.Unlock()
	for _, d := range c.proxies {
		// The last worker drains without dependency faults: the run's end is judged on a
		// healthy catalog and store.
		d.px.Enable(false)
		c.logf("%s faults off; injected %s (by rule: %s)", d.dep, d.px.Summary(), d.px.SummaryByRule())
	}
	for _, w := range c.sortedWorkers() {
		c.term(w)
	}
	c.reap()
	last := c.startWorker("final", "")
	c.logf("traffic complete; every worker stopped; one last worker runs to completion")
	// Let it start, sync the shards and take its leases before judging completion.
	c.waitFor(time.Minute, func() bool { return last.svc.Exited() || strings.Contains(last.svc.Log(), "consuming") })
	c.sleep(3 * time.Second)
	var why string
	done := c.waitFor(20*time.Minute, func() bool {
		if last.svc.Exited() {
			return false
		}
		ok, w := c.complete()
		why = w
		return ok
	})
	if last.svc.Exited() {
		c.exited(last, " while finishing")
		t.FailNow()
	}
	if !done {
		c.problem("hang: the last worker did not checkpoint every shard to its end in 20 minutes: %s; log %s", why, last.svc.LogPath)
		t.FailNow()
	}
	c.term(last)
	c.logf("every shard checkpointed to its end; last worker stopped")
	stopObserver()

	if err := c.checkCommitted(c.ctx, "final"); err != nil {
		t.Fatalf("final checkpoint check: %v", err)
	}
	c.verify()
	for _, src := range c.recs.tables() {
		n, err := c.checkFiles(c.ctx, src)
		if err != nil {
			t.Fatalf("file check: %v", err)
		}
		c.mu.Lock()
		c.st.files += n
		c.mu.Unlock()
	}
	c.checkOrphans()
	if b, err := os.ReadFile(filepath.Join(c.dataDir, "dead-letters.jsonl")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		c.violation("the workload has no bad record, but the dead-letter file holds:\n%s", tailFile(filepath.Join(c.dataDir, "dead-letters.jsonl"), 4<<10))
	}
	c.report()
}
