//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// The ordering tests write one of DMS's real partitioning layouts to
// a 4-shard stream and consume it with two service processes sharing one KCL application (lease
// table) and one catalog, with no per-table configuration: no sink.tables, no tables config, so
// the tables' keys and types can only come from DMS's create-table control records.
//
// A case lags one shard in one of two ways: its records arrive late (gen --lag-shard/--lag holds
// them back, so their arrival times are later than the records written after them on other
// shards), or its reader starts late (a dead worker holds the shard's lease for a while, so the
// shard is read after the others although its records arrived on time).
//
// Each case runs its stream through two modes, one after the other, each with its own KCL
// application and catalog:
//
//   - arrival: the default configuration (sink.ordering is not written; its default is arrival).
//     Every table must equal the expected state, with the types of the table-def.
//   - shard: sink.ordering: shard, the behaviour before the ordering guard. verify must report
//     differences (stale or resurrected rows, duplicate keys, wrong types): the negative control
//     that shows the arrival check can fail on this stream.
//
// Until the service knows sink.ordering (its config parser rejects unknown keys), shard is what
// it does whatever is configured, so the shard mode writes the key only when the binary accepts
// it (see orderingKeySupported; DMS2ICEBERG_IT_ORDERING_KEY overrides the probe).

// EnvOrderingKey selects whether the shard mode writes sink.ordering: shard: "auto" (default:
// when the built binary accepts the key), "1" (always) or "0" (never; only meaningful for a
// service without the key, whose only behaviour is shard ordering).
const EnvOrderingKey = "DMS2ICEBERG_IT_ORDERING_KEY"

// Workload size of every case: 5 create-table records, 4*ordLoadRows load records and
// ordChanges CDC records (a reload adds its own), small enough that a case stays well under
// 90 s with a race-built binary.
const (
	ordLoadRows = 200
	ordChanges  = 3000
	ordSeed     = 71
	// ordLag is how late the lagging shard's records arrive.
	ordLag = 4 * time.Second
	// ordConsumeTimeout bounds the wait for both processes to checkpoint every shard at its last
	// record.
	ordConsumeTimeout = 4 * time.Minute
	// ordLateReader is how long after the services start a late shard's lease expires.
	ordLateReader = 15 * time.Second
	// ordLogTail is how much of each service log a failing case writes to the test log.
	ordLogTail = 24 << 10
)

// orderingCase is one stream: a layout, optionally a lagging shard or a table reload, and the
// modes it is consumed in.
type orderingCase struct {
	name   string
	layout string // gen --layout
	// lagShard is the open shard (0-based, in hash-key order) whose records arrive ordLag late
	// (gen holds them back, so their arrival times are late); -1: none.
	lagShard int
	// lateShard is the shard whose reader starts ordLateReader late: a dead worker holds its
	// lease until then (the records arrived on time, but nobody reads them); -1: none.
	lateShard int
	// reload is the table gen reloads mid-stream (--reload-table); "": none.
	reload string
	// modes lists the modes the stream is consumed in: "arrival" and/or "shard".
	modes []string
	// processes is how many service processes read the stream (ordProcesses when 0).
	processes int
	// consumer is merged into the consumer section of every run's configuration.
	consumer map[string]any
	// fullBefore writes every update's before-image with all columns (gen --full-before-images),
	// as MySQL does with ColumnFilter all.
	fullBefore bool
}

