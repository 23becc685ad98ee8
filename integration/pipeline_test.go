//go:build integration

package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// pipeline is one generated workload on its own stream, with a service configuration for it.
type pipeline struct {
	t        *testing.T
	bin      string
	stream   string
	app      string
	dataDir  string
	config   string
	expected string
	// tablesCfg is the generator's tables config (sink.tables: keys and column types).
	tablesCfg string
	records   int
	cat       catalog.Catalog // the service's catalog as the test reads it (serviceCatalog)
}

// newPipeline creates a stream, writes a generated DMS workload to it and writes the service
// configuration (embedded SQLite catalog and local warehouse under t.TempDir()).
func newPipeline(t *testing.T, shards, changes int, seed int64) *pipeline {
	t.Helper()
	p := preparePipeline(t)
	start := time.Now()
	_, stderr, err := RunCLI(t, p.bin, p.genArgs(shards, changes, seed, 0)...)
	if err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	p.records = countRecords(t, p.stream)
	t.Logf("gen wrote %d records to %d shards in %s", p.records, shards, time.Since(start).Round(time.Millisecond))
	p.writeConfig(nil)
	return p
}

// newPipelineLive is newPipeline with the workload written while the test runs, at rate records
// per second: the returned generator process is still sending. The expected state and the
// service configuration exist when it returns. genExtra is added to gen's arguments.
func newPipelineLive(t *testing.T, shards, changes int, seed int64, rate int, genExtra ...string) (*pipeline, *Service) {
	t.Helper()
	p := preparePipeline(t)
	gen := StartCommand(t, p.bin, append(p.genArgs(shards, changes, seed, rate), genExtra...), nil)
	WaitFor(t, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if gen.Exited() {
			if code, _ := gen.ExitCode(); code != 0 {
				return false, fmt.Errorf("gen exited with %d:\n%s", code, tailFile(gen.LogPath, 8<<10))
			}
		}
		_, e1 := os.Stat(p.expected)
		_, e2 := os.Stat(p.tablesCfg)
		return e1 == nil && e2 == nil, nil
	}, "gen to write the expected state and the tables config")
	p.writeConfig(nil)
	return p, gen
}

func preparePipeline(t *testing.T) *pipeline {
	t.Helper()
	RequireEmulators(t)
	p := &pipeline{t: t, bin: BuildBinary(t), stream: UniqueName(t.Name()), dataDir: t.TempDir()}
	p.app = "dms2iceberg-" + p.stream
	p.expected = filepath.Join(p.dataDir, "expected.json")
	p.tablesCfg = filepath.Join(p.dataDir, "tables.yaml")
	t.Cleanup(func() { DeleteStream(t, p.stream); DeleteTable(t, p.app) })
	return p
}

func (p *pipeline) genArgs(shards, changes int, seed int64, rate int) []string {
	return []string{"gen", "--stream", p.stream, "--shards", strconv.Itoa(shards),
		"--changes", strconv.Itoa(changes), "--seed", strconv.FormatInt(seed, 10),
		"--expected", p.expected, "--tables-config", p.tablesCfg, "--rate", strconv.Itoa(rate)}
}

