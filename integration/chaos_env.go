//go:build integration

package integration

// The chaos run's environment (chaosEnv): the run's directories, the service configurations the
// workers and verify run with, the catalog the oracle reads and the fault proxies in front of the
// dependencies; and the generator (chaosGenerator), the `dms2iceberg gen --rate` process that
// writes the workload while the cycles run.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// depProxy is a fault proxy in front of one dependency ("rest", "s3", "dynamodb" or
// "kinesis"); kinds are the kinds of fault its rules can inject, each of which the run is to
// inject at least once.
type depProxy struct {
	dep   string
	px    *faultproxy.Proxy
	kinds []faultproxy.Kind
}

// chaosEnv is where the run's processes run and what they are configured with.
type chaosEnv struct {
	t   *testing.T
	ctx context.Context
	opt chaosOptions

	bin, stream string
	// root holds dataDir and logDir; it is kept when the run fails. expected is the
	// generator's expected state; config the workers' configuration file.
	root, dataDir, logDir, expected, config string

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
	// http_addr (workerConfig). workerEnv is the workers' extra environment: the AWS endpoints
	// of the faulted AWS dependencies (their proxies).
	workerCfg map[string]any
	workerEnv []string
}

// newChaosEnv makes the run's directories. One directory holds the data and every process's
// log; it is kept when the run fails. Its cleanup is registered before the processes start, so
// it runs after every process was killed.
func newChaosEnv(t *testing.T, opt chaosOptions, bin, stream string) *chaosEnv {
	t.Helper()
	e := &chaosEnv{t: t, ctx: t.Context(), opt: opt, bin: bin, stream: stream}
	var err error
	if keep := os.Getenv(EnvChaosKeep); keep != "" {
		e.root = filepath.Join(keep, fmt.Sprintf("seed-%d-%s", opt.Seed, stream))
		err = os.MkdirAll(e.root, 0o755)
	} else {
		e.root, err = os.MkdirTemp("", fmt.Sprintf("dms2iceberg-chaos-%d-", opt.Seed))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("CHAOS: seed %d failed; logs and data kept in %s (replay: %s=%d %s=%d)", opt.Seed, e.root, EnvChaosSeed, opt.Seed, EnvChaosCycles, opt.Cycles)
			return
		}
		_ = os.RemoveAll(e.root)
	})
	e.dataDir, e.logDir = filepath.Join(e.root, "data"), filepath.Join(e.root, "logs")
	for _, d := range []string{e.dataDir, e.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.expected = filepath.Join(e.dataDir, "expected.json")
	return e
}

// configure writes the service configurations: the workers' (through the fault proxies, if
// any) and verify's (the same catalog, directly).
func (e *chaosEnv) configure() {
	cfg := map[string]any{}
	snk := map[string]any{}
	snk["flush_interval"] = "1s"
	snk["delete_mode"] = e.opt.DeleteMode
	e.catCfg = sink.DefaultCatalogConfig(e.dataDir)
	// verifySnk is the sink section `verify` runs with: the same catalog, without the proxies.
	verifySnk := map[string]any{"flush_interval": "1s"}
	switch {
	case e.opt.DepsREST:
		e.restCatalog(snk, verifySnk)
	case e.opt.DepsS3:
		e.s3Warehouse(snk, verifySnk)
	}
	e.awsProxies()
	if e.namespace != "" {
		snk["namespace"] = e.namespace
		verifySnk["namespace"] = e.namespace
	}
	cfg["sink"] = snk
	cfg["stream"] = e.stream
	cfg["data_dir"] = e.dataDir
	cfg["shutdown_timeout"] = "30s"
	cfg["http_addr"] = "" // each worker process gets its own (workerConfig)
	cfg["consumer"] = map[string]any{"shard_sync": "1s", "failover": e.opt.Failover.String(), "idle_between_reads": "200ms",
		"heartbeat_interval": e.opt.Heartbeat.String()}
	e.workerCfg = cfg
	e.config = e.writeConfig("config.yaml", cfg)
	vcfg := maps.Clone(cfg)
	vcfg["sink"] = verifySnk
	e.verifyConfig = e.writeConfig("verify-config.yaml", vcfg)
}

// restCatalog puts the workers on Iceberg's REST catalog server through the fault proxy; the
// oracle and verify reach it directly. The shared server outlives the run: a namespace of its
// own.
func (e *chaosEnv) restCatalog(snk, verifySnk map[string]any) {
	uri := RequireCatalogServer(e.t, EnvRESTURI)
	px := e.startDepProxy("rest", uri, restFaultRules(0.15, 0.03, 2*time.Second))
	e.namespace = uniqueNamespace("chaos")
	e.catCfg = sink.CatalogConfig{Type: "rest", Name: "dms2iceberg", URI: uri}
	snk["catalog"] = map[string]any{"type": "rest", "uri": px.URL()}
	verifySnk["catalog"] = map[string]any{"type": "rest", "uri": uri}
}

