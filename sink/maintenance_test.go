package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

var usersIdent = table.Identifier{"shop", "users"}

// newMaintHarness is newHarness with the maintenance configuration set by mod (background
// maintenance is off unless mod turns it on).
func newMaintHarness(t *testing.T, dir string, mod func(*MaintenanceConfig), opts ...Option) *harness {
	t.Helper()
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(dir)
	cfg.Stream = "st"
	cfg.FlushInterval = time.Hour
	cfg.Tables = map[string]TableConfig{"shop.users": usersDef}
	cfg.Maintenance.Enabled = false
	if mod != nil {
		mod(&cfg.Maintenance)
	}
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cat: cat, dlq: &memDLQ{}, ack: &counter{}, done: make(chan error, 1)}
	h.s, err = New(cfg, cat, h.dlq, append([]Option{WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	h.stop = cancel
	go func() { h.done <- h.s.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("sink Run: %v", err)
		}
	})
	return h
}

// model is the expected content of shop.users, applied alongside the submitted changes.
type model struct {
	h    *harness
	seq  int
	rows map[int]string
}

func newModel(h *harness) *model { return &model{h: h, rows: map[int]string{}} }

func (m *model) upsert(shard string, id int, name string) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpUpdate, "users", []change.Column{col("id", fmt.Sprint(id)), col("name", "'"+name+"'")}, nil)
	m.rows[id] = name
}

func (m *model) del(shard string, id int) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpDelete, "users", []change.Column{col("id", fmt.Sprint(id))}, nil)
	delete(m.rows, id)
}

func (m *model) want() []string {
	var out []string
	for id, name := range m.rows {
		out = append(out, fmt.Sprintf("id=%d,name=%s,amount=null", id, name))
	}
	sort.Strings(out)
	return out
}

// load inserts ids 1..n as one batch; batch b then updates every 7th key, deletes every 11th,
// re-inserts some deleted ones, each as one commit.
func (m *model) load(n int) {
	for id := 1; id <= n; id++ {
		m.upsert("s0", id, "v0")
	}
	m.h.flush()
}

func (m *model) batch(b, n int) {
	for id := b % 7; id <= n; id += 7 {
		if id > 0 {
			m.upsert("s0", id, fmt.Sprintf("v%d", b))
		}
	}
	for id := 1 + b%11; id <= n; id += 11 {
		m.del("s0", id)
	}
	for id := 2 + b%13; id <= n; id += 29 {
		m.upsert("s0", id, fmt.Sprintf("r%d", b))
	}
	m.h.flush()
}

func testMaintConfig() MaintenanceConfig {
	c := DefaultMaintenanceConfig()
	c.Owner = "test"
	c.MinInterval = 0
	c.LeaseDuration = time.Minute
	return c
}

func testMaintainer(t *testing.T, cat catalog.Catalog, cfg MaintenanceConfig) *maintainer {
	return newMaintainer(cat, usersIdent, "shop.users", cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), nopMaintenanceMetrics{})
}

func loadUsers(t *testing.T, cat catalog.Catalog) *table.Table {
	t.Helper()
	tbl, err := cat.LoadTable(context.Background(), usersIdent)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func watermarks(tbl *table.Table) map[string]string {
	return checkpoint.Watermarks(tbl.Properties(), "st")
}

// dataSeqs returns the data sequence number of every live data file of the current snapshot.
func dataSeqs(t *testing.T, tbl *table.Table) map[string]int64 {
	t.Helper()
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mans, err := tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, mf := range mans {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				t.Fatal(err)
			}
			out[e.DataFile().FilePath()] = e.SequenceNum()
		}
	}
	return out
}

