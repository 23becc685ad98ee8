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

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/sink"
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

	violations []string // broken invariants: the differences
	problems   []string // hangs, unexpected exits, failed stops
}

type chaosWorker struct {
	id      string
	svc     *Service
	fault   string // armed fault spec, "" for none
	point   string // the armed point
	stopped bool
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

	workers map[string]*chaosWorker // running (or frozen) workers by id (the driver's goroutine only)
	logs    []string                // every process's log
	recs    *recordCache
	start   time.Time

	mu   sync.Mutex
	st   chaosStats
	seen map[string]leaseRow // last observed lease per shard (observer)
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
		workers: map[string]*chaosWorker{}, seen: map[string]leaseRow{}}
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

// ---- setup -------------------------------------------------------------------------------

// setup creates the stream, starts the generator in the background and writes the service
// configuration once the generator has written the tables' keys and types.
func (c *chaosRun) setup() {
	t := c.t
	CreateStream(t, c.stream, c.opt.Shards)
	tablesCfg := filepath.Join(c.dataDir, "tables.yaml")
	c.gen = startCommand(t, c.bin, []string{"gen", "--stream", c.stream, "--shards", strconv.Itoa(int(c.opt.Shards)),
		"--changes", strconv.Itoa(c.opt.Changes), "--load-rows", strconv.Itoa(c.opt.LoadRows),
		"--seed", strconv.FormatInt(c.opt.Seed, 10), "--rate", strconv.FormatFloat(c.opt.Rate, 'f', 1, 64),
		"--expected", c.expected, "--tables-config", tablesCfg}, nil, c.logDir, 16<<10)
	c.logs = append(c.logs, c.gen.LogPath)
	WaitFor(t, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if c.gen.Exited() {
			return false, fmt.Errorf("gen exited:\n%s", tailFile(c.gen.LogPath, 8<<10))
		}
		_, err1 := os.Stat(tablesCfg)
		_, err2 := os.Stat(c.expected)
		return err1 == nil && err2 == nil, nil
	}, "gen to write the expected state and the tables config")

	var cfg map[string]any
	b, err := os.ReadFile(tablesCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("tables config: %v", err)
	}
	snk, _ := cfg["sink"].(map[string]any)
	if snk == nil {
		snk = map[string]any{}
	}
	snk["flush_interval"] = "1s"
	cfg["sink"] = snk
	cfg["stream"] = c.stream
	cfg["data_dir"] = c.dataDir
	cfg["shutdown_timeout"] = "30s"
	cfg["http_addr"] = "" // up to three workers on one host
	cfg["consumer"] = map[string]any{"shard_sync": "1s", "failover": c.opt.Failover.String(), "idle_between_reads": "200ms"}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.config = filepath.Join(c.dataDir, "config.yaml")
	if err := os.WriteFile(c.config, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ---- workers -----------------------------------------------------------------------------

func (c *chaosRun) startWorker(id, faults string) *chaosWorker {
	env := []string{"DMS2ICEBERG_WORKER_ID=" + id}
	point := ""
	if faults != "" {
		env = append(env, "DMS2ICEBERG_FAULTS="+faults)
		point = strings.FieldsFunc(faults, func(r rune) bool { return r == '@' || r == '%' })[0]
	}
	svc := startCommand(c.t, c.bin, []string{"run", "--config", c.config}, env, c.logDir, 16<<10)
	w := &chaosWorker{id: id, svc: svc, fault: faults, point: point}
	c.workers[id] = w
	c.counted()
	c.logs = append(c.logs, svc.LogPath)
	c.mu.Lock()
	c.st.starts++
	if point != "" {
		c.st.faultsArmed[point]++
	}
	c.mu.Unlock()
	return w
}

// counted publishes the number of running workers to the observer; call it after every change
// of c.workers.
func (c *chaosRun) counted() {
	c.mu.Lock()
	c.running = len(c.workers)
	c.mu.Unlock()
}

// freeID returns a worker id no running worker has.
func (c *chaosRun) freeID() string {
	var free []string
	for _, id := range chaosWorkerIDs {
		if c.workers[id] == nil {
			free = append(free, id)
		}
	}
	return free[c.rng.IntN(len(free))]
}

// sortedWorkers returns the running workers in id order (map order is random; the schedule must
// not be).
func (c *chaosRun) sortedWorkers() []*chaosWorker {
	ws := make([]*chaosWorker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	return ws
}

func (c *chaosRun) pick(ws []*chaosWorker) *chaosWorker {
	if len(ws) == 0 {
		return nil
	}
	return ws[c.rng.IntN(len(ws))]
}

var (
	faultLine     = regexp.MustCompile(`fault point ([a-z-]+): killing the process`)
	undrainedLine = regexp.MustCompile(`shutdown: pending changes not committed[^\n]*`)
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
func (c *chaosRun) exited(w *chaosWorker, during string) {
	delete(c.workers, w.id)
	c.counted()
	if p := firedFault(w); p != "" {
		c.mu.Lock()
		c.st.faultKills[p]++
		c.mu.Unlock()
		c.logf("worker %s (pid %d) died at fault point %s (armed %s)%s", w.id, w.svc.Pid(), p, w.fault, during)
		return
	}
	code, _ := w.svc.ExitCode()
	c.problem("worker %s (pid %d, faults %q) exited with status %d%s without being killed; log %s; tail:\n%s",
		w.id, w.svc.Pid(), w.fault, code, during, w.svc.LogPath, tailFile(w.svc.LogPath, 6<<10))
}

// reap accounts for every worker that has exited.
func (c *chaosRun) reap() {
	for _, w := range c.sortedWorkers() {
		if w.svc.Exited() {
			c.exited(w, "")
		}
	}
}

func (c *chaosRun) kill(w *chaosWorker) {
	if w.svc.Exited() {
		c.exited(w, " before the SIGKILL")
		return
	}
	w.svc.Kill() // SIGKILL reaches a frozen process too
	delete(c.workers, w.id)
	c.counted()
	c.mu.Lock()
	c.st.kills++
	c.mu.Unlock()
}

// term stops a worker gracefully. It must exit 0 within the bound (the service's own shutdown
// bound plus slack for a loaded machine), unless an armed fault point kills it on the way.
func (c *chaosRun) term(w *chaosWorker) {
	if w.stopped {
		_ = syscall.Kill(-w.svc.Pid(), syscall.SIGCONT)
		w.stopped = false
	}
	if w.svc.Exited() {
		c.exited(w, " before the SIGTERM")
		return
	}
	// A process that has written nothing may not have installed its signal handlers yet.
	c.waitFor(15*time.Second, func() bool { return w.svc.Exited() || len(w.svc.Log()) > 0 })
	start := time.Now()
	_ = w.svc.cmd.Process.Signal(syscall.SIGTERM)
	const bound = 2 * time.Minute
	select {
	case <-w.svc.Done():
	case <-time.After(bound):
		c.problem("hang: worker %s (pid %d) still running %s after SIGTERM (shutdown_timeout 30s); log %s; tail:\n%s",
			w.id, w.svc.Pid(), bound, w.svc.LogPath, tailFile(w.svc.LogPath, 8<<10))
		w.svc.Kill()
		delete(c.workers, w.id)
		c.counted()
		return
	}
	if code, _ := w.svc.ExitCode(); code == 0 {
		took := time.Since(start)
		delete(c.workers, w.id)
		c.counted()
		c.mu.Lock()
		c.st.terms++
		c.st.maxStop = max(c.st.maxStop, took)
		c.mu.Unlock()
		c.logf("worker %s stopped gracefully in %s", w.id, took.Round(100*time.Millisecond))
		// A graceful stop commits and checkpoints everything it handed on, within
		// shutdown_timeout, also while its commits lose races to other writers of the table
		// (a conflict is re-staged within a quarter second while closing).
		log := w.svc.Log()
		if m := undrainedLine.FindString(log); m != "" {
			contended := ""
			if i := strings.LastIndex(log, "shutting down: flushing"); i >= 0 {
				contended = fmt.Sprintf("; %d commit attempts lost during the stop", strings.Count(log[i:], "commit failed; reloading"))
			}
			c.mu.Lock()
			c.st.slowStops++
			c.mu.Unlock()
			c.problem("worker %s (pid %d) stopped without committing what it had handed on within shutdown_timeout (%s, after %s%s); log %s",
				w.id, w.svc.Pid(), m, took.Round(100*time.Millisecond), contended, w.svc.LogPath)
		}
		return
	}
	c.exited(w, " during a graceful stop")
}

// ---- the lease table -----------------------------------------------------------------------

type leaseRow struct {
	shard, owner, checkpoint string
	timeout                  time.Time
	epoch                    int64
}

func (c *chaosRun) leases(ctx context.Context) (map[string]leaseRow, error) {
	rows := map[string]leaseRow{}
	in := &dynamodb.ScanInput{TableName: aws.String(c.app), ConsistentRead: aws.Bool(true)}
	for {
		out, err := c.ddb.Scan(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			str := func(k string) string {
				if v, ok := item[k].(*ddbtypes.AttributeValueMemberS); ok {
					return v.Value
				}
				return ""
			}
			r := leaseRow{shard: str("ShardID"), owner: str("AssignedTo"), checkpoint: str("Checkpoint")}
			r.timeout, _ = time.Parse(time.RFC3339Nano, str("LeaseTimeout"))
			if v, ok := item["LeaseEpoch"].(*ddbtypes.AttributeValueMemberN); ok {
				r.epoch, _ = strconv.ParseInt(v.Value, 10, 64)
			}
			rows[r.shard] = r
		}
		if out.LastEvaluatedKey == nil {
			return rows, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// held returns the unfinished shards whose unexpired lease a worker holds, per worker id.
func (c *chaosRun) held() map[string][]string {
	rows, err := c.leases(c.ctx)
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	now := time.Now()
	for _, r := range rows {
		if r.owner != "" && r.checkpoint != checkpoint.ShardEnd && r.timeout.After(now) {
			out[r.owner] = append(out[r.owner], r.shard)
		}
	}
	for _, s := range out {
		sort.Strings(s)
	}
	return out
}

// holders returns the running, unfrozen workers that hold at least one lease.
func (c *chaosRun) holders() []*chaosWorker {
	h := c.held()
	var out []*chaosWorker
	for _, w := range c.sortedWorkers() {
		if len(h[w.id]) > 0 && !w.stopped && !w.svc.Exited() {
			out = append(out, w)
		}
	}
	return out
}

// noteLeases counts lease acquisitions (epoch increments) and moves (owner changes).
// It also checks that a checkpoint never moves backwards and that SHARD_END is final.
func (c *chaosRun) noteLeases(rows map[string]leaseRow) {
	var bad []string
	c.mu.Lock()
	c.st.workerSamples[min(c.running, 3)]++
	for shard, r := range rows {
		prev := c.seen[shard]
		if r.epoch > prev.epoch {
			c.st.acquisitions += int(r.epoch - prev.epoch)
			if prev.owner != "" && r.owner != prev.owner {
				c.st.leaseMoves++
			}
		}
		switch {
		case prev.checkpoint == checkpoint.ShardEnd && r.checkpoint != checkpoint.ShardEnd:
			bad = append(bad, fmt.Sprintf("shard %s: checkpoint SHARD_END was overwritten with %q (owner %s, epoch %d)", shard, r.checkpoint, r.owner, r.epoch))
		case isSeq(prev.checkpoint) && isSeq(r.checkpoint) && change.CompareSeq(r.checkpoint, prev.checkpoint) < 0,
			isSeq(prev.checkpoint) && r.checkpoint == "":
			bad = append(bad, fmt.Sprintf("shard %s: checkpoint moved backwards from %s to %q (owner %s, epoch %d)", shard, prev.checkpoint, r.checkpoint, r.owner, r.epoch))
		}
		c.seen[shard] = r
	}
	c.mu.Unlock()
	for _, b := range bad {
		c.violation("%s", b)
	}
}

func isSeq(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// observe samples the lease table every second and checks the committed prefix every
// CheckEvery, until ctx ends.
func (c *chaosRun) observe(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := c.leases(ctx)
		if err != nil {
			continue // the lease table does not exist yet, or the test is ending
		}
		c.noteLeases(rows)
		if time.Since(last) >= c.opt.CheckEvery {
			last = time.Now()
			if err := c.checkCommitted(ctx, "sample"); err != nil && ctx.Err() == nil {
				c.logf("sampled check skipped: %v", err)
			}
		}
	}
}

// ---- the stream's records ----------------------------------------------------------------

// streamRecord is what the oracle needs of a record: its sequence number and the table it
// writes ("" for control records and DMS's own tables).
type streamRecord struct {
	seq, table string
}

type shardRecords struct {
	recs   []streamRecord
	closed bool // read to the end of a closed shard
}

// recordCache reads each shard once, incrementally (kinesis-mock is slow).
type recordCache struct {
	kc     *kinesis.Client
	stream string
	mu     sync.Mutex
	shards map[string]*shardRecords
}

// tableOf returns "schema.table" of a DMS data record the sink writes to a table, else "".
func tableOf(data []byte) string {
	var doc struct {
		Metadata struct {
			RecordType string `json:"record-type"`
			Schema     string `json:"schema-name"`
			Table      string `json:"table-name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &doc) != nil || doc.Metadata.RecordType != "data" || doc.Metadata.Schema == "" ||
		strings.HasPrefix(doc.Metadata.Table, "awsdms_") {
		return ""
	}
	return doc.Metadata.Schema + "." + doc.Metadata.Table
}

// upTo reads the shard until the cache holds seq (ShardEnd: the whole closed shard; "": what
// the stream holds now) and returns the cached records.
func (rc *recordCache) upTo(ctx context.Context, shard, seq string) ([]streamRecord, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	sr := rc.shards[shard]
	if sr == nil {
		sr = &shardRecords{}
		rc.shards[shard] = sr
	}
	have := func() bool {
		switch {
		case sr.closed:
			return true
		case seq == checkpoint.ShardEnd || seq == "":
			return false
		default:
			return len(sr.recs) > 0 && change.CompareSeq(sr.recs[len(sr.recs)-1].seq, seq) >= 0
		}
	}
	if have() {
		return sr.recs, nil
	}
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(rc.stream), ShardId: aws.String(shard),
		ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon}
	if n := len(sr.recs); n > 0 {
		in.ShardIteratorType = kintypes.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(sr.recs[n-1].seq)
	}
	it, err := rc.kc.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("iterator for %s: %w", shard, err)
	}
	iter := it.ShardIterator
	for iter != nil {
		out, err := rc.kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", shard, err)
		}
		for _, r := range out.Records {
			sr.recs = append(sr.recs, streamRecord{seq: aws.ToString(r.SequenceNumber), table: tableOf(r.Data)})
		}
		iter = out.NextShardIterator
		if iter == nil {
			sr.closed = true
		}
		if have() || (len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0) {
			break
		}
	}
	if seq != "" && !have() {
		return sr.recs, fmt.Errorf("shard %s: checkpoint %s is beyond the records the stream holds", shard, seq)
	}
	return sr.recs, nil
}

func (rc *recordCache) tables() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	set := map[string]bool{}
	for _, sr := range rc.shards {
		for _, r := range sr.recs {
			if r.table != "" {
				set[r.table] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---- the catalog -------------------------------------------------------------------------

func (c *chaosRun) openCatalog(ctx context.Context) (catalog.Catalog, func(), error) {
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(c.dataDir))
	if err != nil {
		return nil, nil, err
	}
	return cat, func() {
		if cl, ok := cat.(io.Closer); ok {
			_ = cl.Close()
		}
	}, nil
}

func ident(src string) table.Identifier {
	schema, name, _ := strings.Cut(src, ".")
	return table.Identifier{schema, name}
}

// watermarks loads the per-shard watermarks of every table (a table that does not exist has
// none). A load is retried: metadata files are replaced under a reader.
func (c *chaosRun) watermarks(ctx context.Context, tables []string) (map[string]map[string]string, error) {
	cat, closeCat, err := c.openCatalog(ctx)
	if err != nil {
		return nil, err
	}
	defer closeCat()
	out := map[string]map[string]string{}
	for _, src := range tables {
		var tbl *table.Table
		for attempt := 0; ; attempt++ {
			tbl, err = cat.LoadTable(ctx, ident(src))
			if err == nil || errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) || attempt == 4 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace):
			out[src] = map[string]string{}
		case err != nil:
			return nil, fmt.Errorf("load %s: %w", src, err)
		default:
			out[src] = checkpoint.Watermarks(tbl.Properties(), c.stream)
		}
	}
	return out, nil
}

// checkCommitted checks invariant 1: no shard's checkpoint passes committed data. The
// checkpoints are read first and the watermarks last: watermarks only grow, so a checkpoint
// that was correct when written is still covered.
func (c *chaosRun) checkCommitted(ctx context.Context, when string) error {
	rows, err := c.leases(ctx)
	if err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	cps := map[string]string{}
	for shard, r := range rows {
		switch r.checkpoint {
		case "", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP":
		default:
			cps[shard] = r.checkpoint
		}
	}
	recs := map[string][]streamRecord{}
	for shard, cp := range cps {
		rs, err := c.recs.upTo(ctx, shard, cp)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			c.violation("%s check: %v", when, err)
			continue
		}
		recs[shard] = rs
	}
	wms, err := c.watermarks(ctx, c.recs.tables())
	if err != nil {
		return err
	}
	checked := 0
	shards := make([]string, 0, len(recs))
	for s := range recs {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		cp := cps[shard]
		last := map[string]string{}
		for _, r := range recs[shard] {
			if cp != checkpoint.ShardEnd && change.CompareSeq(r.seq, cp) > 0 {
				break
			}
			checked++
			if r.table != "" {
				last[r.table] = r.seq
			}
		}
		for src, seq := range last {
			if wm := wms[src][shard]; !checkpoint.Covered(wm, seq) {
				c.violation("%s check: shard %s is checkpointed at %s (owner %s, epoch %d) but table %s holds that shard only up to %q; its record %s at or below the checkpoint is not committed",
					when, shard, cp, rows[shard].owner, rows[shard].epoch, src, wm, seq)
			}
		}
	}
	c.mu.Lock()
	c.st.checks++
	c.st.records = checked
	c.mu.Unlock()
	return nil
}

// checkFiles checks that no data or delete file is referenced twice by the table's current
// snapshot, and that no file was added by two snapshots.
func (c *chaosRun) checkFiles(ctx context.Context, src string) (int, error) {
	cat, closeCat, err := c.openCatalog(ctx)
	if err != nil {
		return 0, err
	}
	defer closeCat()
	tbl, err := cat.LoadTable(ctx, ident(src))
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", src, err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	live := map[string]int{}
	if snap := tbl.CurrentSnapshot(); snap != nil {
		mans, err := snap.Manifests(fs)
		if err != nil {
			return 0, fmt.Errorf("%s: manifests of the current snapshot: %w", src, err)
		}
		for _, m := range mans {
			for e, err := range m.Entries(fs, true) {
				if err != nil {
					return 0, fmt.Errorf("%s: manifest %s: %w", src, m.FilePath(), err)
				}
				live[e.DataFile().FilePath()]++
			}
		}
	}
	addedBy := map[string][]int64{}
	readManifests := map[string]bool{}
	for _, snap := range tbl.Metadata().Snapshots() {
		mans, err := snap.Manifests(fs)
		if err != nil {
			return 0, fmt.Errorf("%s: manifests of snapshot %d: %w", src, snap.SnapshotID, err)
		}
		for _, m := range mans {
			if readManifests[m.FilePath()] {
				continue
			}
			readManifests[m.FilePath()] = true
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					return 0, fmt.Errorf("%s: manifest %s: %w", src, m.FilePath(), err)
				}
				if e.Status() == iceberg.EntryStatusADDED {
					p := e.DataFile().FilePath()
					if !slices.Contains(addedBy[p], e.SnapshotID()) {
						addedBy[p] = append(addedBy[p], e.SnapshotID())
					}
				}
			}
		}
	}
	paths := make([]string, 0, len(live))
	for p := range live {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if live[p] > 1 {
			c.violation("table %s: file %s is referenced %d times by the current snapshot", src, p, live[p])
		}
	}
	paths = paths[:0]
	for p := range addedBy {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if len(addedBy[p]) > 1 {
			c.violation("table %s: file %s was added by %d snapshots %v", src, p, len(addedBy[p]), addedBy[p])
		}
	}
	return len(live), nil
}

// ---- the stream's shards -----------------------------------------------------------------

type openShard struct {
	id     string
	lo, hi *big.Int
}

// shardList returns every shard, and the open ones sorted by hash range.
func (c *chaosRun) shardList() ([]kintypes.Shard, []openShard, error) {
	var all []kintypes.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(c.stream)}
	for {
		out, err := c.kc.ListShards(c.ctx, in)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	var open []openShard
	for _, s := range all {
		if s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil {
			continue
		}
		lo, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
		open = append(open, openShard{id: aws.ToString(s.ShardId), lo: lo, hi: hi})
	}
	sort.Slice(open, func(i, j int) bool { return open[i].lo.Cmp(open[j].lo) < 0 })
	return all, open, nil
}

func (c *chaosRun) waitActive() {
	w := kinesis.NewStreamExistsWaiter(c.kc, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(c.ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(c.stream)}, 2*time.Minute); err != nil {
		c.t.Fatalf("stream %s not ACTIVE after a reshard: %v", c.stream, err)
	}
}

// ---- actions -----------------------------------------------------------------------------

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

// waitFor polls cond every 250ms until it holds or d passes.
func (c *chaosRun) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || c.ctx.Err() != nil {
			return false
		}
		c.sleep(250 * time.Millisecond)
	}
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
	start := time.Now()
	moved := c.waitFor(3*c.opt.Failover+30*time.Second, func() bool {
		rows, err := c.leases(c.ctx)
		if err != nil {
			return false
		}
		for _, s := range had {
			if r := rows[s]; r.owner != w.id && r.owner != "" && r.epoch > rows0[s].epoch {
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

// ---- the run -----------------------------------------------------------------------------

func (c *chaosRun) describeWorkers() string {
	var parts []string
	for _, w := range c.sortedWorkers() {
		s := w.id
		if w.fault != "" {
			s += "[" + w.fault + "]"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

var genProgress = regexp.MustCompile(`gen: (\d+)/(\d+) records sent`)

// pace returns how long to wait so that the cycles do not run ahead of the traffic (done is the
// fraction of cycles done): chaos is meant to happen while the generator writes.
func (c *chaosRun) pace(done float64) time.Duration {
	if c.gen.Exited() {
		return 0
	}
	lines := strings.Split(strings.TrimSpace(c.gen.Log()), "\n")
	m := genProgress.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		return 0
	}
	sent, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	ahead := done - float64(sent)/float64(max(total, 1))
	if ahead <= 0 {
		return 0
	}
	d := time.Duration(ahead * float64(total) / c.opt.Rate * float64(time.Second))
	return min(d, 20*time.Second)
}

func (c *chaosRun) genStatus() string {
	if c.gen.Exited() {
		return "done"
	}
	lines := strings.Split(strings.TrimSpace(c.gen.Log()), "\n")
	if m := genProgress.FindStringSubmatch(lines[len(lines)-1]); m != nil {
		return m[1] + "/" + m[2]
	}
	return "writing"
}

func (c *chaosRun) run() {
	t := c.t
	c.start = time.Now()
	t.Logf("CHAOS seed %d, %d cycles (replay: %s=%d %s=%d); workload %d load rows per table + %d changes at %.1f records/s; failover %s",
		c.opt.Seed, c.opt.Cycles, EnvChaosSeed, c.opt.Seed, EnvChaosCycles, c.opt.Cycles, c.opt.LoadRows, c.opt.Changes, c.opt.Rate, c.opt.Failover)
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
	if b, err := os.ReadFile(filepath.Join(c.dataDir, "dead-letters.jsonl")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		c.violation("the workload has no bad record, but the dead-letter file holds:\n%s", tailFile(filepath.Join(c.dataDir, "dead-letters.jsonl"), 4<<10))
	}
	c.report()
}

// complete reports whether every closed shard is at SHARD_END and every open one is
// checkpointed at its last record.
func (c *chaosRun) complete() (bool, string) {
	all, _, err := c.shardList()
	if err != nil {
		return false, err.Error()
	}
	rows, err := c.leases(c.ctx)
	if err != nil {
		return false, err.Error()
	}
	var behind []string
	for _, s := range all {
		id := aws.ToString(s.ShardId)
		cp := rows[id].checkpoint
		if s.SequenceNumberRange.EndingSequenceNumber != nil {
			if cp != checkpoint.ShardEnd {
				behind = append(behind, fmt.Sprintf("%s (closed) at %q", id, cp))
			}
			continue
		}
		recs, err := c.recs.upTo(c.ctx, id, "")
		if err != nil {
			return false, err.Error()
		}
		if len(recs) > 0 && cp != recs[len(recs)-1].seq {
			behind = append(behind, fmt.Sprintf("%s at %q, last record %s", id, cp, recs[len(recs)-1].seq))
		}
	}
	sort.Strings(behind)
	return len(behind) == 0, strings.Join(behind, "; ")
}

var verifyTableLine = regexp.MustCompile(`(?m)^table (\S+): rows=(\d+) expected=(\d+) (ok|DIFF.*)$`)

func (c *chaosRun) verify() {
	stdout, stderr, err := RunCLI(c.t, c.bin, "verify", "--config", c.config, "--expected", c.expected, "--max-diffs", "20")
	out := stdout + stderr
	rows := 0
	for _, m := range verifyTableLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		rows += n
		if m[4] != "ok" {
			c.violation("verify: table %s: %s", m[1], m[4])
		}
	}
	c.mu.Lock()
	c.st.rows = rows
	c.mu.Unlock()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			c.t.Fatalf("verify could not compare: %v\n%s", err, out)
		}
		c.violation("verify found differences:\n%s", out)
		return
	}
	c.logf("verify:\n%s", strings.TrimSpace(out))
}

var (
	fencedLine  = regexp.MustCompile(`lease moved on; this processor stops checkpointing`)
	trimmedLine = regexp.MustCompile(`"trimmed": ([1-9][0-9]*)`)
	landedLine  = regexp.MustCompile(`commit outcome was unknown; the table already holds this batch`)
	// attemptsLine captures the attempts of a writer's commit; conflictLine is one lost attempt.
	attemptsLine = regexp.MustCompile(`\tcommitted\t\{[^\n]*"attempts": ([0-9]+)`)
	conflictLine = regexp.MustCompile(`commit failed; reloading`)
	// errorLine matches a console log line at ERROR level and captures its component and message.
	errorLine = regexp.MustCompile(`(?m)^\S+\tERROR\t([^\n]*?)(?:\t\{[^\n]*)?$`)
	// numbers and workerName make messages that differ only by shard, line or worker one.
	numbers    = regexp.MustCompile(`[0-9]+`)
	workerName = regexp.MustCompile(`worker: \S+`)
)

// report logs the numbers of the run (the CHAOS: line) and the evidence from the workers' logs.
func (c *chaosRun) report() {
	fenced, trimmed, landed := 0, 0, 0
	commits, conflicts, contended, maxAttempts := 0, 0, 0, 0
	errs := map[string]int{}
	for _, p := range c.logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		fenced += len(fencedLine.FindAll(b, -1))
		for _, m := range trimmedLine.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			trimmed += n
		}
		landed += len(landedLine.FindAll(b, -1))
		for _, m := range attemptsLine.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			commits++
			maxAttempts = max(maxAttempts, n)
			if n >= 5 {
				contended++
			}
		}
		conflicts += len(conflictLine.FindAll(b, -1))
		for _, m := range errorLine.FindAllSubmatch(b, -1) {
			msg := strings.ReplaceAll(string(m[1]), "\t", " ")
			errs[numbers.ReplaceAllString(workerName.ReplaceAllString(msg, "worker: W"), "N")]++
		}
	}
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	// The workers' ERROR lines, by message: none is expected, and each is worth a look.
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool {
		return errs[msgs[i]] > errs[msgs[j]] || (errs[msgs[i]] == errs[msgs[j]] && msgs[i] < msgs[j])
	})
	for i, m := range msgs {
		if i == 10 {
			c.t.Logf("CHAOS error lines: ... %d more messages", len(msgs)-10)
			break
		}
		c.t.Logf("CHAOS error lines: %4d × %s", errs[m], m)
	}
	faultKills := 0
	var perPoint []string
	for _, p := range fault.Points {
		faultKills += st.faultKills[p]
		perPoint = append(perPoint, fmt.Sprintf("%s=%d/%d", p, st.faultKills[p], st.faultsArmed[p]))
	}
	var actions []string
	for _, a := range []string{actKill, actFault, actStop, actTerm, actAdd, actRemove, actSplit, actMerge} {
		actions = append(actions, fmt.Sprintf("%s=%d", a, st.actions[a]))
	}
	c.t.Logf("CHAOS: seed=%d cycles=%d duration=%s kills=%d faultKills=%d stops=%d leaseMoves=%d splits=%d merges=%d rowsChecked=%d differences=%d",
		c.opt.Seed, st.cycles, time.Since(c.start).Round(time.Second), st.kills, faultKills, st.stops, st.leaseMoves, st.splits, st.merges, st.rows, len(st.violations))
	samples := st.workerSamples[0] + st.workerSamples[1] + st.workerSamples[2] + st.workerSamples[3]
	share := func(i int) int { return 100 * st.workerSamples[i] / max(1, samples) }
	c.t.Logf("CHAOS detail: time with 0/1/2/3 workers running %d%%/%d%%/%d%%/%d%%; actions %s; fault kills/armed per point: %s; SIGSTOPs during which a lease moved %d/%d; graceful stops %d (longest %s); worker starts %d; lease acquisitions %d; reshards while traffic flowed %d; checkpoint checks %d (the final one over %d records); files checked %d; zombie checkpoints fenced %d; rows trimmed by watermarks %d; batches found committed by another worker after a conflict %d; writer commits %d (lost attempts %d, commits needing 5 or more attempts %d, most attempts %d); graceful stops past shutdown_timeout %d; problems %d",
		share(0), share(1), share(2), share(3), strings.Join(actions, " "), strings.Join(perPoint, " "), st.stopsMoved, st.stops, st.terms, st.maxStop.Round(100*time.Millisecond),
		st.starts, st.acquisitions, st.reshardsLive, st.checks, st.records, st.files, fenced, trimmed, landed,
		commits, conflicts, contended, maxAttempts, st.slowStops, len(st.problems))
}