// orderingCases: with seed ordSeed on 4 even shards, the records go (see pkg/workload ShardOf):
//
//	dms-default: shard 0 the create-table records of customers and order_items, the CDC of
//	events and types; shard 1 the create-table records of events and types; shard 2 the CDC of
//	customers (with its primary-key changes); shard 3 the CDC of order_items; the load records
//	(by primary key) spread over all four.
//	primary-key: control records as above; every keyed record by primary key, spread over all
//	four.
//
// A lagging shard (its records arrive late, -lag cases) is chosen for the hazard of its layout:
// in dms-default shard 2, so that customers' CDC arrives late relative to the loads of its keys
// on the other shards; in primary-key shard 0, which also holds the create-table records of
// customers and order_items. Late arrival puts those records out of source order across shards
// (a load after a CDC change of its key, a create-table after its table's data, an old key's
// update after the key change that deleted it), so arrival order alone cannot order them: the
// -lag cases pass only if the guard also keeps a load from overwriting a committed CDC change
// and waits for a table's create-table. A late reader (-late-reader cases) is shard 0 in both: its
// create-table records and a quarter of the loads are read after everything else.
var orderingCases = []orderingCase{
	{name: "dms-default", layout: "dms-default", lagShard: -1, lateShard: -1, modes: []string{"arrival", "shard"}},
	{name: "dms-default-late-reader", layout: "dms-default", lagShard: -1, lateShard: 0, modes: []string{"arrival", "shard"}},
	{name: "primary-key", layout: "primary-key", lagShard: -1, lateShard: -1, modes: []string{"arrival", "shard"}},
	{name: "primary-key-late-reader", layout: "primary-key", lagShard: -1, lateShard: 0, modes: []string{"arrival", "shard"}},
	// Heartbeats (consumer.heartbeat_interval) with an hour's arrival margin (fixed: the floor
	// too, so that the measured margin does not replace it): once caught up,
	// the shards whose records end first would hold W below the others' last records for an
	// hour by the tip rule, so the run completes within ordConsumeTimeout only if the
	// heartbeats read back move those shards' horizons, and verify shows they order correctly.
	{name: "dms-default-heartbeats", layout: "dms-default", lagShard: -1, lateShard: -1, modes: []string{"arrival"},
		consumer: map[string]any{"heartbeat_interval": "250ms", "arrival_margin": "1h", "arrival_margin_floor": "1h"}},
	// The layout of hot tables: primary-key partitioning (DMS ParallelApply) with MySQL's full
	// before-images, read by three processes. An update that keeps its key is no key change
	// whatever its before-image holds, so it waits for no other process; only the real key
	// changes do. Counting every update as a key change serialised the processes (minutes for
	// this stream).
	{name: "primary-key-full-before-images", layout: "primary-key", lagShard: -1, lateShard: -1, modes: []string{"arrival"},
		processes: 3, fullBefore: true},
	{name: "primary-key-full-before-images-late-reader", layout: "primary-key", lagShard: -1, lateShard: 0, modes: []string{"arrival"},
		processes: 3, fullBefore: true},
	// Customers reloaded after an outage that deleted and updated rows without records;
	// the expected state does not hold the deleted rows.
}

// TestOrdering runs every case of orderingCases: TestOrdering/<case>/<mode>. A later run can pick
// cases, e.g. -run '^TestOrdering$/^primary-key-lag$/^arrival$', or every negative control with
// -run '^TestOrdering$/.*/^shard$'.
func TestOrdering(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	for _, c := range orderingCases {
		t.Run(c.name, func(t *testing.T) {
			s := newOrderingStream(t, bin, c)
			for _, mode := range c.modes {
				t.Run(mode, func(t *testing.T) {
					switch mode {
					case "arrival":
						s.runArrival(t)
					case "shard":
						s.runShard(t)
					default:
						t.Fatalf("unknown mode %q", mode)
					}
				})
			}
		})
	}
}

// orderingStream is one generated workload on its own stream.
type orderingStream struct {
	c        orderingCase
	bin      string
	stream   string
	expected string
	// last is every shard's last sequence number: the stream is complete before any mode runs.
	last map[string]string
	// shards lists the shard ids in hash-key order.
	shards []string
	// written is when gen started: every record arrived after it.
	written time.Time
}

