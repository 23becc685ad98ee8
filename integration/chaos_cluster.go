//go:build integration

package integration

// The chaos run's cluster: the stream, the generator and the worker processes the driver starts,
// stops and kills, and what it reads of the lease table and the shards to choose its victims.

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// setup creates the stream, starts the generator in the background and writes the service
// configuration once the generator has written the expected state.
func (c *chaosRun) setup() {
	t := c.t
	CreateStream(t, c.stream, c.opt.Shards)
	// The workload is laid out the way DMS writes it by default (full load by primary key, CDC
	// by schema.table, control records on the task's key), with primary-key changes and a DMS
	// reload of customers mid-stream (rows deleted at the source during its outage), and the
	// service gets no per-table configuration: tables come from the create-table records, in
	// order across shards (the ordering guard).
	c.gen = startCommand(t, c.bin, []string{"gen", "--stream", c.stream, "--shards", strconv.Itoa(int(c.opt.Shards)),
		"--changes", strconv.Itoa(c.opt.Changes), "--load-rows", strconv.Itoa(c.opt.LoadRows),
		"--seed", strconv.FormatInt(c.opt.Seed, 10), "--rate", strconv.FormatFloat(c.opt.Rate, 'f', 1, 64),
		"--layout", "dms-default", "--reload-table", "customers", "--expected", c.expected}, nil, c.logDir, 16<<10)
	c.logs = append(c.logs, c.gen.LogPath)
	c.st.genStart = time.Now()
	WaitFor(t, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if c.gen.Exited() {
			return false, fmt.Errorf("gen exited:\n%s", tailFile(c.gen.LogPath, 8<<10))
		}
		_, err := os.Stat(c.expected)
		return err == nil, nil
	}, "gen to write the expected state")

	cfg := map[string]any{}
	snk := map[string]any{}
	snk["flush_interval"] = "1s"
	snk["delete_mode"] = c.opt.DeleteMode
	c.catCfg = sink.DefaultCatalogConfig(c.dataDir)
	// verifySnk is the sink section `verify` runs with: the same catalog, without the proxies.
	verifySnk := map[string]any{"flush_interval": "1s"}
	switch {
	case c.opt.DepsREST:
		// The workers reach Iceberg's REST catalog server through the fault proxy; the oracle
		// and verify reach it directly. The shared server outlives the run: a namespace of its
		// own.
		uri := RequireCatalogServer(t, EnvRESTURI)
		px := c.startDepProxy("rest", uri)
		px.SetRules(restFaultRules(0.15, 0.03, 2*time.Second)...)
		c.namespace = uniqueNamespace("chaos")
		c.catCfg = sink.CatalogConfig{Type: "rest", Name: "dms2iceberg", URI: uri}
		snk["catalog"] = map[string]any{"type": "rest", "uri": px.URL()}
		verifySnk["catalog"] = map[string]any{"type": "rest", "uri": uri}
	case c.opt.DepsS3:
		// The embedded SQL catalog (local, shared by the workers) with its warehouse in the S3
		// emulator: every table file, metadata included, goes through the fault proxy (as in
		// TestDependencyFaultsS3); the oracle and verify read S3 directly.
		s3url := os.Getenv("AWS_ENDPOINT_URL_S3")
		px := c.startDepProxy("s3", s3url)
		px.SetRules(s3FaultRules(0.05, 0.02, time.Second)...)
		bucket := createBucket(t)
		c.s3c = S3(t)
		aws := AWSConfig(t)
		creds, err := aws.Credentials.Retrieve(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		catalogFor := func(endpoint string) sink.CatalogConfig {
			cc := sink.DefaultCatalogConfig(c.dataDir)
			cc.Warehouse = "s3://" + bucket + "/wh"
			cc.Properties = map[string]string{"s3.endpoint": endpoint, "s3.region": aws.Region,
				"s3.access-key-id": creds.AccessKeyID, "s3.secret-access-key": creds.SecretAccessKey}
			return cc
		}
		c.catCfg = catalogFor(s3url)
		asMap := func(cc sink.CatalogConfig) map[string]any {
			return map[string]any{"type": cc.Type, "uri": cc.URI, "warehouse": cc.Warehouse, "properties": cc.Properties}
		}
		snk["catalog"] = asMap(catalogFor(px.URL()))
		verifySnk["catalog"] = asMap(c.catCfg)
	}
	if c.namespace != "" {
		snk["namespace"] = c.namespace
		verifySnk["namespace"] = c.namespace
	}
	cfg["sink"] = snk
	cfg["stream"] = c.stream
	cfg["data_dir"] = c.dataDir
	cfg["shutdown_timeout"] = "30s"
	cfg["http_addr"] = "" // each worker process gets its own (startWorker)
	cfg["consumer"] = map[string]any{"shard_sync": "1s", "failover": c.opt.Failover.String(), "idle_between_reads": "200ms",
		"heartbeat_interval": c.opt.Heartbeat.String()}
	c.workerCfg = cfg
	c.config = c.writeConfig("config.yaml", cfg)
	vcfg := maps.Clone(cfg)
	vcfg["sink"] = verifySnk
	c.verifyConfig = c.writeConfig("verify-config.yaml", vcfg)
}