// writeConfig writes the service configuration: the generator's tables config plus the
// stream, a private data directory (SQLite catalog, local warehouse), short test timings, no
// HTTP server, and sinkExtra merged into the sink section.
func (p *pipeline) writeConfig(sinkExtra map[string]any) {
	t := p.t
	t.Helper()
	tablesCfg := p.tablesCfg
	var cfg map[string]any
	b, err := os.ReadFile(tablesCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("tables config: %v", err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	snk, _ := cfg["sink"].(map[string]any)
	if snk == nil {
		snk = map[string]any{}
	}
	snk["flush_interval"] = "1s"
	maps.Copy(snk, sinkExtra)
	cfg["sink"] = snk
	cfg["stream"] = p.stream
	cfg["data_dir"] = p.dataDir
	cfg["shutdown_timeout"] = "60s"
	cfg["http_addr"] = ""
	cfg["consumer"] = map[string]any{"shard_sync": "1s", "failover": "6s", "idle_between_reads": "200ms"}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.config = filepath.Join(p.dataDir, "config.yaml")
	if err := os.WriteFile(p.config, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// countRecords reads the whole stream once and counts its records.
func countRecords(t *testing.T, stream string) int {
	t.Helper()
	kc := Kinesis(t)
	ctx := t.Context()
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sh := range shards.Shards {
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
			ShardId: sh.ShardId, ShardIteratorType: "TRIM_HORIZON"})
		if err != nil {
			t.Fatal(err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
			if err != nil {
				t.Fatal(err)
			}
			n += len(out.Records)
			if len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	return n
}

// verify runs `dms2iceberg verify` and reports whether every table equals the expected state.
func (p *pipeline) verify() (bool, string) {
	stdout, stderr, err := RunCLI(p.t, p.bin, "verify", "--config", p.config, "--expected", p.expected)
	return err == nil, stdout + stderr
}

// waitVerified polls verify until it passes.
func (p *pipeline) waitVerified(timeout time.Duration, svc ...*Service) {
	p.t.Helper()
	var last string
	WaitFor(p.t, timeout, 3*time.Second, func() (bool, error) {
		for _, s := range svc {
			if s.Exited() {
				return false, fmt.Errorf("service exited early:\n%s", tailFile(s.LogPath, 8<<10))
			}
		}
		ok, out := p.verify()
		last = out
		return ok, nil
	}, "verify to report every table equal to the expected state")
	p.t.Logf("verify:\n%s", last)
}

// checkpoints returns the lease table's checkpoint per shard.
func (p *pipeline) checkpoints() map[string]string {
	p.t.Helper()
	out, err := DynamoDB(p.t).Scan(p.t.Context(), &dynamodb.ScanInput{TableName: aws.String(p.app), ConsistentRead: aws.Bool(true)})
	if err != nil {
		p.t.Fatalf("scan lease table: %v", err)
	}
	cps := map[string]string{}
	for _, item := range out.Items {
		id, _ := item[checkpoint.AttrShardID].(*ddbtypes.AttributeValueMemberS)
		cp, _ := item[checkpoint.AttrCheckpoint].(*ddbtypes.AttributeValueMemberS)
		if id != nil && cp != nil {
			cps[id.Value] = cp.Value
		}
	}
	return cps
}

// lastSequenceNumbers returns the last record's sequence number per shard.
func (p *pipeline) lastSequenceNumbers() map[string]string {
	p.t.Helper()
	kc := Kinesis(p.t)
	ctx := p.t.Context()
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(p.stream)})
	if err != nil {
		p.t.Fatal(err)
	}
	last := map[string]string{}
	for _, sh := range shards.Shards {
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(p.stream),
			ShardId: sh.ShardId, ShardIteratorType: "TRIM_HORIZON"})
		if err != nil {
			p.t.Fatal(err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
			if err != nil {
				p.t.Fatal(err)
			}
			if n := len(out.Records); n > 0 {
				last[aws.ToString(sh.ShardId)] = aws.ToString(out.Records[n-1].SequenceNumber)
			} else if aws.ToInt64(out.MillisBehindLatest) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	return last
}

var commitLine = regexp.MustCompile(`committed.*"took": "([0-9.]+)(ms|s|µs)"`)

// commitLatencies extracts the commit durations from service logs.
func commitLatencies(t *testing.T, logs ...string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range commitLine.FindAllStringSubmatch(string(b), -1) {
			d, err := time.ParseDuration(m[1] + m[2])
			if err == nil {
				out = append(out, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(float64(len(ds)-1)*p)]
}

// TestPipelineEndToEnd drives a generated workload (≥ 3 tables, ≥ 20,000 changes with updates,
// deletes and primary-key changes) through a 4-shard stream into Iceberg and checks the tables
// against the expected state, then checks that a graceful stop checkpointed everything.
func TestPipelineEndToEnd(t *testing.T) {
	p := newPipeline(t, 4, 20000, 1)
	start := time.Now()
	svc := StartService(t, p.bin, p.config)
	p.waitVerified(10*time.Minute, svc)
	elapsed := time.Since(start)
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if code, _ := svc.ExitCode(); code != 0 {
		t.Fatalf("service exited with %d after SIGTERM", code)
	}
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after stop:\n%s", out)
	}
	// After a graceful stop every shard is checkpointed at its last record: nothing left behind.
	last, cps := p.lastSequenceNumbers(), p.checkpoints()
	for shard, seq := range last {
		if cps[shard] != seq {
			t.Errorf("shard %s: checkpoint %q after graceful stop, want the last record %q", shard, cps[shard], seq)
		}
	}
	lat := commitLatencies(t, svc.LogPath)
	if len(lat) == 0 {
		t.Fatal("no commit lines in the service log")
	}
	t.Logf("MEASURED: %d records in %s until verified (%.0f records/s through the emulator stack, upper bound on latency); %d commits, commit latency p50 %s p99 %s max %s",
		p.records, elapsed.Round(time.Millisecond), float64(p.records)/elapsed.Seconds(), len(lat),
		pct(lat, 0.5), pct(lat, 0.99), lat[len(lat)-1])
}

// TestPipelineSurvivesKills SIGKILLs the service twice mid-stream and restarts it (once with the
// same worker id, once with a new one that must wait for the leases to expire); the tables must
// still equal the expected state, with no duplicate in the keyless table (verify compares it as a
// multiset).
func TestPipelineSurvivesKills(t *testing.T) {
	// The workload is written while the service runs, so every kill lands mid-stream.
	p, gen := newPipelineLive(t, 4, 20000, 2, 400)
	commits := func(s *Service) int {
		b, _ := os.ReadFile(s.LogPath)
		return strings.Count(string(b), "\tcommitted\t")
	}
	var logs []string
	svc := StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID=w1")
	logs = append(logs, svc.LogPath)
	for kill := 1; kill <= 2; kill++ {
		WaitFor(t, 5*time.Minute, 200*time.Millisecond, func() (bool, error) {
			if svc.Exited() {
				return false, fmt.Errorf("service exited:\n%s", tailFile(svc.LogPath, 8<<10))
			}
			return commits(svc) >= 2, nil
		}, "commits before the kill")
		if gen.Exited() {
			t.Logf("kill %d: the generator had already finished; the kill is after the last record was written", kill)
		}
		svc.Kill()
		t.Logf("kill %d: SIGKILL after %d commits of this run", kill, commits(svc))
		worker := "w1"
		if kill == 2 {
			worker = "w2" // a different worker: the dead one's leases must expire first
		}
		svc = StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID="+worker)
		logs = append(logs, svc.LogPath)
	}
	if err := gen.WaitTimeout(10 * time.Minute); err != nil {
		t.Fatalf("gen: %v\n%s", err, tailFile(gen.LogPath, 8<<10))
	}
	p.records = countRecords(t, p.stream)
	p.waitVerified(10*time.Minute, svc)
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after stop:\n%s", out)
	}
	lat := commitLatencies(t, logs...)
	t.Logf("MEASURED: %d records; survived 2 SIGKILLs mid-stream; %d commits over 3 runs, commit latency p50 %s p99 %s", p.records, len(lat), pct(lat, 0.5), pct(lat, 0.99))
}