func TestMaintainTableCompactsExpiresAndKeepsWatermarks(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(300)
	for b := 1; b <= 12; b++ {
		m.batch(b, 300)
	}
	rows, before := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	c := summaryCounts(before.CurrentSnapshot())
	if c.deleteFiles != 13 || c.dataFiles != 13 { // upserts delete their key too, the load included
		t.Fatalf("before: %d delete files, %d data files; want 13 and 13", c.deleteFiles, c.dataFiles)
	}

	cfg := testMaintConfig()
	cfg.KeepLast, cfg.SnapshotRetention = 2, 0
	rep, err := MaintainTable(context.Background(), h.cat, usersIdent, cfg, MaintainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted || rep.DataFilesRewritten != 13 || rep.DataFilesWritten != 1 || rep.DeleteFilesRemoved != 13 ||
		rep.DeleteFilesAfter != 0 || rep.DataFilesAfter != 1 || rep.DeleteRowsRemoved == 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.SnapshotsExpired == 0 || rep.SnapshotsAfter > 3 {
		t.Fatalf("expiry: %d expired, %d left (keep_last 2, plus the rewrite's own)", rep.SnapshotsExpired, rep.SnapshotsAfter)
	}
	rows, after := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	if !maps.Equal(watermarks(after), watermarks(before)) || watermarks(after)["s0"] != fmt.Sprint(m.seq) {
		t.Fatalf("watermarks after maintenance %v, before %v", watermarks(after), watermarks(before))
	}
	if owner, until := readLease(after.Properties()); !strings.HasPrefix(owner, "test#") || until.After(time.Now()) {
		t.Fatalf("lease after the run: %q until %s, want released", owner, until)
	}
	if after.Properties()[LastCompactionProperty] == "" {
		t.Fatal("no last-compaction property")
	}

	// CDC keeps applying on top of the compacted table (deletes of compacted rows, re-inserts).
	for b := 13; b <= 15; b++ {
		m.batch(b, 300)
	}
	rows, _ = scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	h.close()
}

// A compaction reads the table at snapshot S while the writer commits a delete and an update of
// keys that are in the files being rewritten. The rewrite, committed afterwards, must keep the
// key deleted and the update visible: its files carry S's sequence number, so the newer
// equality deletes still apply to them.
func TestCompactionKeepsDeletesCommittedWhileItRuns(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(100)
	for b := 1; b <= 4; b++ {
		m.batch(b, 100)
	}
	start := loadUsers(t, h.cat).CurrentSnapshot()
	mt := testMaintainer(t, h.cat, testMaintConfig())
	mt.afterExecute = func() {
		m.del("s0", 50)
		m.upsert("s0", 60, "concurrent")
		m.del("s0", 61)
		m.upsert("s0", 61, "reinserted")
		h.flush() // a CDC commit after S, before the rewrite commits
	}
	if !mt.lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.maintain(context.Background(), steps{compact: true, trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted {
		t.Fatalf("not compacted: %+v", rep)
	}
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	// The rewritten file has S's sequence number; the concurrent batch's data file keeps its own.
	seqs := dataSeqs(t, tbl)
	var atStart, newer int
	for _, s := range seqs {
		switch {
		case s == start.SequenceNumber:
			atStart++
		case s > start.SequenceNumber:
			newer++
		}
	}
	if atStart != 1 || newer != 1 || len(seqs) != 2 {
		t.Fatalf("data sequence numbers %v: want one rewritten file at %d and the concurrent batch's file above it", seqs, start.SequenceNumber)
	}
	// Only the deletes at or below S were removed: the concurrent batch's delete file stays.
	if c := summaryCounts(tbl.CurrentSnapshot()); c.deleteFiles != 1 {
		t.Fatalf("%d delete files after compaction, want 1 (the concurrent batch's)", c.deleteFiles)
	}
	if watermarks(tbl)["s0"] != fmt.Sprint(m.seq) {
		t.Fatalf("watermark %v, want %d", watermarks(tbl), m.seq)
	}
	h.close()
}

// The writer commits between the moment the compaction loaded the newest table and its commit:
// the compaction's commit fails on the catalog's snapshot requirement, is restaged on the new
// head and lands on the second attempt; the writer's next commit (its table is now stale) is
// retried the same way. Nothing is lost or resurrected.
func TestCompactionAndCDCCommitConflict(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(100)
	for b := 1; b <= 3; b++ {
		m.batch(b, 100)
	}
	mt := testMaintainer(t, h.cat, testMaintConfig())
	conflicts := 0
	mt.beforeCommit = func(step string, attempt int) {
		if step == "compact" && attempt == 0 {
			conflicts++
			m.del("s0", 7)
			m.upsert("s1", 8, "conflicting")
			h.flush()
		}
	}
	if !mt.lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.maintain(context.Background(), steps{compact: true, trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 || !rep.Compacted || rep.CompactionAttempts != 2 {
		t.Fatalf("conflicts %d, report %+v: want a compaction that needed 2 attempts", conflicts, rep)
	}
	rows, _ := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	// The writer's table is stale now; its next commit conflicts, reloads and lands.
	m.batch(4, 100)
	m.batch(5, 100)
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	wm := watermarks(tbl)
	if wm["s0"] != fmt.Sprint(m.seq) || wm["s1"] == "" {
		t.Fatalf("watermarks %v", wm)
	}
	h.close()
}

func TestLeaseAllowsOneMaintainer(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(10)
	ctx := context.Background()
	cfgA, cfgB := testMaintConfig(), testMaintConfig()
	cfgA.Owner, cfgB.Owner = "a", "b"
	a, b := testMaintainer(t, h.cat, cfgA), testMaintainer(t, h.cat, cfgB)

	stale := loadUsers(t, h.cat) // what b read before a acquired
	if !a.lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("a could not acquire a free lease")
	}
	if b.lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b acquired a lease a holds")
	}
	// b decided on a version that showed the lease free; a's acquisition landed in between. b's
	// commit succeeds (property changes are not checked by the catalog) but its validation finds
	// a's live lease in the versions it skipped, so b backs off.
	ok, err := b.acquireOn(ctx, stale, time.Now())
	if err != nil || ok {
		t.Fatalf("racing acquisition: ok=%v err=%v; want it refused", ok, err)
	}
	if !a.holds(time.Now()) {
		t.Fatal("a lost its lease to a refused acquisition")
	}
	// The table now shows b's stray record; neither b nor a third worker treats it as free.
	if b.lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b took its own refused record for a lease")
	}
	// a keeps maintaining and its commits rewrite the record.
	m.batch(1, 10)
	if _, err := a.maintain(ctx, steps{compact: true, trigger: "test"}); err != nil {
		t.Fatal(err)
	}
	if owner, _ := readLease(loadUsers(t, h.cat).Properties()); owner != a.owner {
		t.Fatalf("lease owner %q after a's maintenance, want %q", owner, a.owner)
	}
	// a dies: its lease ends (simulated by an expired record); b takes over.
	a.setLease(time.Time{})
	txn := loadUsers(t, h.cat).NewTransaction()
	if err := txn.SetProperties(a.leaseProps(time.Now().Add(-time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b could not take over an expired lease")
	}
	if a.lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("a acquired b's lease")
	}
	// A run of a maintainer that lost its lease stops before committing anything.
	a.setLease(time.Time{})
	if _, err := a.maintain(ctx, steps{expire: true, manifests: true, trigger: "test"}); err != nil && !errors.Is(err, errLeaseLost) {
		t.Fatal(err)
	}
	if _, err := MaintainTable(ctx, h.cat, usersIdent, cfgA, MaintainOptions{SkipOrphans: true}); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("MaintainTable while b holds the lease: %v, want ErrLeaseHeld", err)
	}
	h.close()
}

type maintRecorder struct {
	nopMetrics
	mu      sync.Mutex
	reports []MaintenanceReport
	checks  int
	failed  []string
	last    MaintenanceStatus
	// commitFailed counts the writer's failed commit attempts.
	commitFailed int
}

func (r *maintRecorder) CommitFailed(string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commitFailed++
}

func (r *maintRecorder) MaintenanceChecked(st MaintenanceStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks++
	r.last = st
}

func (r *maintRecorder) Maintained(rep MaintenanceReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
}

func (r *maintRecorder) MaintenanceFailed(table, step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, table+":"+step)
}

func (r *maintRecorder) compactions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rep := range r.reports {
		if rep.Compacted {
			n++
		}
	}
	return n
}

