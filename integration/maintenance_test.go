//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// setMaintenance puts a sink.maintenance section into the pipeline's service configuration.
func (p *pipeline) setMaintenance(m map[string]any) {
	p.t.Helper()
	b, err := os.ReadFile(p.config)
	if err != nil {
		p.t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		p.t.Fatal(err)
	}
	snk, _ := cfg["sink"].(map[string]any)
	if snk == nil {
		snk = map[string]any{}
	}
	snk["maintenance"] = m
	cfg["sink"] = snk
	out, err := yaml.Marshal(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(p.config, out, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// compaction is one "compacted" log line of a service.
type compaction struct {
	service int
	table   string
	start   time.Time
	end     time.Time
	attempt int
}

var compactedLine = regexp.MustCompile(`\tcompacted\t(\{.*\})`)

// compactions reads the "compacted" lines of the services' logs.
func compactions(t *testing.T, svcs []*Service) []compaction {
	t.Helper()
	var out []compaction
	for i, s := range svcs {
		for _, m := range compactedLine.FindAllStringSubmatch(s.Log(), -1) {
			var f struct {
				Table    string `json:"table"`
				Started  string `json:"started"`
				Took     string `json:"took"`
				Attempts int    `json:"attempts"`
			}
			if err := json.Unmarshal([]byte(m[1]), &f); err != nil {
				t.Fatalf("service %d: cannot parse %q: %v", i, m[1], err)
			}
			start, err := time.Parse(time.RFC3339Nano, f.Started)
			if err != nil {
				t.Fatalf("service %d: started %q: %v", i, f.Started, err)
			}
			took, err := time.ParseDuration(f.Took)
			if err != nil {
				t.Fatalf("service %d: took %q: %v", i, f.Took, err)
			}
			out = append(out, compaction{service: i, table: f.Table, start: start, end: start.Add(took), attempt: f.Attempts})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// TestMaintenanceBesideSeveralWorkers runs three service processes on one stream while the
// workload is being written, with aggressive maintenance thresholds, so every table is compacted,
// expired and has its manifests rewritten many times while the workers commit to it. Halfway, the
// worker that compacted most stops gracefully (releasing its leases) and another one must take
// its tables over. The tables must equal the generated workload's final state (no lost or
// resurrected row), no two workers may compact one table at the same time (the lease), and an
// on-demand `maintain` afterwards must leave them equal too.
func TestMaintenanceBesideSeveralWorkers(t *testing.T) {
	// As DMS writes without object mapping (a table's records and its control records over all
	// 4 shards), and as most users run it: no per-table configuration.
	p, gen := newPipelineLive(t, 4, 20000, 11, 250, "--layout", "dms-default")
	if err := os.WriteFile(p.tablesCfg, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.writeConfig(nil)
	const maxSnapshots = 12 // well below what a minute of retention holds at these commit rates
	p.setMaintenance(map[string]any{
		"max_delete_files":   2,
		"max_small_files":    3,
		"min_interval":       "0s",
		"check_interval":     "1s",
		"snapshot_retention": "1m",
		"keep_last":          5,
		"max_snapshots":      maxSnapshots,
		"expire_batch":       3,
		"max_manifests":      6,
		"lease_duration":     "20s",
	})
	var svcs []*Service
	for _, w := range []string{"w1", "w2", "w3"} {
		svcs = append(svcs, StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID="+w))
	}
	// Halfway through the traffic, stop the busiest maintainer.
	WaitFor(t, 10*time.Minute, time.Second, func() (bool, error) {
		for _, s := range svcs {
			if s.Exited() {
				return false, fmt.Errorf("service exited:\n%s", tailFile(s.LogPath, 8<<10))
			}
		}
		return len(compactions(t, svcs)) >= 6 || gen.Exited(), nil
	}, "compactions while the workload is written")
	perService := map[int]int{}
	for _, c := range compactions(t, svcs) {
		perService[c.service]++
	}
	busiest := 0
	for i, n := range perService {
		if n > perService[busiest] {
			busiest = i
		}
	}
	stoppedAt := time.Now()
	if err := svcs[busiest].Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop of service %d: %v", busiest, err)
	}
	t.Logf("stopped service %d (w%d) after %d of its compactions; generator finished: %v", busiest, busiest+1, perService[busiest], gen.Exited())
	running := append(append([]*Service{}, svcs[:busiest]...), svcs[busiest+1:]...)
	if err := gen.WaitTimeout(10 * time.Minute); err != nil {
		t.Fatalf("gen: %v\n%s", err, tailFile(gen.LogPath, 8<<10))
	}
	p.records = countRecords(t, p.stream)
	p.waitVerified(10*time.Minute, running...)
	for _, s := range running {
		if err := s.Stop(90 * time.Second); err != nil {
			t.Fatalf("graceful stop: %v", err)
		}
	}
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after stop:\n%s", out)
	}

	cs := compactions(t, svcs)
	tables, services, retried, after := map[string]int{}, map[int]bool{}, 0, 0
	for _, c := range cs {
		tables[c.table]++
		services[c.service] = true
		if c.attempt > 1 {
			retried++
		}
		if c.service != busiest && c.start.After(stoppedAt) {
			after++
		}
	}
	if len(tables) < 2 || len(services) < 2 {
		t.Errorf("compactions of %d tables by %d workers: want several tables compacted, by more than one worker over the run", len(tables), len(services))
	}
	// The lease: one table's compactions never overlap across workers.
	last := map[string]compaction{}
	for _, c := range cs {
		if prev, ok := last[c.table]; ok && prev.service != c.service && c.start.Before(prev.end) {
			t.Errorf("%s: service %d compacted from %s while service %d did until %s", c.table, c.service,
				c.start.Format(time.RFC3339Nano), prev.service, prev.end.Format(time.RFC3339Nano))
		}
		if prev, ok := last[c.table]; !ok || c.end.After(prev.end) {
			last[c.table] = c
		}
	}
	lost := 0
	for _, s := range svcs {
		lost += strings.Count(s.Log(), "maintenance commit lost to another commit")
	}
	t.Logf("MEASURED: %d records; %d compactions over %d tables by %d workers (%d by the others after service %d stopped); %d maintenance commits lost to another worker's commit and were restaged; %d compactions needed more than one attempt; per table %v",
		p.records, len(cs), len(tables), len(services), after, busiest, lost, retried, tables)

	// On demand, after the services: every table is maintained and still equal.
	stdout, stderr, err := RunCLI(t, p.bin, "maintain", "--config", p.config)
	if err != nil {
		t.Fatalf("maintain: %v\n%s\n%s", err, stdout, stderr)
	}
	if strings.Contains(stdout, "skipped") || !strings.Contains(stdout, "took") {
		t.Fatalf("maintain output:\n%s", stdout)
	}
	t.Logf("maintain:\n%s", stdout)
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after maintain:\n%s", out)
	}

	// max_snapshots: the cap expired snapshots younger than snapshot_retention while the workers
	// committed (their files deferred, the tables verified equal above), and after maintain every
	// table keeps at most the cap and the manifest rewrite that follows the expiry.
	early, purged := 0, 0
	for _, s := range svcs {
		early += strings.Count(s.Log(), "expired snapshots (max_snapshots)")
		purged += strings.Count(s.Log(), `"trigger": "deferred-deletes"`)
	}
	if early == 0 {
		t.Error("no expiry of snapshots inside snapshot_retention: max_snapshots never applied")
	}
	cat, err := sink.OpenCatalog(t.Context(), sink.DefaultCatalogConfig(p.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cl, ok := cat.(io.Closer); ok {
			_ = cl.Close()
		}
	}()
	counts := map[string]int{}
	for tb := range tables {
		tbl, err := cat.LoadTable(t.Context(), ident(tb))
		if err != nil {
			t.Fatal(err)
		}
		counts[tb] = len(tbl.Metadata().Snapshots())
		if counts[tb] > maxSnapshots+1 {
			t.Errorf("%s keeps %d snapshots after maintain, want at most max_snapshots %d + 1", tb, counts[tb], maxSnapshots)
		}
	}
	t.Logf("MEASURED: %d early expiries, %d runs that deleted deferred files; snapshots per table after maintain %v", early, purged, counts)
}

// TestCompactionConflictsWithLiveCommits compacts every table, from the test process, while two
// service processes (their own maintenance off) commit a live workload to the same tables. Each
// compaction is held after staging until a worker has committed to its table, so its first
// commit attempt loses to a CDC commit that may delete or update rows it rewrote; it must be
// restaged on the newest table and land without resurrecting or losing a row.
func TestCompactionConflictsWithLiveCommits(t *testing.T) {
	p, gen := newPipelineLive(t, 4, 12000, 13, 200)
	p.setMaintenance(map[string]any{"enabled": false})
	var svcs []*Service
	for _, w := range []string{"w1", "w2"} {
		svcs = append(svcs, StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID="+w))
	}
	ctx := t.Context()
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(p.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	cfg := maintenance.DefaultConfig()
	cfg.Owner = "conflict-test"
	var conflicted, compacted, runs int
	for ; !gen.Exited(); time.Sleep(200 * time.Millisecond) {
		for _, s := range svcs {
			if s.Exited() {
				t.Fatalf("service exited:\n%s", tailFile(s.LogPath, 8<<10))
			}
		}
		nss, err := cat.ListNamespaces(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range nss {
			for id, err := range cat.ListTables(ctx, ns) {
				if err != nil {
					t.Fatal(err)
				}
				hold := func(step string, attempt int) {
					if step != "compact" || attempt != 0 {
						return
					}
					// Let a worker commit to the table before this attempt commits.
					tbl, err := cat.LoadTable(ctx, id)
					if err != nil {
						return
					}
					before := tbl.CurrentSnapshot().SnapshotID
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
						if tbl, err := cat.LoadTable(ctx, id); err == nil && tbl.CurrentSnapshot().SnapshotID != before {
							return
						}
					}
				}
				rep, err := maintenance.RunTable(ctx, cat, id, cfg, maintenance.RunOptions{IgnoreLease: true, SkipOrphans: true, BeforeCommit: hold})
				if err != nil {
					t.Fatalf("maintain %v: %v", id, err)
				}
				runs++
				if rep.Compacted {
					compacted++
					if rep.CompactionAttempts > 1 {
						conflicted++
					}
				}
			}
		}
	}
	p.records = countRecords(t, p.stream)
	p.waitVerified(10*time.Minute, svcs...)
	for _, s := range svcs {
		if err := s.Stop(90 * time.Second); err != nil {
			t.Fatalf("graceful stop: %v", err)
		}
	}
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after stop:\n%s", out)
	}
	t.Logf("MEASURED: %d records; %d maintenance runs, %d compactions, %d of them lost their first commit to a worker's CDC commit and were restaged",
		p.records, runs, compacted, conflicted)
	if conflicted == 0 {
		t.Fatal("no compaction conflicted with a CDC commit: the test did not test anything")
	}
}

// TestPositionModeBesideSeveralWorkers is TestMaintenanceBesideSeveralWorkers's traffic in
// delete_mode position and dv: three service processes on one stream while the workload is
// written, each table's maintainer converting every commit's equality deletes within 200ms and
// compacting on aggressive thresholds, beside the other workers' CDC commits. The tables must
// equal the workload's final state, conversions must have run (in dv mode, where the writers
// commit vectors for every key, conversions or vectors), and once the services stopped every
// equality delete that a conversion could reach is gone; in dv mode every position delete left
// is a deletion vector.
func TestPositionModeBesideSeveralWorkers(t *testing.T) {
	for _, mode := range []string{"position", "dv"} {
		t.Run(mode, func(t *testing.T) { testConvertingBesideSeveralWorkers(t, mode) })
	}
}

func testConvertingBesideSeveralWorkers(t *testing.T, mode string) {
	p, gen := newPipelineLive(t, 4, 3000, 12, 250)
	p.setMaintenance(map[string]any{
		"max_delete_files":   4,
		"max_small_files":    6,
		"min_interval":       "0s",
		"check_interval":     "1s",
		"position_delay":     "200ms",
		"snapshot_retention": "1m",
		"keep_last":          5,
		"expire_batch":       3,
		"max_manifests":      6,
		"lease_duration":     "20s",
	})
	p.setDeleteMode(mode, true) // per table (TestReadersByDeleteMode sets it sink-wide)
	var svcs []*Service
	for _, w := range []string{"w1", "w2", "w3"} {
		svcs = append(svcs, StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID="+w))
	}
	if err := gen.WaitTimeout(10 * time.Minute); err != nil {
		t.Fatalf("gen: %v\n%s", err, tailFile(gen.LogPath, 8<<10))
	}
	p.records = countRecords(t, p.stream)
	p.waitVerified(10*time.Minute, svcs...)
	WaitFor(t, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		eq, _, _ := p.deleteFiles(t.Context())
		return sum(eq) == 0, nil
	}, "every equality delete converted")
	for _, s := range svcs {
		if err := s.Stop(90 * time.Second); err != nil {
			t.Fatalf("graceful stop: %v", err)
		}
	}
	if ok, out := p.verify(); !ok {
		t.Fatalf("verify after stop:\n%s", out)
	}
	conversions, superseded, by := 0, 0, 0
	for _, s := range svcs {
		n := strings.Count(s.Log(), "\tconverted equality deletes\t")
		conversions += n
		if n > 0 {
			by++
		}
		superseded += strings.Count(s.Log(), "superseded")
	}
	eq, pos, dvs := p.deleteFiles(t.Context())
	t.Logf("MEASURED: %s mode: %d records; %d conversions by %d workers, %d superseded; %d compactions; delete files left: equality %v, position %v (deletion vectors %v)",
		mode, p.records, conversions, by, superseded, len(compactions(t, svcs)), eq, pos, dvs)
	if mode == "dv" && sum(dvs) != sum(pos) || mode == "position" && sum(dvs) != 0 {
		t.Fatalf("%s mode: %d of %d position delete files are deletion vectors", mode, sum(dvs), sum(pos))
	}
	if conversions == 0 && mode == "position" {
		t.Fatal("no conversion ran")
	}
	if mode == "dv" && conversions == 0 && sum(dvs) == 0 {
		// The writers commit deletion vectors for every key (writer_vectors): conversions
		// follow only reloads and declined batches, but vectors there must be.
		t.Fatal("no conversion ran and no deletion vector is left")
	}
	if sum(eq) != 0 {
		t.Fatalf("equality deletes left after the services stopped: %v", eq)
	}
}
