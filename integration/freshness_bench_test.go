//go:build integration

package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// BenchmarkFreshness measures freshness through the emulator stack:
// the time from a record's PutRecords call to the snapshot that makes its change visible, for
// every record of a steady DMS-default workload (load by primary key, CDC by schema.table,
// control records on the task's key, no per-table configuration) on a 4-shard stream read by 1
// or 3 service processes, with the ordering guard on (sink.ordering: arrival, the default) and
// off (shard), 1 s flush interval. It reports the arrival margin each service used at the end
// (measured from the stream, consumer/margin.go) and the late records it logged.
//
//	make bench-freshness   (BENCH_RATE records/s, default 200; BENCH_CHANGES, default 12000;
//	                        BENCH_ARRIVAL_MARGIN, consumer.arrival_margin, default the service's;
//	                        BENCH_ARRIVAL_MARGIN_FLOOR, consumer.arrival_margin_floor;
//	                        BENCH_HEARTBEAT, consumer.heartbeat_interval, default off;
//	                        BENCH_HORIZON_INTERVAL, consumer.horizon_interval, default 1s;
//	                        BENCH_FRESHNESS_OUT, a per-record file and the service logs per run;
//	                        BENCH_MAINTENANCE=0 turns table maintenance off)
//
// How it measures: gen --sent-log records each accepted record's shard, sequence number, send
// time (taken just before its PutRecords request, so at or before its arrival) and answer time
// (just after the answer: at or after its arrival; "p99 from the PutRecords answer" leaves out
// the put's round trip, which the emulator stretches on a loaded machine). Every commit
// writes the highest sequence number per shard it covers into its snapshot summary; a record is
// visible from the first snapshot of its table whose summary covers its sequence number on its
// shard. The snapshot's timestamp is taken when the writer builds it, just before the catalog
// commit, so the catalog's commit latency (a few ms on SQLite) is not included. Every run ends
// with verify: a run whose tables differ from the expected state fails the benchmark (shard mode
// is only timed: it may differ, that is what the guard prevents).
func BenchmarkFreshness(b *testing.B) {
	RequireEmulators(b)
	bin := BuildBinary(b)
	rate := envInt(b, "BENCH_RATE", 200)
	changes := envInt(b, "BENCH_CHANGES", 12000)
	extra := map[string]any{}
	for env, key := range map[string]string{"BENCH_ARRIVAL_MARGIN": "arrival_margin", "BENCH_ARRIVAL_MARGIN_FLOOR": "arrival_margin_floor", "BENCH_HEARTBEAT": "heartbeat_interval", "BENCH_HORIZON_INTERVAL": "horizon_interval"} {
		v := os.Getenv(env) // "": the service's default
		if _, err := time.ParseDuration(v); v != "" && err != nil {
			b.Fatalf("%s=%q: %v", env, v, err)
		}
		if v != "" {
			extra[key] = v
		}
	}
	for _, mode := range []string{"arrival", "shard"} {
		for _, procs := range []int{1, 3} {
			b.Run(fmt.Sprintf("ordering=%s/workers=%d", mode, procs), func(b *testing.B) {
				for range b.N {
					freshnessRun(b, bin, mode, procs, rate, changes, extra)
				}
			})
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// freshnessRun is one measured run on its own stream, lease table and catalog.
// extra are consumer settings (arrival_margin, heartbeat_interval) that differ from the defaults.
func freshnessRun(b *testing.B, bin, mode string, procs, rate, changes int, extra map[string]any) {
	b.Helper()
	c := orderingCase{name: "freshness", layout: "dms-default", lagShard: -1, lateShard: -1, processes: procs, consumer: extra}
	s := &orderingStream{c: c, bin: bin, stream: UniqueName("fresh-" + mode)}
	setting := func(key string) string {
		if v, ok := extra[key]; ok {
			return fmt.Sprint(v)
		}
		return "default"
	}
	s.expected = filepath.Join(b.TempDir(), "expected.json")
	CreateStream(b, s.stream, 4)
	sinkSettings := map[string]any{"ordering": mode}
	if os.Getenv("BENCH_MAINTENANCE") == "0" {
		sinkSettings["maintenance"] = map[string]any{"enabled": false}
	}
	r := s.newRun(b, mode, sinkSettings)
	var svcs []*Service
	for i := 1; i <= procs; i++ {
		svcs = append(svcs, startCommand(b, bin, []string{"run", "--config", r.config},
			[]string{fmt.Sprintf("DMS2ICEBERG_WORKER_ID=w%d", i)}, "", ordLogTail))
	}
	// Measure the steady state: every shard leased (by every process, when there are several) first.
	WaitFor(b, 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		owners := map[string]bool{}
		held := 0
		for _, l := range ordLeases(b, r.app) {
			if l.owner != "" {
				owners[l.owner] = true
				held++
			}
		}
		return held == 4 && len(owners) >= procs, nil
	}, "every shard leased")
	sent := filepath.Join(b.TempDir(), "sent.tsv")
	args := []string{"gen", "--stream", s.stream, "--shards", "4", "--layout", "dms-default", "--load-rows", "100",
		"--changes", strconv.Itoa(changes), "--seed", "7", "--rate", strconv.Itoa(rate), "--expected", s.expected, "--sent-log", sent}
	b.ResetTimer()
	start := time.Now()
	_, stderr, err := RunCLI(b, bin, args...)
	if err != nil {
		b.Fatalf("gen: %v\n%s", err, stderr)
	}
	genTime := time.Since(start)
	// The last record of each shard, from gen's log rather than by reading the stream: reading
	// 12,000 records back from the emulator just as the last ones are being read by the services
	// stalled them for seconds and was the tail of every run's freshness.
	s.last, err = lastSent(sent)
	if err != nil {
		b.Fatal(err)
	}
	WaitFor(b, 5*time.Minute, time.Second, func() (bool, error) {
		for _, svc := range svcs {
			if svc.Exited() {
				return false, fmt.Errorf("service exited early:\n%s", tailFile(svc.LogPath, 8<<10))
			}
		}
		return ordBehind(ordLeases(b, r.app), s.last) == "", nil
	}, "every shard checkpointed at (or past) its last record")
	b.StopTimer()
	for _, svc := range svcs {
		if err := svc.Stop(90 * time.Second); err != nil {
			b.Errorf("graceful stop of pid %d: %v", svc.Pid(), err)
		}
	}
	stdout, stderr, verr := RunCLI(b, bin, "verify", "--config", r.config, "--expected", s.expected, "--max-diffs", "3")
	if verr != nil && mode == "arrival" {
		b.Fatalf("verify: %v\n%s%s", verr, stdout, stderr)
	}
	out := os.Getenv("BENCH_FRESHNESS_OUT") // a file for every record's freshness, and the service logs beside it
	if out != "" {
		out = fmt.Sprintf("%s.%s-%d", out, mode, procs) // one per run
	}
	res, err := freshness(b.Context(), r.dataDir, s.stream, sent, out)
	if err != nil {
		b.Fatal(err)
	}
	lat, steady, uncovered := res.lat, res.steady, res.uncovered
	margins, late := marginsUsed(svcs)
	for i, svc := range svcs {
		if out != "" {
			if data, err := os.ReadFile(svc.LogPath); err == nil {
				_ = os.WriteFile(fmt.Sprintf("%s.service-%d.log", out, i+1), data, 0o644)
			}
		}
	}
	p := func(q float64) time.Duration { return pct(lat, q) }
	ansP99 := pct(res.fromAnswer, 0.99)
	b.ReportMetric(float64(p(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(p(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(ansP99.Milliseconds()), "p99-from-answer-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	steadyP99 := pct(steady, 0.99) // 0 without records after the warm-up
	equal := "equal"
	if verr != nil {
		equal = "DIFFERS"
	}
	b.Logf("MEASURED: ordering=%s workers=%d arrival_margin=%s arrival_margin_floor=%s heartbeat_interval=%s horizon_interval=%s: %d records at %.0f records/s: freshness p50 %s, p90 %s, p99 %s, max %s (%d records took no row); p99 after the first %s %s; p99 from the PutRecords answer %s; margin in use at the end %s, late-record log lines %d; verify: %s",
		mode, procs, setting("arrival_margin"), setting("arrival_margin_floor"), setting("heartbeat_interval"), setting("horizon_interval"), len(lat)+uncovered, float64(len(lat)+uncovered)/genTime.Seconds(), p(0.50).Round(time.Millisecond),
		p(0.90).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), uncovered, freshnessWarmup, steadyP99.Round(time.Millisecond), ansP99.Round(time.Millisecond), margins, late, equal)
}

// marginsUsed reads the services' logs: the last arrival margin each logged (consumer/margin.go,
// "arrival margin" lines; "?" when none), joined by "/", and how many late-record lines they
// logged in all.
func marginsUsed(svcs []*Service) (margins string, late int) {
	var out []string
	for _, svc := range svcs {
		last := "?"
		data, _ := os.ReadFile(svc.LogPath)
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "late records: arrived") {
				late++
			}
			if !strings.Contains(line, "arrival margin") {
				continue
			}
			// Console lines carry "margin": "250ms", JSON lines "margin":0.25 (seconds).
			if _, v, ok := strings.Cut(line, `"margin":`); ok {
				v, _, _ = strings.Cut(strings.TrimSpace(v), ",")
				v = strings.TrimRight(v, "}\n")
				if d, err := time.ParseDuration(strings.Trim(v, `"`)); err == nil {
					last = d.String()
				} else if sec, err := strconv.ParseFloat(v, 64); err == nil {
					last = time.Duration(sec * float64(time.Second)).Round(time.Millisecond).String()
				}
			}
		}
		out = append(out, last)
	}
	return strings.Join(out, "/"), late
}

// lastSent returns the sequence number of the last record gen sent to each shard (its sent log:
// table, shard, sequence number, send time, answer time).
func lastSent(sentLog string) (map[string]string, error) {
	data, err := os.ReadFile(sentLog)
	if err != nil {
		return nil, err
	}
	last := map[string]string{}
	for line := range strings.Lines(string(data)) {
		fields := strings.Split(strings.TrimSpace(line), "\t")
		if len(fields) != 5 {
			return nil, fmt.Errorf("sent log line %q", line)
		}
		if cur, ok := last[fields[1]]; !ok || change.CompareSeq(fields[2], cur) > 0 {
			last[fields[1]] = fields[2]
		}
	}
	return last, nil
}

// visibleAt is one table's commits on one shard: the watermark each snapshot covers and when it
// was built, in commit order.
type visibleAt struct {
	seq []*big.Int
	at  []time.Time
}

// freshnessWarmup is how long after the first record the steady state starts: a service starts
// with the arrival margin at its cap until its reads have measured it (consumer/margin.go), a few
// seconds of a run that every restart has once and a long-running service never again.
const freshnessWarmup = 10 * time.Second

// freshnessRes is what freshness measures: every covered record's time from its send to the
// first snapshot of its table that covers it (lat, sorted), the same for the records sent
// freshnessWarmup after the first (steady), from the PutRecords answer instead of the send
// (fromAnswer, sorted: the record arrived between the two), and how many records no snapshot
// covers (uncovered: records that took no row, dead letters, control records of a table without
// a later commit on their shard).
type freshnessRes struct {
	lat, steady, fromAnswer []time.Duration
	uncovered               int
}

// freshness measures the records of gen's sent log against the snapshots of the run's tables.
// With out set it also writes one line per covered record: send time (unix ms), table, shard,
// freshness (ms).
func freshness(ctx context.Context, dataDir, stream, sentLog, out string) (res freshnessRes, err error) {
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(dataDir))
	if err != nil {
		return res, err
	}
	if cl, ok := cat.(interface{ Close() error }); ok {
		defer func() { _ = cl.Close() }()
	}
	vis := map[string]map[string]*visibleAt{} // table -> shard
	load := func(src string) (map[string]*visibleAt, error) {
		if v, ok := vis[src]; ok {
			return v, nil
		}
		v, err := tableVisibility(ctx, cat, stream, src)
		vis[src] = v
		return v, err
	}
	f, err := os.Open(sentLog)
	if err != nil {
		return res, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	var lines []byte
	var sentAt []int64 // beside lat: each record's send time (unix µs)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 5 {
			return res, fmt.Errorf("sent log line %q", sc.Text())
		}
		sentUs, err1 := strconv.ParseInt(fields[3], 10, 64)
		answerUs, err2 := strconv.ParseInt(fields[4], 10, 64)
		seq, ok := new(big.Int).SetString(fields[2], 10)
		if err1 != nil || err2 != nil || !ok {
			return res, fmt.Errorf("sent log line %q", sc.Text())
		}
		byShard, err := load(fields[0])
		if err != nil {
			return res, err
		}
		va := byShard[fields[1]]
		if va == nil {
			// A record of a table that took no row (a create-table alone, a dead letter) has
			// no commit of its own on that shard: it is not a change readers wait for.
			continue
		}
		i, _ := slices.BinarySearchFunc(va.seq, seq, func(a, b *big.Int) int { return a.Cmp(b) })
		if i == len(va.seq) {
			// Past the table's last commit on the shard: a record that took no row (dead
			// lettered, as ordering=shard does with data read before its create-table).
			res.uncovered++
			continue
		}
		res.lat = append(res.lat, va.at[i].Sub(time.UnixMicro(sentUs)))
		res.fromAnswer = append(res.fromAnswer, va.at[i].Sub(time.UnixMicro(answerUs)))
		sentAt = append(sentAt, sentUs)
		if out != "" {
			lines = fmt.Appendf(lines, "%d\t%s\t%s\t%d\n", sentUs/1000, fields[0], fields[1], res.lat[len(res.lat)-1].Milliseconds())
		}
	}
	if out != "" {
		if err := os.WriteFile(out, lines, 0o644); err != nil {
			return res, err
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	if len(res.lat) == 0 {
		return res, errors.New("no record was covered by a snapshot")
	}
	res.steady = afterWarmup(res.lat, sentAt)
	slices.Sort(res.lat)
	slices.Sort(res.fromAnswer)
	return res, nil
}

// afterWarmup returns, sorted, the freshness of the records sent freshnessWarmup or more after
// the first (lat and sentAt, unix µs, are parallel).
func afterWarmup(lat []time.Duration, sentAt []int64) []time.Duration {
	var steady []time.Duration
	first := slices.Min(sentAt)
	for i, us := range sentAt {
		if time.Duration(us-first)*time.Microsecond >= freshnessWarmup {
			steady = append(steady, lat[i])
		}
	}
	slices.Sort(steady)
	return steady
}

// tableVisibility reads a source table's snapshots (nil when the table does not exist): per shard,
// the watermark each snapshot covers and when it was built, in commit order.
func tableVisibility(ctx context.Context, cat catalog.Catalog, stream, src string) (map[string]*visibleAt, error) {
	schema, name, _ := strings.Cut(src, ".")
	tbl, err := cat.LoadTable(ctx, table.Identifier{schema, name})
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", src, err)
	}
	snaps := slices.Clone(tbl.Metadata().Snapshots())
	slices.SortFunc(snaps, func(a, b table.Snapshot) int { return int(a.SequenceNumber - b.SequenceNumber) })
	out := map[string]*visibleAt{}
	prefix := tableprop.Watermark(stream, "")
	for _, sn := range snaps {
		if sn.Summary == nil {
			continue
		}
		for k, v := range sn.Summary.Properties {
			shard, ok := strings.CutPrefix(k, prefix)
			if !ok {
				continue
			}
			n, ok := new(big.Int).SetString(v, 10)
			if !ok {
				return nil, fmt.Errorf("%s snapshot %d: %s=%q", src, sn.SnapshotID, k, v)
			}
			va := out[shard]
			if va == nil {
				va = &visibleAt{}
				out[shard] = va
			}
			va.seq = append(va.seq, n)
			va.at = append(va.at, time.UnixMilli(sn.TimestampMs))
		}
	}
	return out, nil
}