// Background maintenance with aggressive thresholds while batches keep committing: the table is
// compacted and expired several times, the writer never fails, and the content stays exact.
func TestBackgroundMaintenanceBesideIngestion(t *testing.T) {
	dir := t.TempDir()
	rec := &maintRecorder{}
	h := newMaintHarness(t, dir, func(c *MaintenanceConfig) {
		c.Enabled = true
		c.Owner = "bg"
		c.MaxDeleteFiles = 3
		c.MinInterval = 0
		c.CheckInterval = 20 * time.Millisecond
		c.KeepLast = 3
		c.SnapshotRetention = 0
		c.ExpireBatch = 2
		c.MaxManifests = 4
	}, WithMetrics(rec))
	m := newModel(h)
	m.load(200)
	for b := 1; b <= 24; b++ {
		m.batch(b, 200)
		if b%6 != 0 {
			continue
		}
		rows, _ := scanRows(t, h.cat, "users")
		eq(t, rows, m.want()...)
		// Six batches add six delete files: a compaction must follow (while batches continue).
		want := b / 6
		deadline := time.Now().Add(30 * time.Second)
		for rec.compactions() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d compactions after %d batches, want %d (reports %+v, failed %v)", rec.compactions(), b, want, rec.reports, rec.failed)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	if watermarks(tbl)["s0"] != fmt.Sprint(m.seq) {
		t.Fatalf("watermark %v, want %d", watermarks(tbl), m.seq)
	}
	if n := len(tbl.Metadata().Snapshots()); n > 24 {
		t.Fatalf("%d snapshots kept: expiry did not run", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.checks == 0 || rec.last.Table != "shop.users" {
		t.Fatalf("no status reported (%d checks, last %+v)", rec.checks, rec.last)
	}
	for _, f := range rec.failed {
		if !strings.HasSuffix(f, ":lease") { // a lease commit may lose to a writer commit
			t.Errorf("maintenance step failed: %s", f)
		}
	}
	// Maintenance commits run between the writer's commits. A table whose writer looks idle for
	// two flush intervals (a loaded machine, or the scans above) is maintained on its own, and the
	// writer's next commit then reloads and re-stages once: correct, but scheduling-dependent,
	// so it is reported rather than asserted (the benchmark measures it).
	if rec.commitFailed > 1 {
		t.Logf("the writer re-staged %d commits after maintenance commits", rec.commitFailed)
	}
}

func TestOrphanCleanupOnlyRemovesOldUnreferencedFiles(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(20)
	m.batch(1, 20)
	tbl := loadUsers(t, h.cat)
	dataDir := strings.TrimPrefix(tbl.Location(), "file://") + "/data"
	old, young := filepath.Join(dataDir, "stray-old.parquet"), filepath.Join(dataDir, "stray-young.parquet")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("not referenced"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	// Committed files older than the cutoff must stay too.
	_ = filepath.WalkDir(strings.TrimPrefix(tbl.Location(), "file://"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != young {
			_ = os.Chtimes(p, past, past)
		}
		return nil
	})
	cfg := testMaintConfig()
	cfg.OrphanMinAge = time.Hour
	rep, err := MaintainTable(context.Background(), h.cat, usersIdent, cfg, MaintainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 1 {
		t.Fatalf("removed %d orphans, want 1", rep.OrphansRemoved)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old orphan still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("young file removed: %v", err)
	}
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	if tbl.Properties()[LastOrphanCleanupProperty] == "" {
		t.Fatal("last orphan cleanup not recorded")
	}
	h.close()
}

func TestMaintenanceConfigValidate(t *testing.T) {
	if err := DefaultMaintenanceConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*MaintenanceConfig){
		"max_delete_files": func(c *MaintenanceConfig) { c.MaxDeleteFiles = 0 },
		"orphan_min_age":   func(c *MaintenanceConfig) { c.OrphanMinAge = time.Minute },
		"keep_last":        func(c *MaintenanceConfig) { c.KeepLast = 0 },
		"lease_duration":   func(c *MaintenanceConfig) { c.LeaseDuration = time.Second },
		"orphan_interval":  func(c *MaintenanceConfig) { c.OrphanInterval = -1 },
		"check_interval":   func(c *MaintenanceConfig) { c.CheckInterval = 0 },
	} {
		c := DefaultMaintenanceConfig()
		mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "sink.maintenance."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestExpirable(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(5)
	for b := 1; b <= 5; b++ {
		m.batch(b, 5)
	}
	meta := loadUsers(t, h.cat).Metadata()
	now := time.Now()
	if n := expirable(meta, 2, 0, now.Add(time.Second)); n != 4 {
		t.Fatalf("expirable(keep 2, retention 0) = %d of 6, want 4", n)
	}
	if n := expirable(meta, 2, time.Hour, now); n != 0 {
		t.Fatalf("expirable within retention = %d, want 0", n)
	}
	h.close()
}

// A run longer than the lease keeps the lease: it is renewed in the background, so a big
// compaction is not abandoned at its commit.
func TestLeaseRenewedDuringLongRun(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(50)
	m.batch(1, 50)
	cfg := testMaintConfig()
	cfg.LeaseDuration = 400 * time.Millisecond
	mt := testMaintainer(t, h.cat, cfg)
	mt.afterExecute = func() { time.Sleep(time.Second) } // 2.5 leases
	if !mt.lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.maintain(context.Background(), steps{compact: true, trigger: "test"})
	if err != nil || !rep.Compacted {
		t.Fatalf("long compaction: %v, %+v", err, rep)
	}
	rows, _ := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	h.close()
}

// Two compactions of one table race (the maintain command with --ignore-lease beside a service):
// the one that commits second finds its input files rewritten, gives up without an error and
// removes the files it wrote.
func TestCompactionSupersededByAnother(t *testing.T) {
	dir := t.TempDir()
	h := newMaintHarness(t, dir, nil)
	m := newModel(h)
	m.load(100)
	for b := 1; b <= 3; b++ {
		m.batch(b, 100)
	}
	ctx := context.Background()
	cfg := testMaintConfig()
	a, b := testMaintainer(t, h.cat, cfg), testMaintainer(t, h.cat, cfg)
	a.ignoreLease, b.ignoreLease = true, true
	a.afterExecute = func() {
		if rep, err := b.maintain(ctx, steps{compact: true, trigger: "test"}); err != nil || !rep.Compacted {
			t.Errorf("b: %v %+v", err, rep)
		}
	}
	rep, err := a.maintain(ctx, steps{compact: true, trigger: "test"})
	if err != nil || rep.Compacted {
		t.Fatalf("a: %v, compacted %v: want superseded without error", err, rep.Compacted)
	}
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plan.Files() {
		if strings.Contains(f, "/data/") {
			t.Errorf("orphan data file left by the superseded compaction: %s", f)
		}
	}
	h.close()
}

// The sink maintains its dead-letter table too: a storm of dead letters, one commit each, is
// compacted and its snapshots expired, and every dead letter stays readable exactly once.
func TestDeadLetterTableIsMaintained(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(t.TempDir())
	cfg.Stream = "st"
	cfg.FlushInterval = time.Hour
	cfg.Maintenance.Owner = "w1"
	cfg.Maintenance.MaxDeleteFiles = 3
	cfg.Maintenance.MinInterval = 0
	cfg.Maintenance.CheckInterval = 20 * time.Millisecond
	cfg.Maintenance.KeepLast = 3
	cfg.Maintenance.SnapshotRetention = 0
	cfg.Maintenance.ExpireBatch = 2
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	rec := &maintRecorder{}
	s, err := New(cfg, cat, nil, WithMetrics(rec), WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	dlq := s.DeadLetters()
	ident := s.tdl.Ident()
	name := ident[0] + "." + ident[1]
	const n = 24
	for i := range n {
		// Every second one is the same record again (a replay): upserted, not duplicated.
		dl := change.DeadLetter{Stream: "st", Shard: "s0", Seq: fmt.Sprint(100 + i - i%2), Reason: "bad", Raw: []byte{byte(i)}}
		if err := dlq.DeadLetter(ctx, dl); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		compacted, expired := false, false
		rec.mu.Lock()
		for _, r := range rec.reports {
			compacted = compacted || (r.Table == name && r.Compacted)
			expired = expired || (r.Table == name && r.SnapshotsExpired > 0)
		}
		rec.mu.Unlock()
		if compacted && expired {
			tbl, err := cat.LoadTable(ctx, s.tdl.Ident())
			if err == nil && len(tbl.Metadata().Snapshots()) < n {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead-letter table %s was not compacted (%v) and expired (%v) below %d snapshots: reports %+v, failed %v", name, compacted, expired, n, rec.reports, rec.failed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n/2 {
		t.Fatalf("%d dead letters, want %d", len(rows), n/2)
	}
}
