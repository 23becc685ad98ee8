package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// BenchmarkMaintenanceCDC drives the sink in process (SQLite catalog, local warehouse in a temp
// dir) with background maintenance on: it loads BENCH_ROWS rows into a keyed table, then makes
// BENCH_COMMITS CDC commits of BENCH_KEYS changes each (70% updates, 15% deletes, 15% inserts of
// new keys), one every BENCH_FLUSH_INTERVAL, and reports:
//   - full-scan time against a freshly compacted copy of the same rows, every BENCH_SCAN_EVERY
//     commits (and the scan's row count and checksum against a model of the table);
//   - process CPU time per commit (getrusage around Flush), first 100 vs last 100 commits;
//   - the metadata file's size and the snapshot count over the run;
//   - the longest gap between two ingestion commits and the longest commit while maintenance
//     was running;
//   - maintenance CPU per 1,000 changes: the CDC phase's process CPU minus the scans and minus
//     the commits at the median CPU of a commit without maintenance running.
//
// The load is flushed in parts of BENCH_LOAD_CHUNK rows (as a full load spread over shards
// arrives); with more than one part, one maintenance run merges them before the CDC phase (timed
// and printed, not counted), so the table starts as it would after its first compaction.
// BENCH_SCAN_REPEAT is how many times each scan runs, interleaved with the copy's (the best of
// each is reported). BENCH_PYICEBERG_PYTHON names a python with pyiceberg (`.ci/spark.sh env`
// prints DMS2ICEBERG_IT_PYICEBERG_PYTHON): at every scan point PyIceberg's scan is timed against a
// compacted copy too, once the maintainer has converted the outstanding equality deletes.
//
// It runs only with DMS2ICEBERG_BENCH_MAINTENANCE=1 (make bench-maintenance), once, whatever
// -benchtime says. BENCH_MAX_DELETE_FILES, BENCH_KEEP_LAST and BENCH_RETENTION tune maintenance;
// BENCH_MAINTENANCE_OFF=1 runs the same traffic without it, for comparison. BENCH_DELETE_MODE
// (equality, position, dv) is the table's delete_mode, BENCH_POSITION_DELAY maintenance.position_delay,
// BENCH_REWRITE_DELETED_FRACTION maintenance.rewrite_deleted_fraction;
// in position and dv mode it also reports the time from a commit to the conversion of its equality
// deletes.
// BENCH_KEY is the table's key: int (default: one long column), uuid (a text column of UUIDs in
// canonical form) or composite (an int and a text column); the report gives the key index's
// memory (the key cache's bytes held per row of the table).
// BENCH_OUT names a file that receives the report too.
func BenchmarkMaintenanceCDC(b *testing.B) {
	if os.Getenv("DMS2ICEBERG_BENCH_MAINTENANCE") != "1" {
		b.Skip("set DMS2ICEBERG_BENCH_MAINTENANCE=1 (make bench-maintenance) to run this benchmark")
	}
	p := benchParams{
		rows:            envInt("BENCH_ROWS", 1_000_000),
		commits:         envInt("BENCH_COMMITS", 1000),
		keys:            envInt("BENCH_KEYS", 1000),
		interval:        envDuration("BENCH_FLUSH_INTERVAL", 500*time.Millisecond),
		scanEvery:       envInt("BENCH_SCAN_EVERY", 50),
		maxDel:          envInt("BENCH_MAX_DELETE_FILES", maintenance.DefaultConfig().MaxDeleteFiles),
		keepLast:        envInt("BENCH_KEEP_LAST", 20),
		retention:       envDuration("BENCH_RETENTION", 30*time.Second),
		mode:            os.Getenv("BENCH_DELETE_MODE"),
		posDelay:        envDuration("BENCH_POSITION_DELAY", maintenance.DefaultConfig().PositionDelay),
		rewriteFraction: envFloat("BENCH_REWRITE_DELETED_FRACTION", maintenance.DefaultConfig().RewriteDeletedFraction),
		loadChunk:       envInt("BENCH_LOAD_CHUNK", 1_000_000),
		scanReps:        envInt("BENCH_SCAN_REPEAT", 8),
		pyiceberg:       os.Getenv("BENCH_PYICEBERG_PYTHON"),
		key:             os.Getenv("BENCH_KEY"),
		branch:          maintenance.DefaultConfig().PositionalBranch,
	}
	if os.Getenv("BENCH_POSITIONAL_BRANCH") == "off" {
		p.branch = ""
	}
	out := io.Writer(os.Stdout)
	if path := os.Getenv("BENCH_OUT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	r := runMaintenanceBench(b, p, out)
	b.ReportMetric(r.maxScanRatio, "max-scan-ratio")
	if r.maxBranchRatio > 0 {
		b.ReportMetric(r.maxBranchRatio, "max-branch-scan-ratio")
	}
	b.ReportMetric(r.cpuRatio, "commit-cpu-ratio")
	b.ReportMetric(float64(r.maxMetaBytes), "max-metadata-bytes")
	b.ReportMetric(r.maxGap.Seconds(), "max-commit-gap-s")
	b.ReportMetric(r.maintCPUPer1k.Seconds()*1000, "maint-cpu-ms/1k-changes")
}

type benchParams struct {
	rows, commits, keys, scanEvery, maxDel, keepLast int
	loadChunk, scanReps                              int
	pyiceberg                                        string // python with pyiceberg: time its scans too
	branch                                           string // sink.maintenance.positional_branch
	interval, retention, posDelay                    time.Duration
	mode                                             string
	key                                              string // BENCH_KEY: int (default), uuid or composite
	rewriteFraction                                  float64
}

type benchResult struct {
	maxScanRatio, cpuRatio float64
	maxBranchRatio         float64
	maxMetaBytes           int64
	maxGap                 time.Duration
	maintCPUPer1k          time.Duration
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchModel is the expected table: qty per id, live or not.
type benchModel struct {
	qty  []int32
	live []bool
	n    int
	sum  int64
}

func (m *benchModel) set(id int, q int32) {
	for id >= len(m.qty) {
		m.qty = append(m.qty, 0)
		m.live = append(m.live, false)
	}
	if m.live[id] {
		m.sum -= int64(m.qty[id])
	} else {
		m.n++
	}
	m.qty[id], m.live[id] = q, true
	m.sum += int64(q)
}

func (m *benchModel) del(id int) {
	if id < len(m.live) && m.live[id] {
		m.live[id] = false
		m.n--
		m.sum -= int64(m.qty[id])
	}
}

type commitSample struct {
	at      time.Time
	wall    time.Duration
	cpu     time.Duration
	overlap bool // maintenance ran during the commit
	vectors bool // the commit wrote deletion vectors (writer_vectors): no equality delete to convert
}

func runMaintenanceBench(b *testing.B, p benchParams, out io.Writer) benchResult {
	ctx := context.Background()
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(dir)
	cfg.Stream = "st"
	cfg.FlushInterval = time.Hour // the benchmark flushes on its own clock
	cfg.FlushRows = 1 << 30
	cfg.FlushBytes = 1 << 40
	tc, keyCols := benchTable(b, p)
	cfg.Tables = map[string]TableConfig{"shop.bench": tc}
	mc := &cfg.Maintenance
	mc.Enabled = os.Getenv("BENCH_MAINTENANCE_OFF") != "1"
	mc.Owner = "bench"
	mc.MaxDeleteFiles = p.maxDel
	mc.MinInterval = 0
	mc.CheckInterval = time.Second
	mc.KeepLast = p.keepLast
	mc.SnapshotRetention = p.retention
	mc.ExpireBatch = p.keepLast
	mc.PositionDelay = p.posDelay
	mc.RewriteDeletedFraction = p.rewriteFraction
	mc.PositionalBranch = p.branch
	switch os.Getenv("BENCH_WRITER_VECTORS") {
	case "on":
		mc.WriterVectors = true
	case "off":
		mc.WriterVectors = false
	}
	withBranch := p.branch != "" && maintenance.Converting(p.mode)
	if v := os.Getenv("BENCH_KEY_CACHE_BYTES"); v != "" { // 0: off, as before 2026-12-06
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("BENCH_KEY_CACHE_BYTES: %v", err)
		}
		mc.KeyCacheBytes = n
	}
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		b.Fatal(err)
	}
	zc := zap.NewDevelopmentConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	zc.DisableStacktrace = true
	log, _ := zc.Build()
	rec := &maintRecorder{}
	s, err := New(cfg, cat, &memDLQ{}, WithLogger(log), WithMetrics(rec), WithMaintenanceMetrics(rec))
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Errorf("sink Run: %v", err)
		}
	}()

	ident := table.Identifier{"shop", "bench"}
	ack := &counter{}
	seq := 0
	model := &benchModel{}
	rng := rand.New(rand.NewPCG(1, 2))
	submit := func(op change.Op, id int, q int32) {
		seq++
		cols := keyCols(id)
		if op != change.OpDelete {
			cols = append(cols, col("name", "'customer-"+strconv.Itoa(id)+"'"), col("qty", strconv.Itoa(int(q))),
				col("amount", strconv.Itoa(int(q))+"."+strconv.Itoa(id%100/10)+strconv.Itoa(id%10)))
			model.set(id, q)
		} else {
			model.del(id)
		}
		ev := &change.Event{Schema: "shop", Table: "bench", Op: op, Columns: cols,
			Pos: change.Position{Stream: "st", Shard: "s0", Seq: strconv.Itoa(seq)}, Raw: []byte("{}"), Ack: ack}
		if err := s.Submit(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Fprintf(out, "## maintenance benchmark (maintenance on: %v, delete_mode %q, key %q, position_delay %s, rewrite_deleted_fraction %g)\n\nrows %d, commits %d × %d keys, flush interval %s, max_delete_files %d, keep_last %d, snapshot_retention %s, GOMAXPROCS %d\n\n",
		mc.Enabled, p.mode, p.key, p.posDelay, p.rewriteFraction, p.rows, p.commits, p.keys, p.interval, p.maxDel, p.keepLast, p.retention, runtime.GOMAXPROCS(0))
	load0 := loadavg()
	start := time.Now()
	for id := 1; id <= p.rows; id++ {
		submit(change.OpLoad, id, int32(id%1000))
		if id%p.loadChunk == 0 || id == p.rows { // a full load flushes in parts
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	fmt.Fprintf(out, "load: %d rows in %s, flushed every %d rows\n\n", p.rows, time.Since(start).Round(time.Millisecond), p.loadChunk)
	if p.rows > p.loadChunk && mc.Enabled {
		// A table that has been live for a while has had its load's parts merged long ago: merge
		// them before the CDC phase, so that this one-off rewrite is not counted as the cost of
		// the changes.
		lc := *mc
		lc.DeleteMode = p.mode
		c0, t0 := cpuNow(), time.Now()
		rep, err := maintenance.RunTable(ctx, cat, ident, lc, maintenance.RunOptions{IgnoreLease: true, SkipOrphans: true})
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(out, "load's parts merged: %d data files into %d in %s (%s CPU)\n\n", rep.DataFilesRewritten, rep.DataFilesWritten,
			time.Since(t0).Round(time.Millisecond), (cpuNow() - c0).Round(time.Millisecond))
	}
	s.mu.Lock()
	m, _ := s.writers["shop.bench"].cm.maint.(*maintenance.Maintainer)
	s.mu.Unlock()
	if m != nil {
		m.SetHandoffWait(2 * p.interval) // the sink's flush interval is the benchmark's clock here
	} else {
		m = &maintenance.Maintainer{} // maintenance off: never busy
	}

	fmt.Fprintf(out, "| commit | scan | compacted copy | ratio | rows ok | data files | delete files | snapshots | metadata.json | compactions |\n|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|\n")
	var samples []commitSample
	var res benchResult
	var maxGapMaint, maxGapIdle time.Duration
	var ratios []float64
	var maxCommitMaint time.Duration
	maxID := p.rows
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	var last time.Time
	// Maintenance CPU: the process's CPU over the CDC phase (scan measurements excluded) minus
	// the ingestion cycles' (submit, flush, reading the metadata size), each of those counted at
	// the median of the cycles during which no maintenance ran. Maintenance runs on other
	// goroutines, and its commits on the writer's, so a cycle that overlaps it cannot be split.
	var cdcCPU, scanCPU time.Duration
	var pyRows, branchRows []string
	var branchRatios []float64
	var branchLags []time.Duration // per commit: how far behind main the positional branch shows
	var cycles []time.Duration
	// Commits that wrote deletion vectors (writer_vectors), and after which main's newest
	// snapshot held equality deletes.
	var vectorCommits, eqAfter int
	cdc0 := cpuNow()
	for i := 1; i <= p.commits; i++ {
		<-tick.C
		cy0 := cpuNow()
		runs0, busy0 := m.Runs(), m.Busy()
		for k := 0; k < p.keys; k++ {
			x := rng.IntN(100)
			switch {
			case x < 70:
				submit(change.OpUpdate, 1+rng.IntN(maxID), int32(rng.IntN(1000)))
			case x < 85:
				submit(change.OpDelete, 1+rng.IntN(maxID), 0)
			default:
				maxID++
				submit(change.OpInsert, maxID, int32(rng.IntN(1000)))
			}
		}
		c0, w0 := cpuNow(), time.Now()
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		sm := commitSample{at: now, wall: now.Sub(w0), cpu: cpuNow() - c0,
			overlap: busy0 || m.Busy() || m.Runs() != runs0}
		samples = append(samples, sm)
		if !last.IsZero() {
			gap := now.Sub(last)
			res.maxGap = max(res.maxGap, gap)
			if sm.overlap {
				maxGapMaint = max(maxGapMaint, gap)
			} else {
				maxGapIdle = max(maxGapIdle, gap)
			}
		}
		if sm.overlap {
			maxCommitMaint = max(maxCommitMaint, sm.wall)
		}
		last = now
		tbl, err := cat.LoadTable(ctx, ident)
		if err != nil {
			b.Fatal(err)
		}
		if fi, err := os.Stat(strings.TrimPrefix(tbl.MetadataLocation(), "file://")); err == nil {
			res.maxMetaBytes = max(res.maxMetaBytes, fi.Size())
		}
		if !busy0 && !m.Busy() && m.Runs() == runs0 {
			cycles = append(cycles, cpuNow()-cy0)
		}
		if withBranch {
			branchLags = append(branchLags, branchLag(tbl, p.branch, now))
		}
		if snap := tbl.CurrentSnapshot(); snap != nil && snap.Summary != nil {
			if _, ok := snap.Summary.Properties[tableprop.SummaryVectors]; ok {
				vectorCommits++
				samples[len(samples)-1].vectors = true
			}
			if n := snap.Summary.Properties["total-equality-deletes"]; n != "" && n != "0" {
				eqAfter++
			}
		}
		if i%p.scanEvery == 0 || i == p.commits {
			sc0 := cpuNow()
			// The table as of this commit, timed once our own compaction (if one is running) is
			// done, so that it does not compete with the scans for the CPU.
			for wait := time.Now(); m.Busy() && time.Since(wait) < time.Minute; {
				time.Sleep(10 * time.Millisecond)
			}
			ratio := benchScanRow(b, ctx, cat, tbl, model, i, rec.compactions(), p.scanReps, out)
			if withBranch {
				row, r := benchBranchScan(b, ctx, cat, tbl, now, p.branch, i, p.scanReps)
				branchRows = append(branchRows, row)
				if r > 0 {
					branchRatios = append(branchRatios, r)
				}
			}
			scanCPU += cpuNow() - sc0
			if p.pyiceberg != "" && withBranch {
				// main itself when it holds no equality delete (with the writer's vectors, nearly
				// always), else the branch.
				ref := p.branch
				if n := tbl.CurrentSnapshot().Summary.Properties["total-equality-deletes"]; n == "0" {
					ref = table.MainBranch
				}
				pyRows = append(pyRows, benchPyIcebergBranch(b, ctx, dir, ident, i, p, ref))
			} else if p.pyiceberg != "" {
				row, cpu := benchPyIceberg(b, ctx, cat, ident, dir, i, model, p)
				pyRows = append(pyRows, row)
				scanCPU += cpu
			}
			ratios = append(ratios, ratio)
			res.maxScanRatio = max(res.maxScanRatio, ratio)
			last = time.Time{} // the measurement paused ingestion: not a gap
			tick.Reset(p.interval)
		}
	}
	elapsed := time.Since(start)
	cdcCPU = cpuNow() - cdc0 - scanCPU
	slices.Sort(cycles)
	var cycleCPU time.Duration
	if len(cycles) > 0 {
		cycleCPU = cycles[len(cycles)/2]
	}
	maintCPU := max(0, cdcCPU-time.Duration(p.commits)*cycleCPU)
	res.maintCPUPer1k = time.Duration(float64(maintCPU) / float64(p.commits*p.keys) * 1000)

	first, lastN := samples[:min(100, len(samples))], samples[max(0, len(samples)-100):]
	cpuAll := func(ss []commitSample) time.Duration { return median(ss, func(c commitSample) bool { return true }) }
	cpuIdle := func(ss []commitSample) time.Duration {
		return median(ss, func(c commitSample) bool { return !c.overlap })
	}
	idleN := func(ss []commitSample) int {
		n := 0
		for _, c := range ss {
			if !c.overlap {
				n++
			}
		}
		return n
	}
	res.cpuRatio = float64(cpuIdle(lastN)) / float64(cpuIdle(first))
	walls := make([]time.Duration, len(samples))
	for i, c := range samples {
		walls[i] = c.wall
	}
	slices.Sort(walls)
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(strings.TrimPrefix(tbl.MetadataLocation(), "file://"))
	rec.mu.Lock()
	var compactions, expiries int
	var compTook, convTook, lags []time.Duration
	var converted []maintenance.Report
	var probed, posWritten int64
	for _, r := range rec.reports {
		if r.Converted {
			converted = append(converted, r)
			convTook = append(convTook, r.ConversionTook)
			probed += int64(r.DataFilesProbed)
			posWritten += r.PositionDeletesWritten
		}
		if r.Compacted {
			compactions++
			compTook = append(compTook, r.CompactionTook)
		}
		if r.SnapshotsExpired > 0 {
			expiries++
		}
	}
	failed := slices.Clone(rec.failed)
	rec.mu.Unlock()
	// A commit's equality deletes are gone when the first conversion that started after it
	// ended (a conversion plans on the table it loads when it starts).
	for _, c := range samples {
		if c.vectors {
			lags = append(lags, 0)
			continue
		}
		for _, r := range converted {
			if !r.Started.Before(c.at) {
				lags = append(lags, r.Started.Add(r.Took).Sub(c.at))
				break
			}
		}
	}
	slices.Sort(compTook)
	slices.Sort(convTook)
	slices.Sort(lags)
	fmt.Fprintf(out, "\n")
	if len(branchRows) > 0 {
		fmt.Fprintf(out, "The positional branch %q (iceberg-go) as it was at the same commits (ingestion paused for the measurement):\n\n", p.branch)
		fmt.Fprintf(out, "| commit | branch behind main then | scan | compacted copy | ratio | rows = main's then | data files | delete files |\n|---:|---:|---:|---:|---:|:-:|---:|---:|\n")
		for _, r := range branchRows {
			fmt.Fprintln(out, r)
		}
		fmt.Fprintf(out, "\n")
	}
	if len(pyRows) > 0 && withBranch {
		fmt.Fprintf(out, "PyIceberg (%s) reading main when it held no equality delete after the commit, else the positional branch %q, after the iceberg-go scans, without waiting for a conversion (ingestion paused for the measurement):\n\n", p.pyiceberg, p.branch)
		fmt.Fprintf(out, "| commit | ref | snapshot age | PyIceberg scan | compacted copy | ratio | delete files | position deletes |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range pyRows {
			fmt.Fprintln(out, r)
		}
		fmt.Fprintf(out, "\n")
	} else if len(pyRows) > 0 {
		fmt.Fprintf(out, "PyIceberg (%s), after ingestion paused until no equality delete was left:\n\n", p.pyiceberg)
		fmt.Fprintf(out, "| commit | wait for conversion | PyIceberg scan | compacted copy | ratio | delete files | position deletes | iceberg-go ratio then |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range pyRows {
			fmt.Fprintln(out, r)
		}
		fmt.Fprintf(out, "\n")
	}
	fmt.Fprintf(out, "- run: %d commits in %s (%.1f commits/s)\n", len(samples), elapsed.Round(time.Second), float64(len(samples))/elapsed.Seconds())
	slices.Sort(ratios)
	fmt.Fprintf(out, "- machine: load average %s at the start, %s at the end (2 cores shared with other work)\n", load0, loadavg())
	fmt.Fprintf(out, "- full scan vs freshly compacted copy: median ratio %.2f×, worst **%.2f×** (%d measurements)\n",
		ratios[len(ratios)/2], res.maxScanRatio, len(ratios))
	if len(branchRatios) > 0 {
		slices.Sort(branchRatios)
		res.maxBranchRatio = branchRatios[len(branchRatios)-1]
		fmt.Fprintf(out, "- full scan of the positional branch vs a freshly compacted copy of its rows: median ratio %.2f×, worst **%.2f×** (%d measurements)\n",
			branchRatios[len(branchRatios)/2], res.maxBranchRatio, len(branchRatios))
	}
	if len(branchLags) > 0 {
		slices.Sort(branchLags)
		fmt.Fprintf(out, "- positional branch behind main (after each commit: the age of the first change it does not show): p50 %s, p99 **%s**, max %s (%d commits)\n",
			branchLags[len(branchLags)/2].Round(time.Millisecond), branchLags[len(branchLags)*99/100].Round(time.Millisecond),
			branchLags[len(branchLags)-1].Round(time.Millisecond), len(branchLags))
	}
	fmt.Fprintf(out, "- commit CPU (median, commits without maintenance running): first 100 %s (%d samples), last 100 %s (%d samples): **%.2f×**\n",
		cpuIdle(first).Round(time.Microsecond), idleN(first), cpuIdle(lastN).Round(time.Microsecond), idleN(lastN), res.cpuRatio)
	fmt.Fprintf(out, "- commit CPU (median, all commits): first 100 %s, last 100 %s: %.2f×\n",
		cpuAll(first).Round(time.Microsecond), cpuAll(lastN).Round(time.Microsecond), float64(cpuAll(lastN))/float64(cpuAll(first)))
	fmt.Fprintf(out, "- commit wall time: p50 %s, p99 %s, max %s; longest commit while maintenance ran %s\n",
		walls[len(walls)/2].Round(time.Millisecond), walls[len(walls)*99/100].Round(time.Millisecond), walls[len(walls)-1].Round(time.Millisecond),
		maxCommitMaint.Round(time.Millisecond))
	fmt.Fprintf(out, "- longest gap between two commits (flush interval %s): %s while maintenance ran, %s while it did not: stall beyond the interval **%s** with maintenance, %s without\n",
		p.interval, maxGapMaint.Round(time.Millisecond), maxGapIdle.Round(time.Millisecond),
		max(0, maxGapMaint-p.interval).Round(time.Millisecond), max(0, maxGapIdle-p.interval).Round(time.Millisecond))
	fmt.Fprintf(out, "- metadata.json: max %s, at the end %s with %d snapshots\n", kib(res.maxMetaBytes), kib(fi.Size()), len(tbl.Metadata().Snapshots()))
	if len(compTook) > 0 {
		fmt.Fprintf(out, "- maintenance: %d compactions (took p50 %s, max %s), %d runs expired snapshots, failed steps %v\n",
			compactions, compTook[len(compTook)/2].Round(time.Millisecond), compTook[len(compTook)-1].Round(time.Millisecond), expiries, failed)
	}
	if len(lags) > 0 && (len(convTook) > 0 || maintenance.Converting(p.mode)) {
		conv := "0"
		if len(convTook) > 0 {
			conv = fmt.Sprintf("%d (took p50 %s, max %s)", len(convTook), convTook[len(convTook)/2].Round(time.Millisecond),
				convTook[len(convTook)-1].Round(time.Millisecond))
		}
		fmt.Fprintf(out, "- conversions: %s, %d data files probed, %d positions written; commit to no equality delete left (0 for a commit that wrote vectors): p50 %s, p99 **%s**, max %s (%d of %d commits measured)\n",
			conv, probed, posWritten, lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)*99/100].Round(time.Millisecond),
			lags[len(lags)-1].Round(time.Millisecond), len(lags), len(samples))
	}
	if kc := s.KeyCache(); kc.Limit > 0 || len(convTook) > 0 {
		records := tbl.CurrentSnapshot().Summary.Properties.GetInt("total-records", 0)
		fmt.Fprintf(out, "- key cache (bound %s): %s held at the end, probes %d from the cache, %d read the file; key index (key %q) **%.1f bytes per row** of the table's %d records\n",
			kib(kc.Limit), kib(kc.Held), kc.Hits, kc.Reads, p.key, float64(kc.Held)/float64(max(records, 1)), records)
	}
	fmt.Fprintf(out, "- writer_vectors %v: %d of %d commits wrote deletion vectors; main held equality deletes after **%d of %d commits**\n",
		mc.WriterVectors, vectorCommits, len(samples), eqAfter, len(samples))
	fmt.Fprintf(out, "- all CPU of the CDC phase (ingestion, vector planning and maintenance; scans excluded): **%s per 1,000 changes**\n",
		(cdcCPU * 1000 / time.Duration(p.commits*p.keys)).Round(time.Millisecond))
	fmt.Fprintf(out, "- CPU over the CDC phase (scans excluded): %s for %d changes; ingestion cycle median %s (%d cycles without maintenance); maintenance **%s per 1,000 changes** (%s in all)\n",
		cdcCPU.Round(time.Millisecond), p.commits*p.keys, cycleCPU.Round(time.Microsecond), len(cycles), res.maintCPUPer1k.Round(time.Millisecond), maintCPU.Round(time.Millisecond))
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Fprintf(out, "- peak RSS %.0f MiB, process CPU %s over the run\n", float64(ru.Maxrss)/1024, cpuNow().Round(time.Second))
	return res
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

func median(ss []commitSample, keep func(commitSample) bool) time.Duration {
	var d []time.Duration
	for _, c := range ss {
		if keep(c) {
			d = append(d, c.cpu)
		}
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// benchScanRow times a full scan of the table (best of reps, interleaved with the copy's), writes the same rows into a new
// single-file table (a freshly compacted copy), times its scan, and prints a report row.
func benchScanRow(b *testing.B, ctx context.Context, cat catalog.Catalog, tbl *table.Table, model *benchModel, commit, compactions, reps int, out io.Writer) float64 {
	_, rows, sum := scanQty(b, ctx, tbl)
	ok := rows == model.n && sum == model.sum
	if !ok {
		b.Errorf("commit %d: scan found %d rows (qty sum %d), the model has %d (%d)", commit, rows, sum, model.n, model.sum)
	}
	cp, drop := compactedCopy(b, ctx, cat, tbl, fmt.Sprintf("c%d", commit))
	defer drop()
	d, dc := bestOf(reps, func() time.Duration {
		t, _, _ := scanQty(b, ctx, tbl)
		return t
	}, func() time.Duration {
		t, crow, _ := scanQty(b, ctx, cp)
		if crow != rows {
			b.Errorf("copy has %d rows, table %d", crow, rows)
		}
		return t
	})
	totals := tbl.CurrentSnapshot().Summary.Properties
	fi, _ := os.Stat(strings.TrimPrefix(tbl.MetadataLocation(), "file://"))
	ratio := d.Seconds() / dc.Seconds()
	mark := "yes"
	if !ok {
		mark = "**NO**"
	}
	fmt.Fprintf(out, "| %d | %s | %s | %.2f | %s | %d | %d | %d | %s | %d |\n", commit, d.Round(time.Millisecond), dc.Round(time.Millisecond),
		ratio, mark, totals.GetInt("total-data-files", 0), totals.GetInt("total-delete-files", 0), len(tbl.Metadata().Snapshots()), kib(fi.Size()), compactions)
	return ratio
}

// scanQty scans t (with opts) through iceberg-go and returns the time it took, the rows and the
// sum of their qty.
func scanQty(b *testing.B, ctx context.Context, t *table.Table, opts ...table.ScanOption) (time.Duration, int, int64) {
	runtime.GC() // the previous scan's garbage is not this one's cost
	start := time.Now()
	var rows int
	var sum int64
	_, it, err := t.Scan(opts...).ToArrowRecords(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for rec, err := range it {
		if err != nil {
			b.Fatal(err)
		}
		q := rec.Column(rec.Schema().FieldIndices("qty")[0]).(*array.Int32)
		for i := 0; i < q.Len(); i++ {
			sum += int64(q.Value(i))
		}
		rows += int(rec.NumRows())
		rec.Release()
	}
	return time.Since(start), rows, sum
}

// compactedCopy writes the rows tbl reads (with opts) into a new single-file table (a freshly
// compacted copy) and returns it with a function that drops it.
func compactedCopy(b *testing.B, ctx context.Context, cat catalog.Catalog, tbl *table.Table, name string, opts ...table.ScanOption) (*table.Table, func()) {
	arrowTbl, err := tbl.Scan(opts...).ToArrowTable(ctx)
	if err != nil {
		b.Fatal(err)
	}
	copyIdent := table.Identifier{"benchcopy", fmt.Sprintf("%s_%d", name, time.Now().UnixNano())}
	if err := cat.CreateNamespace(ctx, copyIdent[:1], nil); err != nil && !strings.Contains(err.Error(), "exists") {
		b.Fatal(err)
	}
	cp, err := cat.CreateTable(ctx, copyIdent, tbl.Schema())
	if err != nil {
		b.Fatal(err)
	}
	cp, err = cp.AppendTable(ctx, arrowTbl, 1<<20, nil)
	arrowTbl.Release()
	if err != nil {
		b.Fatal(err)
	}
	return cp, func() {
		if p, ok := cat.(interface {
			PurgeTable(context.Context, table.Identifier) error
		}); ok {
			_ = p.PurgeTable(ctx, copyIdent)
		}
	}
}

// bestOf runs a and c reps times, interleaved, and keeps the best time of each: background
// compaction and other processes on the machine then disturb both alike.
func bestOf(reps int, a, c func() time.Duration) (time.Duration, time.Duration) {
	da, dc := time.Duration(1<<62), time.Duration(1<<62)
	for range reps {
		da, dc = min(da, a()), min(dc, c())
	}
	return da, dc
}

// benchPyIceberg times PyIceberg's full scan of the table against a compacted copy of it
// (integration/pyiceberg/scan_time.py) and returns a report row. PyIceberg does not apply
// equality deletes, and while commits arrive every flush interval the newest ones always have
// theirs outstanding (a conversion converts what its plan saw, README "Which engine reads which
// mode"), so ingestion stays paused until the maintainer has converted them; the wait is
// reported. iceberg-go's scan is timed again at that point (its ratio without equality deletes
// outstanding: what the position deletes or deletion vectors alone cost); the CPU of that scan
// is returned, to be counted with the scans.
func benchPyIceberg(b *testing.B, ctx context.Context, cat catalog.Catalog, ident table.Identifier, dir string, commit int, model *benchModel, p benchParams) (string, time.Duration) {
	wantRows := model.n
	start := time.Now()
	var tbl *table.Table
	for {
		var err error
		tbl, err = cat.LoadTable(ctx, ident)
		if err != nil {
			b.Fatal(err)
		}
		if tbl.CurrentSnapshot().Summary.Properties.GetInt("total-equality-deletes", 0) == 0 {
			break
		}
		if time.Since(start) > p.posDelay+2*time.Minute {
			return fmt.Sprintf("| %d | equality deletes outstanding after %s | – | – | – | – | – | – |", commit, time.Since(start).Round(time.Second)), 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	wait := time.Since(start)
	cpu0 := cpuNow()
	goRatio := benchScanRow(b, ctx, cat, tbl, model, commit, 0, p.scanReps, io.Discard)
	scanCPU := cpuNow() - cpu0
	r := pyicebergScanTime(b, ctx, dir, ident, commit, p)
	if r.Rows != wantRows { // ingestion is paused: the table holds the model's rows
		b.Errorf("commit %d: PyIceberg read %d rows, the model has %d", commit, r.Rows, wantRows)
	}
	return fmt.Sprintf("| %d | %s | %.3fs | %.3fs | %.2f | %d | %d | %.2f |", commit, wait.Round(time.Millisecond), r.Scan, r.Copy, r.Ratio, r.DeleteFiles, r.PositionDeletes, goRatio), scanCPU
}

// branchLag is maintenance.BranchBehind, with the age of main's first snapshot while there is no
// branch yet.
func branchLag(tbl *table.Table, branch string, now time.Time) time.Duration {
	if d, ok := maintenance.BranchBehind(tbl.Metadata(), branch, now); ok {
		return d
	}
	if s := tbl.Metadata().Snapshots(); len(s) > 0 {
		return now.Sub(time.UnixMilli(s[0].TimestampMs))
	}
	return 0
}

// benchBranchScan times iceberg-go's full scan of the positional branch's snapshot of tbl (the
// table as loaded after the commit) against a freshly compacted copy of its rows (as
// benchScanRow does for main), checks that it reads what the main snapshot it shows reads, and
// returns a report row and the ratio (0 without a branch).
func benchBranchScan(b *testing.B, ctx context.Context, cat catalog.Catalog, tbl *table.Table, loaded time.Time, branch string, commit, reps int) (string, float64) {
	at := tbl.Metadata().SnapshotByName(branch)
	if at == nil {
		return fmt.Sprintf("| %d | no branch yet | – | – | – | – | – | – |", commit), 0
	}
	onBranch := table.WithSnapshotID(at.SnapshotID)
	_, rows, sum := scanQty(b, ctx, tbl, onBranch)
	src := maintenance.BranchSource(at)
	_, srows, ssum := scanQty(b, ctx, tbl, table.WithSnapshotID(src))
	mark := "yes"
	if rows != srows || sum != ssum {
		mark = "**NO**"
		b.Errorf("commit %d: the positional branch reads %d rows (qty sum %d), main's snapshot %d it shows %d (%d)", commit, rows, sum, src, srows, ssum)
	}
	cp, drop := compactedCopy(b, ctx, cat, tbl, fmt.Sprintf("b%d", commit), onBranch)
	defer drop()
	d, dc := bestOf(reps, func() time.Duration {
		t, _, _ := scanQty(b, ctx, tbl, onBranch)
		return t
	}, func() time.Duration {
		t, _, _ := scanQty(b, ctx, cp)
		return t
	})
	ratio := d.Seconds() / dc.Seconds()
	shows := "main's head"
	if behind, _ := maintenance.BranchBehind(tbl.Metadata(), branch, loaded); behind > 0 {
		shows = fmt.Sprintf("%s behind", behind.Round(100*time.Millisecond))
	}
	totals := at.Summary.Properties
	return fmt.Sprintf("| %d | %s | %s | %s | %.2f | %s | %d | %d |", commit, shows, d.Round(time.Millisecond), dc.Round(time.Millisecond), ratio, mark,
		totals.GetInt("total-data-files", 0), totals.GetInt("total-delete-files", 0)), ratio
}

// benchPyIcebergBranch times PyIceberg's full scan of the positional branch against a compacted
// copy of it, without waiting for main's equality deletes to be converted (ingestion is paused
// for every measurement, so by the time PyIceberg loads the table the branch may have caught up
// with main), and returns a report row.
func benchPyIcebergBranch(b *testing.B, ctx context.Context, dir string, ident table.Identifier, commit int, p benchParams, ref string) string {
	r := pyicebergScanTime(b, ctx, dir, ident, commit, p, "--ref", ref)
	return fmt.Sprintf("| %d | %s | %.1fs | %.3fs | %.3fs | %.2f | %d | %d |", commit, ref, r.Age, r.Scan, r.Copy, r.Ratio, r.DeleteFiles, r.PositionDeletes)
}

// pyScan is what integration/pyiceberg/scan_time.py prints.
type pyScan struct {
	Rows            int     `json:"rows"`
	Age             float64 `json:"age_s"`
	DeleteFiles     int     `json:"delete_files"`
	PositionDeletes int64   `json:"position_deletes"`
	Scan            float64 `json:"scan_s"`
	Copy            float64 `json:"copy_scan_s"`
	Ratio           float64 `json:"ratio"`
}

// pyicebergScanTime runs integration/pyiceberg/scan_time.py on the table (with extra arguments).
func pyicebergScanTime(b *testing.B, ctx context.Context, dir string, ident table.Identifier, commit int, p benchParams, extra ...string) pyScan {
	args := append([]string{filepath.Join("..", "integration", "pyiceberg", "scan_time.py"),
		"--catalog-db", filepath.Join(dir, "catalog.db"), "--warehouse", filepath.Join(dir, "warehouse"),
		"--table", strings.Join(ident, "."), "--copy-dir", filepath.Join(b.TempDir(), "copy"), "--reps", strconv.Itoa(p.scanReps)}, extra...)
	cmd := exec.CommandContext(ctx, p.pyiceberg, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		b.Fatalf("pyiceberg scan %v at commit %d: %v\n%s", extra, commit, err, stderr.String())
	}
	var r pyScan
	if err := json.Unmarshal(outb, &r); err != nil {
		b.Fatalf("pyiceberg scan %v at commit %d: %v: %s", extra, commit, err, outb)
	}
	return r
}

// benchTable is the benchmark's table (BENCH_KEY) and the key columns of row id.
func benchTable(b *testing.B, p benchParams) (TableConfig, func(id int) []change.Column) {
	rest := []ColumnSpec{{Name: "name", Type: "WSTRING", Length: 40}, {Name: "qty", Type: "INT4"},
		{Name: "amount", Type: "NUMERIC", Precision: 12, Scale: 2}}
	switch p.key {
	case "", "int":
		return TableConfig{PrimaryKey: []string{"id"}, Columns: append([]ColumnSpec{{Name: "id", Type: "INT8"}}, rest...), DeleteMode: p.mode},
			func(id int) []change.Column { return []change.Column{col("id", strconv.Itoa(id))} }
	case "uuid":
		return TableConfig{PrimaryKey: []string{"id"}, Columns: append([]ColumnSpec{{Name: "id", Type: "WSTRING", Length: 36}}, rest...), DeleteMode: p.mode},
			func(id int) []change.Column { return []change.Column{col("id", "'"+uuidOf(id)+"'")} }
	case "composite":
		return TableConfig{PrimaryKey: []string{"tenant", "id"}, Columns: append([]ColumnSpec{{Name: "tenant", Type: "INT4"},
				{Name: "id", Type: "WSTRING", Length: 20}}, rest...), DeleteMode: p.mode},
			func(id int) []change.Column {
				return []change.Column{col("tenant", strconv.Itoa(id%16)), col("id", "'k"+strconv.Itoa(id)+"'")}
			}
	}
	b.Fatalf("BENCH_KEY %q: want int, uuid or composite", p.key)
	return TableConfig{}, nil
}