// startDepProxy starts a fault proxy in front of a dependency for the run's lifetime.
func (c *chaosRun) startDepProxy(dep, upstream string) *faultproxy.Proxy {
	px, err := faultproxy.New(upstream, faultproxy.Options{Seed: uint64(c.opt.Seed)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = px.Close() })
	c.proxies = append(c.proxies, depProxy{dep: dep, px: px})
	return px
}

// writeConfig writes a service configuration into the data directory and returns its path.
func (c *chaosRun) writeConfig(name string, cfg map[string]any) string {
	out, err := yaml.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.dataDir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		c.t.Fatal(err)
	}
	return path
}

func (c *chaosRun) startWorker(id, faults string) *chaosWorker {
	env := []string{"DMS2ICEBERG_WORKER_ID=" + id}
	point := ""
	if faults != "" {
		env = append(env, "DMS2ICEBERG_FAULTS="+faults)
		point = strings.FieldsFunc(faults, func(r rune) bool { return r == '@' || r == '%' })[0]
	}
	// Each process serves /metrics on its own port (up to three workers on one host), for the
	// unknown commit outcomes (scraper).
	addr := opsFreeAddr(c.t)
	cfg := maps.Clone(c.workerCfg)
	cfg["http_addr"] = addr
	c.mu.Lock()
	n := c.st.starts + 1
	c.mu.Unlock()
	config := c.writeConfig(fmt.Sprintf("config-%d-%s.yaml", n, id), cfg)
	svc := startCommand(c.t, c.bin, []string{"run", "--config", config}, env, c.logDir, 16<<10)
	w := &chaosWorker{id: id, svc: svc, fault: faults, point: point, m: c.scr.add(id, addr)}
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
func (c *chaosRun) exited(w *chaosWorker, during string) {
	c.scr.setDone(w.m)
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
	c.scr.last(w.m) // (not when frozen)
	w.svc.Kill()    // SIGKILL reaches a frozen process too
	delete(c.workers, w.id)
	c.counted()
	c.mu.Lock()
	c.st.kills++
	c.mu.Unlock()
}

// stopScraping scrapes a stopping worker's /metrics every 250 ms until it exits (the service
// serves them until its sink has closed, so the final flush's counts are seen) or bound passes;
// it reports whether the worker exited.
func (c *chaosRun) stopScraping(w *chaosWorker, bound time.Duration) bool {
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
func (c *chaosRun) term(w *chaosWorker) {
	if w.stopped {
		_ = syscall.Kill(-w.svc.Pid(), syscall.SIGCONT)
		w.stopped = false
		c.scr.setFrozen(w.m, false)
	}
	if w.svc.Exited() {
		c.exited(w, " before the SIGTERM")
		return
	}
	// A process that has written nothing may not have installed its signal handlers yet.
	c.waitFor(15*time.Second, func() bool { return w.svc.Exited() || len(w.svc.Log()) > 0 })
	c.scr.scrape(w.m)
	start := time.Now()
	_ = w.svc.cmd.Process.Signal(syscall.SIGTERM)
	const bound = 2 * time.Minute
	if !c.stopScraping(w, bound) {
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
		if m := heldLine.FindString(log); m != "" {
			c.logf("worker %s: its final commit waited for the stream watermark held by a shard nobody read (%s)", w.id, m)
		}
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

// leases reads every lease row (checkpoint.ParseLeaseRow; a malformed timeout or epoch reads as
// zero, as for status).
func (c *chaosRun) leases(ctx context.Context) (map[string]checkpoint.LeaseRow, error) {
	rows := map[string]checkpoint.LeaseRow{}
	in := &dynamodb.ScanInput{TableName: aws.String(c.app), ConsistentRead: aws.Bool(true)}
	for {
		out, err := c.ddb.Scan(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			r, _ := checkpoint.ParseLeaseRow(item)
			rows[r.Shard] = r
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
		if r.Owner != "" && r.Checkpoint != checkpoint.ShardEnd && r.LeaseTimeout.After(now) {
			out[r.Owner] = append(out[r.Owner], r.Shard)
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