// newOrderingStream creates a 4-shard stream and writes the case's workload to it with gen.
func newOrderingStream(t *testing.T, bin string, c orderingCase) *orderingStream {
	t.Helper()
	s := &orderingStream{c: c, bin: bin, stream: UniqueName(t.Name())}
	s.expected = filepath.Join(t.TempDir(), "expected.json")
	CreateStream(t, s.stream, 4)
	args := []string{"gen", "--stream", s.stream, "--shards", "4", "--layout", c.layout,
		"--load-rows", strconv.Itoa(ordLoadRows), "--changes", strconv.Itoa(ordChanges),
		"--seed", strconv.Itoa(ordSeed), "--expected", s.expected}
	if c.lagShard >= 0 {
		args = append(args, "--lag-shard", strconv.Itoa(c.lagShard), "--lag", ordLag.String())
	}
	if c.reload != "" {
		args = append(args, "--reload-table", c.reload)
	}
	if c.fullBefore {
		args = append(args, "--full-before-images")
	}
	start := time.Now()
	s.written = start.Add(-time.Second) // the emulator's clock is this machine's; a second of slack
	_, stderr, err := RunCLI(t, bin, args...)
	if err != nil {
		t.Fatalf("gen %s: %v\n%s", strings.Join(args[1:], " "), err, stderr)
	}
	s.last, s.shards = ordLastSequences(t, s.stream)
	if len(s.last) != 4 {
		t.Fatalf("gen wrote to %d of 4 shards: %v", len(s.last), s.last)
	}
	if c.lagShard >= 0 && !strings.Contains(stderr, " late\n") {
		t.Fatalf("gen --lag-shard %d did not report the lagging shard:\n%s", c.lagShard, stderr)
	}
	t.Logf("gen %s: %s\n%s", strings.Join(args[1:], " "), time.Since(start).Round(time.Millisecond), ordGenSummary(stderr))
	return s
}

// ordRun is one mode's consumption of the stream: its KCL application (lease table), data
// directory (catalog, warehouse, dead letters) and configuration.
type ordRun struct {
	s       *orderingStream
	app     string
	dataDir string
	config  string
	// catalog and namespace are the run's catalog when it is not the embedded one (set with
	// the matching sink settings), for the tests that read its tables.
	catalog   *sink.CatalogConfig
	namespace string
}