// s3Warehouse keeps the embedded SQL catalog (local, shared by the workers) with its warehouse
// in the S3 emulator: every table file, metadata included, goes through the fault proxy (as in
// TestDependencyFaultsS3); the oracle and verify read S3 directly.
func (e *chaosEnv) s3Warehouse(snk, verifySnk map[string]any) {
	t := e.t
	s3url := os.Getenv("AWS_ENDPOINT_URL_S3")
	px := e.startDepProxy("s3", s3url, s3FaultRules(0.05, 0.02, time.Second))
	bucket := createBucket(t)
	e.s3c = S3(t)
	aws := AWSConfig(t)
	creds, err := aws.Credentials.Retrieve(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	catalogFor := func(endpoint string) sink.CatalogConfig {
		cc := sink.DefaultCatalogConfig(e.dataDir)
		cc.Warehouse = "s3://" + bucket + "/wh"
		cc.Properties = map[string]string{"s3.endpoint": endpoint, "s3.region": aws.Region,
			"s3.access-key-id": creds.AccessKeyID, "s3.secret-access-key": creds.SecretAccessKey}
		return cc
	}
	e.catCfg = catalogFor(s3url)
	asMap := func(cc sink.CatalogConfig) map[string]any {
		return map[string]any{"type": cc.Type, "uri": cc.URI, "warehouse": cc.Warehouse, "properties": cc.Properties}
	}
	snk["catalog"] = asMap(catalogFor(px.URL()))
	verifySnk["catalog"] = asMap(e.catCfg)
}

// awsProxies puts the workers' DynamoDB (the lease table) and Kinesis calls behind fault
// proxies, as EnvChaosDeps asks, through the SDK's per-service endpoint variables; the
// generator and the oracle keep the emulators.
func (e *chaosEnv) awsProxies() {
	if e.opt.DepsDynamo {
		up := requireEnv(e.t, "AWS_ENDPOINT_URL_DYNAMODB")
		px := e.startDepProxy("dynamodb", up, dynamoFaultRules(0.04, 0.02, 2*time.Second))
		e.workerEnv = append(e.workerEnv, "AWS_ENDPOINT_URL_DYNAMODB="+px.URL())
	}
	if e.opt.DepsKinesis {
		up := requireEnv(e.t, "AWS_ENDPOINT_URL_KINESIS")
		px := e.startDepProxy("kinesis", up, kinesisFaultRules(0.02, 0.2, 2*time.Second, e.opt.Heartbeat > 0))
		e.workerEnv = append(e.workerEnv, "AWS_ENDPOINT_URL_KINESIS="+px.URL())
	}
}

// requireEnv returns the variable name's value; unset fails the test.
func requireEnv(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: eval \"$(.ci/emulators.sh env)\"", name)
	}
	return v
}