// newRun writes the configuration of one mode: no per-table configuration, sinkExtra merged
// into the sink section.
func (s *orderingStream) newRun(t testing.TB, mode string, sinkExtra map[string]any) *ordRun {
	t.Helper()
	r := &ordRun{s: s, app: UniqueName("dms2iceberg-ord-" + mode), dataDir: t.TempDir()}
	t.Cleanup(func() { DeleteTable(t, r.app) })
	snk := map[string]any{"flush_interval": "1s"}
	maps.Copy(snk, sinkExtra)
	cons := map[string]any{"shard_sync": "1s", "failover": "6s", "idle_between_reads": "200ms"}
	maps.Copy(cons, s.c.consumer)
	cfg := map[string]any{
		"stream":           s.stream,
		"application":      r.app,
		"data_dir":         r.dataDir,
		"shutdown_timeout": "60s",
		"http_addr":        "",
		"consumer":         cons,
		"sink":             snk,
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.config = filepath.Join(r.dataDir, "config.yaml")
	if err := os.WriteFile(r.config, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// ordProcesses is how many service processes read a stream unless its case says otherwise.
// Two: the ordering guard orders a table's changes across all the shards one process reads,
// and across processes by the stream watermark and the per-table gates (design.md §4).
const ordProcesses = 2

// procs is how many service processes read the case's stream.
func (c orderingCase) procs() int {
	if c.processes > 0 {
		return c.processes
	}
	return ordProcesses
}

// ordBehind describes the shards of last (shard -> its last record) whose checkpoint is short of
// their last record, "" when none is. At or past it counts as consumed: heartbeat records
// (consumer.heartbeat_interval) follow the last DMS record, and a checkpoint passes them.
func ordBehind(leases map[string]ordLease, last map[string]string) string {
	behind := ""
	for _, shard := range slices.Sorted(maps.Keys(last)) {
		seq := last[shard]
		if l := leases[shard]; l.checkpoint == "" || change.CompareSeq(l.checkpoint, seq) < 0 {
			behind += fmt.Sprintf(" %s (owner %q) checkpointed at %q, last record %q;", shard, l.owner, l.checkpoint, seq)
		}
	}
	return behind
}

// consume starts ordProcesses service processes on the run's configuration (worker ids w1, w2,
// ...), waits until every shard is checkpointed at its last record, stops them gracefully and
// returns verify's result on the complete, committed stream. It fails the test unless every
// process held a shard lease at some point.
func (r *ordRun) consume(t *testing.T) (ok bool, report string) {
	t.Helper()
	if c := r.s.c; c.lateShard >= 0 {
		until := time.Now().Add(ordLateReader)
		ordHoldLease(t, r.app, r.s.shards[c.lateShard], until)
		t.Logf("a dead worker holds the lease of %s until %s: its reader starts late", r.s.shards[c.lateShard], until.Format(time.RFC3339))
	}
	start := time.Now()
	// A failing case logs only the tail of each log: today's service dead-letters thousands of
	// records here, one line each.
	var svcs []*Service
	procs := r.s.c.procs()
	for i := 1; i <= procs; i++ {
		svcs = append(svcs, startCommand(t, r.s.bin, []string{"run", "--config", r.config},
			[]string{fmt.Sprintf("DMS2ICEBERG_WORKER_ID=w%d", i)}, "", ordLogTail))
	}
	owners := map[string]map[string]bool{} // worker -> shards it held
	var behind string
	WaitFor(t, ordConsumeTimeout, time.Second, func() (bool, error) {
		for _, svc := range svcs {
			if svc.Exited() {
				return false, fmt.Errorf("service exited early:\n%s", tailFile(svc.LogPath, 8<<10))
			}
		}
		leases := ordLeases(t, r.app)
		for shard := range r.s.last {
			if l := leases[shard]; l.owner != "" {
				if owners[l.owner] == nil {
					owners[l.owner] = map[string]bool{}
				}
				owners[l.owner][shard] = true
			}
		}
		if behind = ordBehind(leases, r.s.last); behind != "" {
			return false, fmt.Errorf("not consumed:%s", behind)
		}
		return true, nil
	}, "both processes to checkpoint every shard at its last record")
	consumed := time.Since(start)
	for _, svc := range svcs {
		if err := svc.Stop(90 * time.Second); err != nil {
			t.Errorf("graceful stop of pid %d: %v", svc.Pid(), err)
		}
	}
	for i := 1; i <= procs; i++ {
		if len(owners[fmt.Sprintf("w%d", i)]) == 0 {
			t.Fatalf("the shards were not spread over the %d processes (shards held per worker: %v)", procs, owners)
		}
	}
	stdout, stderr, err := RunCLI(t, r.s.bin, "verify", "--config", r.config, "--expected", r.s.expected, "--max-diffs", "5")
	report = stdout + stderr
	if err != nil && !strings.Contains(stdout, " tables differ") {
		t.Fatalf("verify could not compare (%v):\n%s", err, report)
	}
	held := map[string][]string{}
	for w, shards := range owners {
		held[w] = ordKeys(shards)
	}
	t.Logf("MEASURED: %s consumed by %d process(es) (shards held: %v) in %s", r.s.c.name, procs,
		held, consumed.Round(time.Millisecond))
	return err == nil, report
}

// runArrival is the check: with the default ordering every table equals the expected state.
func (s *orderingStream) runArrival(t *testing.T) {
	r := s.newRun(t, "arrival", nil)
	ok, report := r.consume(t)
	if !ok {
		t.Fatalf("%s with the default ordering: the tables differ from the expected state after every shard was consumed and committed:\n%s\n%s",
			s.c.name, report, summarizeDiffs(report))
	}
	t.Logf("verify:\n%s", report)
	// A consistent cut at the stream's start names a snapshot of every table (each table's
	// first commit is complete through a bound past its first record).
	out, stderr, err := RunCLI(t, s.bin, "cut", "--config", r.config, "--at", s.written.UTC().Format(time.RFC3339Nano), "--json")
	if err != nil {
		t.Fatalf("cut: %v\n%s%s", err, out, stderr)
	}
	var cut struct {
		Tables []struct {
			Table    string `json:"table"`
			Snapshot string `json:"snapshot_id"`
			Complete bool   `json:"complete"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &cut); err != nil {
		t.Fatalf("cut --json: %v\n%s", err, out)
	}
	if len(cut.Tables) != 4 {
		t.Fatalf("cut lists %d tables, want the 4 of the workload:\n%s", len(cut.Tables), out)
	}
	for _, tb := range cut.Tables {
		if !tb.Complete || tb.Snapshot == "" {
			t.Fatalf("cut: table %s has no snapshot complete through the stream's start:\n%s", tb.Table, out)
		}
	}
}

// runShard is the negative control: with shard ordering verify must report differences.
func (s *orderingStream) runShard(t *testing.T) {
	extra := map[string]any{}
	if orderingKeySupported(t, s.bin) {
		extra["ordering"] = "shard"
		t.Logf("the service accepts sink.ordering: writing sink.ordering: shard")
	} else {
		t.Logf("the service does not know sink.ordering: its only behaviour is shard ordering, so the key is left out")
	}
	r := s.newRun(t, "shard", extra)
	ok, report := r.consume(t)
	if ok {
		t.Fatalf("%s with sink.ordering shard: verify found every table equal, so the arrival check on this stream proves nothing:\n%s", s.c.name, report)
	}
	t.Logf("NEGATIVE CONTROL %s (shard ordering): %s\nverify:\n%s", s.c.name, summarizeDiffs(report), report)
}

var orderingProbe struct {
	done      bool
	supported bool
}

// orderingKeySupported reports whether the shard mode writes sink.ordering: shard: per
// DMS2ICEBERG_IT_ORDERING_KEY, or (auto) whether bin's configuration parser accepts the key,
// probed once with verify (which parses the configuration strictly before it reads anything).
func orderingKeySupported(t *testing.T, bin string) bool {
	t.Helper()
	switch v := os.Getenv(EnvOrderingKey); v {
	case "1":
		return true
	case "0":
		return false
	case "", "auto":
	default:
		t.Fatalf("%s=%q: want auto, 1 or 0", EnvOrderingKey, v)
	}
	if orderingProbe.done {
		return orderingProbe.supported
	}
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.yaml")
	if err := os.WriteFile(probe, []byte("stream: probe\ndata_dir: "+dir+"\nsink:\n  ordering: shard\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, _ := RunCLI(t, bin, "verify", "--config", probe, "--expected", filepath.Join(dir, "none.json"))
	out := stdout + stderr
	switch {
	case strings.Contains(out, "field ordering not found"):
		orderingProbe.supported = false
	case strings.Contains(out, "read expected state"):
		orderingProbe.supported = true
	default:
		t.Fatalf("probing sink.ordering with verify: unexpected output:\n%s", out)
	}
	orderingProbe.done = true
	return orderingProbe.supported
}

// ordTableLine is verify's per-table summary line.
var ordTableLine = regexp.MustCompile(`(?m)^table (\S+): rows=(\d+) expected=(\d+) (?:ok|DIFF \((.*)\))$`)

// summarizeDiffs condenses verify's report to one line per differing table.
func summarizeDiffs(report string) string {
	var out []string
	for _, m := range ordTableLine.FindAllStringSubmatch(report, -1) {
		if m[4] == "" {
			continue
		}
		out = append(out, fmt.Sprintf("%s rows=%s expected=%s: %s", m[1], m[2], m[3], m[4]))
	}
	if len(out) == 0 {
		return "no table differs"
	}
	return strings.Join(out, "; ")
}

// ordLease is one lease row.
type ordLease struct{ owner, checkpoint string }

// ordLeases returns the lease table's rows by shard (a copy of the pipeline helpers, without a
// pipeline).
func ordLeases(t testing.TB, app string) map[string]ordLease {
	t.Helper()
	out, err := DynamoDB(t).Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(app), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil // the table appears when the first process starts
	}
	leases := map[string]ordLease{}
	str := func(item map[string]ddbtypes.AttributeValue, k string) string {
		if v, ok := item[k].(*ddbtypes.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	for _, item := range out.Items {
		if id := str(item, "ShardID"); id != "" {
			leases[id] = ordLease{owner: str(item, "AssignedTo"), checkpoint: str(item, "Checkpoint")}
		}
	}
	return leases
}

// ordHoldLease creates the KCL application's lease table (as the service does) and makes a dead
// worker hold shard's lease until until, as after a crash: nobody reads the shard before then.
func ordHoldLease(t *testing.T, app, shard string, until time.Time) {
	t.Helper()
	dc := DynamoDB(t)
	_, err := dc.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(app),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("ShardID"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("ShardID"), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create lease table %s: %v", app, err)
	}
	if err := dynamodb.NewTableExistsWaiter(dc).Wait(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(app)}, time.Minute); err != nil {
		t.Fatalf("lease table %s: %v", app, err)
	}
	_, err = dc.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(app), Item: map[string]ddbtypes.AttributeValue{
		"ShardID":      &ddbtypes.AttributeValueMemberS{Value: shard},
		"AssignedTo":   &ddbtypes.AttributeValueMemberS{Value: "dead-worker"},
		"LeaseTimeout": &ddbtypes.AttributeValueMemberS{Value: until.UTC().Format(time.RFC3339Nano)},
		"LeaseEpoch":   &ddbtypes.AttributeValueMemberN{Value: "1"},
	}})
	if err != nil {
		t.Fatalf("hold the lease of %s: %v", shard, err)
	}
}

// ordLastSequences returns the last record's sequence number of every shard that has records,
// and the shard ids in hash-key order.
func ordLastSequences(t testing.TB, stream string) (map[string]string, []string) {
	t.Helper()
	kc := Kinesis(t)
	ctx := t.Context()
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("list shards of %s: %v", stream, err)
	}
	start := func(sh kintypes.Shard) *big.Int {
		n, ok := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		if !ok {
			t.Fatalf("shard %s: starting hash key %q", aws.ToString(sh.ShardId), aws.ToString(sh.HashKeyRange.StartingHashKey))
		}
		return n
	}
	slices.SortFunc(shards.Shards, func(a, b kintypes.Shard) int { return start(a).Cmp(start(b)) })
	last := map[string]string{}
	var ids []string
	for _, sh := range shards.Shards {
		ids = append(ids, aws.ToString(sh.ShardId))
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
			ShardId: sh.ShardId, ShardIteratorType: "TRIM_HORIZON"})
		if err != nil {
			t.Fatalf("shard iterator of %s: %v", aws.ToString(sh.ShardId), err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
			if err != nil {
				t.Fatalf("read %s: %v", aws.ToString(sh.ShardId), err)
			}
			if n := len(out.Records); n > 0 {
				last[aws.ToString(sh.ShardId)] = aws.ToString(out.Records[n-1].SequenceNumber)
			} else if aws.ToInt64(out.MillisBehindLatest) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	return last, ids
}

// ordKeys returns the set's elements, sorted.
func ordKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// ordGenSummary returns gen's line about the lagging shard, if any, and its last lines.
func ordGenSummary(stderr string) string {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "gen: records of shard") {
			out = append(out, l)
		}
	}
	return strings.Join(append(out, lines[max(0, len(lines)-4):]...), "\n")
}