// startDepProxy starts a fault proxy with rules in front of a dependency for the run's
// lifetime.
func (e *chaosEnv) startDepProxy(dep, upstream string, rules []faultproxy.Rule) *faultproxy.Proxy {
	px, err := faultproxy.New(upstream, faultproxy.Options{Seed: uint64(e.opt.Seed)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = px.Close() })
	px.SetRules(rules...)
	var kinds []faultproxy.Kind
	for _, r := range rules {
		for _, k := range r.Kinds {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	e.proxies = append(e.proxies, depProxy{dep: dep, px: px, kinds: kinds})
	return px
}

// writeConfig writes a service configuration into the data directory and returns its path.
func (e *chaosEnv) writeConfig(name string, cfg map[string]any) string {
	out, err := yaml.Marshal(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.dataDir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// workerConfig writes the configuration of the nth worker process, id, which serves /metrics
// on addr, and returns its path.
func (e *chaosEnv) workerConfig(n int, id, addr string) string {
	cfg := maps.Clone(e.workerCfg)
	cfg["http_addr"] = addr
	return e.writeConfig(fmt.Sprintf("config-%d-%s.yaml", n, id), cfg)
}

func (e *chaosEnv) openCatalog(ctx context.Context) (catalog.Catalog, func(), error) {
	cat, err := sink.OpenCatalog(ctx, e.catCfg)
	if err != nil {
		return nil, nil, err
	}
	return cat, func() {
		if cl, ok := cat.(io.Closer); ok {
			_ = cl.Close()
		}
	}, nil
}

// tableIdent is the identifier of the target table of source table src.
func (e *chaosEnv) tableIdent(src string) table.Identifier {
	id := ident(src)
	if e.namespace != "" {
		id[0] = e.namespace
	}
	return id
}

func ident(src string) table.Identifier {
	schema, name, _ := strings.Cut(src, ".")
	return table.Identifier{schema, name}
}

// chaosGenerator is the generator process (nil svc until start).
type chaosGenerator struct {
	svc  *Service
	rate float64 // records per second
	// px is the fault proxy in front of the generator's PutRecords (with EnvChaosDeps
	// kinesis; nil without).
	px *faultproxy.Proxy
}

// The generator's ParallelApply (primary-key-full): requests in flight and records per request
// (gen --apply-threads, --apply-batch; kinesis-mock stores 25-50-record requests much faster
// per record than 500-record ones).
const (
	genApplyThreads = 4
	genApplyBatch   = 50
)

// start starts the generator in the background. The workload is laid out the way DMS writes it
// by default (full load by primary key, CDC by schema.table, control records on the task's
// key), or with EnvChaosLayout primary-key-full as ParallelApply does (every keyed record by
// primary key: a hot table's changes on every shard at once, a key change on another shard
// than the old key's records) with full before-images; with primary-key changes and a DMS
// reload of customers mid-stream (rows deleted at the source during its outage), and the
// service gets no per-table configuration: tables come from the create-table records, in order
// across shards (the ordering guard).
func (g *chaosGenerator) start(e *chaosEnv) {
	t, opt := e.t, e.opt
	layout := []string{"--layout", "dms-default"}
	if opt.Layout == layoutPKFull {
		// ParallelApply: several PutRecords requests in flight, each of distinct keys.
		layout = []string{"--layout", "primary-key", "--full-before-images",
			"--apply-threads", strconv.Itoa(genApplyThreads), "--apply-batch", strconv.Itoa(genApplyBatch)}
	}
	args := append([]string{"gen", "--stream", e.stream, "--shards", strconv.Itoa(int(opt.Shards)),
		"--changes", strconv.Itoa(opt.Changes), "--load-rows", strconv.Itoa(opt.LoadRows),
		"--seed", strconv.FormatInt(opt.Seed, 10), "--rate", strconv.FormatFloat(opt.Rate, 'f', 1, 64)}, layout...)
	args = append(args, "--reload-table", "customers", "--expected", e.expected)
	var env []string
	if opt.DepsKinesis {
		// The generator's PutRecords get partial failures and throughput refusals (nothing
		// written): it must send the refused records again, each exactly once (checkLedger).
		up := requireEnv(t, "AWS_ENDPOINT_URL_KINESIS")
		g.px = e.startDepProxy("kinesis-gen", up, genFaultRules(0.05))
		env = append(env, "AWS_ENDPOINT_URL_KINESIS="+g.px.URL())
	}
	g.svc = startCommand(t, e.bin, args, env, e.logDir, 16<<10)
}

// waitExpected waits until the generator has written the expected state.
func (g *chaosGenerator) waitExpected(t *testing.T, expected string) {
	WaitFor(t, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if g.svc.Exited() {
			return false, fmt.Errorf("gen exited:\n%s", tailFile(g.svc.LogPath, 8<<10))
		}
		_, err := os.Stat(expected)
		return err == nil, nil
	}, "gen to write the expected state")
}

// waitDone waits for the traffic to be complete; an incomplete traffic fails the test.
func (g *chaosGenerator) waitDone(t *testing.T) {
	select {
	case <-g.svc.Done():
	case <-time.After(time.Hour):
		t.Fatalf("gen still running an hour after the cycles")
	}
	if code, _ := g.svc.ExitCode(); code != 0 {
		t.Fatalf("gen failed (status %d); the traffic is incomplete:\n%s", code, tailFile(g.svc.LogPath, 8<<10))
	}
}

func (g *chaosGenerator) exited() bool { return g.svc.Exited() }

var genProgress = regexp.MustCompile(`gen: (\d+)/(\d+) records sent`)

// pace returns how long to wait so that the cycles do not run ahead of the traffic (done is the
// fraction of cycles done): chaos is meant to happen while the generator writes.
func (g *chaosGenerator) pace(done float64) time.Duration {
	if g.svc.Exited() {
		return 0
	}
	lines := strings.Split(strings.TrimSpace(g.svc.Log()), "\n")
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
	d := time.Duration(ahead * float64(total) / g.rate * float64(time.Second))
	return min(d, 20*time.Second)
}

func (g *chaosGenerator) status() string {
	if g.svc.Exited() {
		return "done"
	}
	lines := strings.Split(strings.TrimSpace(g.svc.Log()), "\n")
	if m := genProgress.FindStringSubmatch(lines[len(lines)-1]); m != nil {
		return m[1] + "/" + m[2]
	}
	return "writing"
}
