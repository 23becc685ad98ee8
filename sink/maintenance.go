package sink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	iofs "io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
	"go.uber.org/zap"
)

// Table properties and snapshot-summary keys written by maintenance. The lease properties are
// the per-table maintenance lease (design.md, "Maintenance"); watermarks are never touched.
const (
	// LeaseOwnerProperty names the process that holds the table's maintenance lease
	// ("<owner>#<token>").
	LeaseOwnerProperty = "dms2iceberg.maintenance.owner"
	// LeaseUntilProperty is when that lease ends unless renewed (RFC 3339, UTC).
	LeaseUntilProperty = "dms2iceberg.maintenance.until"
	// LastCompactionProperty is when the table was last compacted (RFC 3339, UTC).
	LastCompactionProperty = "dms2iceberg.maintenance.last-compaction"
	// LastOrphanCleanupProperty is when orphan files were last removed (RFC 3339, UTC).
	LastOrphanCleanupProperty = "dms2iceberg.maintenance.last-orphan-cleanup"

	// Snapshot summary of a compaction: a unique id of the run (to recognise a commit whose
	// outcome was unknown), its trigger and the snapshot it read.
	summaryRunKey      = "dms2iceberg.maintenance.run"
	summaryTriggerKey  = "dms2iceberg.maintenance.trigger"
	summaryStartingKey = "dms2iceberg.maintenance.starting-snapshot"
)

var (
	// errNothingToDo tells commit that the newest table needs no change.
	errNothingToDo = errors.New("nothing to do")
	// errAlreadyCommitted tells commit that an earlier attempt whose outcome was unknown landed.
	errAlreadyCommitted = errors.New("already committed")
	// errLeaseLost stops a run when this process no longer holds the table's lease.
	errLeaseLost = errors.New("maintenance lease lost")
	// errSuperseded: another compaction rewrote some of this one's input files first.
	errSuperseded = errors.New("superseded by another compaction")
)

// counts are a snapshot's totals, read from its summary.
type counts struct {
	dataFiles, deleteFiles int
	deleteRows, records    int64
}

func summaryCounts(s *table.Snapshot) counts {
	if s == nil || s.Summary == nil {
		return counts{}
	}
	p := s.Summary.Properties
	return counts{
		dataFiles:   p.GetInt("total-data-files", 0),
		deleteFiles: p.GetInt("total-delete-files", 0),
		deleteRows:  p.GetInt64("total-equality-deletes", 0),
		records:     p.GetInt64("total-records", 0),
	}
}

// tableState is what maintenance measures before deciding what to do.
type tableState struct {
	counts
	snapshots, expirable int
	metaBytes            int64
	manifests            int
	leaseOwner           string
	leaseUntil           time.Time
	lastCompaction       time.Time
	lastOrphans          time.Time
}

// steps is what a run does.
type steps struct {
	compact, expire, manifests, orphans bool
	trigger                             string
}

func (s steps) any() bool { return s.compact || s.expire || s.manifests || s.orphans }

func (s *steps) why(trigger string) {
	if s.trigger == "" {
		s.trigger = trigger
	}
}

// maintainer maintains one table beside its writer: it measures the table after the writer's
// commits and every check interval, and when a threshold is crossed (and it holds the table's
// lease) compacts, expires snapshots, rewrites manifests and removes orphan files. Its commits
// are staged on the newest table and retried after losing to other commits, so the writer never
// waits for it (design.md, "Maintenance").
type maintainer struct {
	cat         catalog.Catalog
	ident       table.Identifier
	name        string
	cfg         MaintenanceConfig
	owner       string // cfg.Owner plus a token unique to this process
	log         *zap.Logger
	metrics     MaintenanceMetrics
	ignoreLease bool // the maintain command's --ignore-lease

	kick   chan struct{}
	latest atomic.Pointer[table.Table] // the writer's newest committed table, not yet measured

	// Handoff of maintenance commits to the writer (zero handoffWait: none, as for the maintain
	// command). A job waits in slot for the writer's next commit, at most handoffWait.
	handoffWait  time.Duration
	slot         atomic.Pointer[commitJob]
	writerCommit atomic.Int64 // unix nanoseconds of the writer's last commit

	// Owned by the goroutine that runs maintenance.
	leaseEnd    atomic.Int64 // unix nanoseconds: the lease this process validly holds ends then (0: none)
	base        counts       // what the last compaction left (and could not remove)
	next        time.Time    // no compaction before (min interval, failure backoff)
	failures    int
	created     time.Time
	lastRun     time.Time
	lastFull    time.Time
	metaBytes   int64
	manifests   int
	metaWarned  time.Time
	heldByOther string
	structural  time.Time // when the metadata-size or manifest trigger last fired
	pauseUntil  time.Time // after a failed run, nothing runs before
	pauses      int

	// For tests and the benchmark.
	busy         atomic.Bool
	runs         atomic.Int64
	beforeCommit func(step string, attempt int) // called before each maintenance commit
	afterExecute func()                         // called after compaction wrote its files
}

func newMaintainer(cat catalog.Catalog, ident table.Identifier, name string, cfg MaintenanceConfig,
	log *zap.Logger, metrics MaintenanceMetrics) *maintainer {
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	return &maintainer{cat: cat, ident: ident, name: name, cfg: cfg, owner: cfg.Owner + "#" + hex.EncodeToString(tok[:]),
		log: log.Named("maintenance"), metrics: metrics, kick: make(chan struct{}, 1), created: time.Now(), lastRun: time.Now(),
		metaBytes: -1, manifests: -1}
}

// afterCommit is called by the writer, on its goroutine, after each of its commits, with the
// committed table. It runs the maintenance commit waiting for the writer, if any, on that table
// (so the two never conflict) and passes the result to use; then it hands the newest table to
// the maintainer and wakes it. Without a waiting commit it does not block. A nil maintainer
// (maintenance disabled) ignores the call.
func (m *maintainer) afterCommit(ctx context.Context, tbl *table.Table, use func(*table.Table) error) {
	if m == nil || tbl == nil {
		return
	}
	m.writerCommit.Store(time.Now().UnixNano())
	if job := m.slot.Swap(nil); job != nil {
		res := m.execute(ctx, job, tbl)
		if res.tbl != nil {
			if err := use(res.tbl); err == nil {
				tbl = res.tbl
			}
		}
		job.done <- res
	}
	m.latest.Store(tbl)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// run measures and maintains the table until ctx ends. Maintenance failures are logged and
// counted, never returned: they must not stop ingestion.
func (m *maintainer) run(ctx context.Context) error {
	tick := time.NewTicker(m.cfg.CheckInterval)
	defer tick.Stop()
	defer m.release()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
		case <-tick.C:
		}
		m.check(ctx)
	}
}

// check measures the table and runs whatever is due.
func (m *maintainer) check(ctx context.Context) {
	tbl := m.latest.Swap(nil)
	if tbl == nil {
		t, err := m.cat.LoadTable(ctx, m.ident)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, catalog.ErrNoSuchTable) {
				m.log.Debug("cannot load table to measure it", zap.Error(err))
			}
			return
		}
		tbl = t
	}
	now := time.Now()
	st := m.measure(ctx, tbl, now, now.Sub(m.lastFull) >= m.cfg.CheckInterval)
	m.metrics.MaintenanceChecked(m.status(st, now))
	if now.Before(m.pauseUntil) {
		return
	}
	s := m.due(st, now)
	if !s.any() {
		return
	}
	if !m.lease(ctx, tbl) {
		return
	}
	_, err := m.maintain(ctx, s)
	if err == nil || errors.Is(err, errLeaseLost) {
		m.pauses = 0
		return
	}
	if ctx.Err() == nil {
		// Back off before the next run, so that a step failing for good (say, a table with
		// gc.enabled=false) does not run after every commit.
		m.pauses++
		d := min(max(m.cfg.MinInterval, 5*time.Second)<<min(m.pauses-1, 7), 10*time.Minute)
		m.pauseUntil = time.Now().Add(d)
		m.log.Warn("maintenance failed", zap.String("trigger", s.trigger), zap.Duration("next_try_in", d), zap.Error(err))
	}
}

func (m *maintainer) status(st tableState, now time.Time) MaintenanceStatus {
	owner := st.leaseOwner
	if !st.leaseUntil.After(now) {
		owner = ""
	}
	return MaintenanceStatus{Table: m.name, DeleteFiles: st.deleteFiles, DataFiles: st.dataFiles,
		DeleteRows: st.deleteRows, Records: st.records,
		NewDataFiles: max(0, st.dataFiles-m.base.dataFiles), NewDeleteFiles: max(0, st.deleteFiles-m.base.deleteFiles),
		Snapshots: st.snapshots, Expirable: st.expirable, MetadataBytes: st.metaBytes, Manifests: st.manifests,
		LeaseHeld: m.ignoreLease || m.holds(now), LeaseOwner: owner, LastCompaction: st.lastCompaction}
}

// measure reads the table's state: totals from the current snapshot's summary and lease and
// history from the metadata (no I/O); with full, also the metadata file's size and the number of
// manifests (one stat and one manifest-list read).
func (m *maintainer) measure(ctx context.Context, tbl *table.Table, now time.Time, full bool) tableState {
	meta := tbl.Metadata()
	props := tbl.Properties()
	st := tableState{counts: summaryCounts(tbl.CurrentSnapshot()), snapshots: len(meta.Snapshots()),
		expirable: expirable(meta, m.cfg.KeepLast, m.cfg.SnapshotRetention, now)}
	st.leaseOwner, st.leaseUntil = readLease(props)
	st.lastCompaction = parseTime(props[LastCompactionProperty])
	st.lastOrphans = parseTime(props[LastOrphanCleanupProperty])
	if full {
		m.lastFull = now
		m.metaBytes, m.manifests = fileStats(ctx, tbl)
	}
	st.metaBytes, st.manifests = m.metaBytes, m.manifests
	return st
}

// fileStats returns the size of the table's metadata file and the number of manifests of its
// current snapshot (-1 for what cannot be read).
func fileStats(ctx context.Context, tbl *table.Table) (int64, int) {
	size, n := int64(-1), -1
	fs, err := tbl.FS(ctx)
	if err != nil {
		return size, n
	}
	if f, err := fs.Open(tbl.MetadataLocation()); err == nil {
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		_ = f.Close()
	}
	if snap := tbl.CurrentSnapshot(); snap == nil {
		n = 0
	} else if mf, err := snap.Manifests(fs); err == nil {
		n = len(mf)
	}
	return size, n
}

// expirable counts the snapshots ExpireSnapshots would remove with these settings: the main
// branch keeps its newest keepLast ancestors and every ancestor younger than retention, up to the
// first one that is neither; snapshots outside the branch are kept while younger than retention.
func expirable(meta table.Metadata, keepLast int, retention time.Duration, now time.Time) int {
	cutoff := now.Add(-retention).UnixMilli()
	keep := make(map[int64]bool)
	for name, ref := range meta.Refs() {
		keep[ref.SnapshotID] = true
		if name != table.MainBranch {
			continue
		}
		for i, s := range table.AncestorsOf(ref.SnapshotID, meta.SnapshotByID) {
			if s.TimestampMs < cutoff && i >= keepLast {
				break
			}
			keep[s.SnapshotID] = true
		}
	}
	n := 0
	for _, s := range meta.Snapshots() {
		if !keep[s.SnapshotID] && s.TimestampMs < cutoff {
			n++
		}
	}
	return n
}

// due decides what to run from the measured state.
func (m *maintainer) due(st tableState, now time.Time) steps {
	var s steps
	c := m.cfg
	interval := now.Sub(m.lastRun) >= c.Interval
	if !now.Before(m.next) {
		switch {
		case st.deleteFiles-m.base.deleteFiles >= c.MaxDeleteFiles:
			s.compact = true
			s.why("delete-files")
		case st.deleteRows-m.base.deleteRows >= c.MaxDeleteRows:
			s.compact = true
			s.why("delete-rows")
		case st.dataFiles-m.base.dataFiles >= c.MaxSmallFiles:
			s.compact = true
			s.why("small-files")
		case interval && (st.deleteFiles > m.base.deleteFiles || st.dataFiles > m.base.dataFiles+1):
			s.compact = true
			s.why("interval")
		}
	}
	if st.expirable >= c.ExpireBatch {
		s.expire = true
		s.why("snapshots")
	}
	// The size and manifest triggers stay true until a run brings them down, which a rewrite
	// cannot always do: they fire at most once per check interval.
	structural := now.Sub(m.structural) >= c.CheckInterval
	if structural && st.metaBytes > c.MaxMetadataBytes {
		m.structural = now
		s.expire = st.expirable > 0
		s.manifests = true
		s.why("metadata-size")
		if st.expirable == 0 && now.Sub(m.metaWarned) >= c.Interval {
			m.metaWarned = now
			m.log.Warn("metadata file is larger than max_metadata_bytes and no snapshot can be expired yet: snapshot_retention is long for this commit rate",
				zap.Int64("metadata_bytes", st.metaBytes), zap.Int("snapshots", st.snapshots))
		}
	}
	if structural && st.manifests > c.MaxManifests {
		m.structural = now
		s.manifests = true
		s.why("manifests")
	}
	if interval && st.expirable > 0 {
		s.expire = true
		s.why("interval")
	}
	lastOrphans := st.lastOrphans
	if lastOrphans.IsZero() {
		// Never cleaned: first an hour after this process started, not in a burst at startup.
		lastOrphans = m.created.Add(min(time.Hour, c.OrphanInterval) - c.OrphanInterval)
	}
	if c.OrphanInterval > 0 && now.Sub(lastOrphans) >= c.OrphanInterval {
		s.orphans = true
		s.why("orphans")
	}
	return s
}

func readLease(p iceberg.Properties) (string, time.Time) {
	return p[LeaseOwnerProperty], parseTime(p[LeaseUntilProperty])
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// holds reports whether this process holds a lease that is not about to end. The margin covers
// clock skew between workers and the time a commit takes.
func (m *maintainer) holds(now time.Time) bool {
	return m.leaseUntil().After(now.Add(m.cfg.LeaseDuration / 10))
}

// lease reports whether this process may maintain the table now, acquiring or renewing the
// lease when needed. tbl is a recent version of the table.
//
// The lease lives in two table properties. Catalog commits check requirements on snapshots and
// schemas, not on properties: a property change is applied on top of whatever is current. So an
// acquisition is validated after its commit: every table version between the one it read and
// its own must not show a live lease other than the one it read; otherwise another worker
// acquired the lease in between and this one backs off (its record is then treated as a
// foreign lease until it ends). The holder renews in every maintenance commit and needs no
// validation while its lease has not ended.
func (m *maintainer) lease(ctx context.Context, tbl *table.Table) bool {
	if m.ignoreLease {
		return true
	}
	now := time.Now()
	if m.holds(now) && m.leaseUntil().Sub(now) > m.cfg.LeaseDuration/2 {
		return true
	}
	if !m.holds(now) && m.foreign(tbl.Properties(), now) {
		return false
	}
	ok, err := m.acquire(ctx)
	if err != nil && ctx.Err() == nil {
		m.metrics.MaintenanceFailed(m.name, "lease")
		m.log.Warn("cannot acquire the maintenance lease", zap.Error(err))
	}
	return ok
}

// foreign reports a live lease in props that is not the one this process holds.
func (m *maintainer) foreign(props iceberg.Properties, now time.Time) bool {
	owner, until := readLease(props)
	if owner == "" || !until.After(now) || (owner == m.owner && until.Equal(m.leaseUntil())) {
		return false
	}
	if owner != m.heldByOther {
		m.heldByOther = owner
		m.log.Debug("maintenance lease held by another worker", zap.String("owner", owner), zap.Time("until", until))
	}
	return true
}

func (m *maintainer) leaseUntil() time.Time {
	if n := m.leaseEnd.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (m *maintainer) setLease(until time.Time) {
	if until.IsZero() {
		m.leaseEnd.Store(0)
		return
	}
	m.leaseEnd.Store(until.UnixNano())
}

// renewWhileRunning keeps the lease renewed, with properties-only commits, while a long run
// (a big compaction) is in progress, until stop is closed.
func (m *maintainer) renewWhileRunning(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(m.cfg.LeaseDuration / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		if !m.holds(now) || m.leaseUntil().Sub(now) > m.cfg.LeaseDuration*3/4 {
			continue
		}
		tbl, err := m.cat.LoadTable(ctx, m.ident)
		if err != nil {
			continue
		}
		until := now.Add(m.cfg.LeaseDuration)
		txn := tbl.NewTransaction()
		if err := txn.SetProperties(m.leaseProps(until)); err != nil {
			continue
		}
		if _, err := txn.Commit(ctx); err != nil {
			m.log.Debug("cannot renew the maintenance lease", zap.Error(err))
			continue
		}
		if m.holds(time.Now()) { // not lost meanwhile (then the record we wrote is foreign to us)
			m.setLease(until)
		}
	}
}

func (m *maintainer) leaseProps(until time.Time) iceberg.Properties {
	return iceberg.Properties{LeaseOwnerProperty: m.owner, LeaseUntilProperty: formatTime(until)}
}

// acquire acquires or renews the lease with a properties-only commit.
func (m *maintainer) acquire(ctx context.Context) (bool, error) {
	base, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return false, err
	}
	return m.acquireOn(ctx, base, time.Now())
}

// acquireOn acquires or renews the lease, deciding on base as read at now.
func (m *maintainer) acquireOn(ctx context.Context, base *table.Table, now time.Time) (bool, error) {
	renewal := m.holds(now)
	if !renewal && m.foreign(base.Properties(), now) {
		return false, nil
	}
	until := now.Add(m.cfg.LeaseDuration)
	txn := base.NewTransaction()
	if err := txn.SetProperties(m.leaseProps(until)); err != nil {
		return false, err
	}
	committed, err := txn.Commit(ctx)
	if err != nil && committed == nil {
		return false, err
	}
	if !renewal {
		ok, err := validAcquisition(ctx, base, committed, now)
		if !ok {
			m.log.Info("maintenance lease acquisition raced with another worker; backing off", zap.Error(err))
			return false, nil
		}
		m.log.Info("maintenance lease acquired", zap.String("owner", m.owner), zap.Time("until", until))
	}
	m.setLease(until)
	m.heldByOther = ""
	return true, nil
}

// validAcquisition checks that no table version between base (read before deciding to acquire
// at now) and committed (the acquisition) recorded a live lease other than base's.
func validAcquisition(ctx context.Context, base, committed *table.Table, now time.Time) (bool, error) {
	entries := slices.Collect(committed.Metadata().PreviousFiles())
	idx := slices.IndexFunc(entries, func(e table.MetadataLogEntry) bool { return e.MetadataFile == base.MetadataLocation() })
	if idx < 0 {
		return false, errors.New("the version the acquisition read is no longer in the metadata log")
	}
	bo, bu := readLease(base.Properties())
	fs, err := committed.FS(ctx)
	if err != nil {
		return false, err
	}
	for _, e := range entries[idx+1:] {
		f, err := fs.Open(e.MetadataFile)
		if err != nil {
			return false, err
		}
		meta, err := table.ParseMetadata(f)
		_ = f.Close()
		if err != nil {
			return false, fmt.Errorf("read %s: %w", e.MetadataFile, err)
		}
		o, u := readLease(meta.Properties())
		if o != "" && u.After(now) && (o != bo || !u.Equal(bu)) {
			return false, fmt.Errorf("%s acquired it concurrently", o)
		}
	}
	return true, nil
}

// release ends a held lease early (at shutdown), so another worker can take over at once.
func (m *maintainer) release() {
	if m.ignoreLease || !m.holds(time.Now()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tbl, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return
	}
	txn := tbl.NewTransaction()
	if err := txn.SetProperties(m.leaseProps(time.Now())); err != nil {
		return
	}
	if _, err := txn.Commit(ctx); err != nil {
		m.log.Debug("cannot release the maintenance lease", zap.Error(err))
		return
	}
	m.setLease(time.Time{})
}

// handoffWait is how long a maintenance commit waits for the writer to commit (and run it right
// after) before running by itself: two flush intervals, at most 10s.
func handoffWait(flushInterval time.Duration) time.Duration {
	return min(2*flushInterval, 10*time.Second)
}

// commitJob is one maintenance commit: stage on a table, add props (lease renewal included),
// commit.
type commitJob struct {
	step    string
	props   iceberg.Properties
	stage   func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error
	attempt int
	done    chan jobResult // buffered: the executor never blocks on it
}

type jobResult struct {
	tbl  *table.Table // the committed table; nil when nothing was committed
	head *table.Table // the table the job was staged on
	sent bool         // a commit request was sent (false: staging failed)
	err  error
}

// execute stages job on head (loaded from the catalog when nil) and commits it. It touches no
// maintainer state, so the writer may run it.
func (m *maintainer) execute(ctx context.Context, job *commitJob, head *table.Table) jobResult {
	if head == nil {
		var err error
		if head, err = m.cat.LoadTable(ctx, m.ident); err != nil {
			return jobResult{err: err, sent: true} // retryable, like a lost commit
		}
	}
	txn := head.NewTransaction()
	if err := job.stage(ctx, txn, head, job.attempt); err != nil {
		return jobResult{head: head, err: err}
	}
	if len(job.props) > 0 {
		if err := txn.SetProperties(job.props); err != nil {
			return jobResult{head: head, err: fmt.Errorf("stage properties: %w", err)}
		}
	}
	if m.beforeCommit != nil {
		m.beforeCommit(job.step, job.attempt)
	}
	tbl, err := txn.Commit(ctx)
	if tbl != nil {
		if err != nil {
			m.log.Warn("cleanup after a maintenance commit failed", zap.String("step", job.step), zap.Error(err))
		}
		return jobResult{tbl: tbl, head: head, sent: true}
	}
	return jobResult{head: head, sent: true, err: err}
}

// runJob runs a commit job between two commits of the table's writer when the writer is
// committing (it then never conflicts with the writer and the writer continues from the result),
// and here, on the newest table, when the writer is quiet or does not take the job in time.
func (m *maintainer) runJob(ctx context.Context, job *commitJob) jobResult {
	active := time.Since(time.Unix(0, m.writerCommit.Load())) < m.handoffWait
	if m.handoffWait <= 0 || !active {
		return m.execute(ctx, job, nil)
	}
	m.slot.Store(job)
	timer := time.NewTimer(m.handoffWait)
	defer timer.Stop()
	select {
	case res := <-job.done:
		return res
	case <-timer.C:
	case <-ctx.Done():
	}
	if !m.slot.CompareAndSwap(job, nil) {
		return <-job.done // the writer took it
	}
	if ctx.Err() != nil {
		return jobResult{err: ctx.Err()}
	}
	return m.execute(ctx, job, nil)
}

// commit stages a maintenance change on the newest table, renews the lease in the same
// transaction and commits, reloading and restaging after losing to another commit. stage may
// return errNothingToDo or errAlreadyCommitted; commit then returns that error. It returns the
// committed table, the table the last attempt was staged on, and the number of commit requests
// sent.
func (m *maintainer) commit(ctx context.Context, step string, props iceberg.Properties,
	stage func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error) (*table.Table, *table.Table, int, error) {
	var last error
	sent := 0
	for attempt := 0; attempt <= m.cfg.CommitRetries; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt-1)); err != nil {
				return nil, nil, sent, err
			}
		}
		now := time.Now()
		if !m.ignoreLease && !m.holds(now) {
			return nil, nil, sent, errLeaseLost
		}
		p := maps.Clone(props)
		if p == nil {
			p = iceberg.Properties{}
		}
		until := now.Add(m.cfg.LeaseDuration)
		if !m.ignoreLease {
			maps.Copy(p, m.leaseProps(until))
		}
		res := m.runJob(ctx, &commitJob{step: step, props: p, stage: stage, attempt: attempt, done: make(chan jobResult, 1)})
		if res.sent {
			sent++
		}
		if res.err == nil {
			if !m.ignoreLease {
				m.setLease(until)
			}
			return res.tbl, res.head, sent, nil
		}
		if !res.sent || ctx.Err() != nil {
			return nil, res.head, sent, res.err
		}
		last = res.err
		m.log.Info("maintenance commit lost to another commit; restaging on the newest table",
			zap.String("step", step), zap.Int("attempt", attempt+1), zap.Error(res.err))
	}
	return nil, nil, sent, fmt.Errorf("%s: giving up after %d attempts: %w", step, m.cfg.CommitRetries+1, last)
}

// maintain runs the given steps once and reports what they did.
func (m *maintainer) maintain(ctx context.Context, s steps) (MaintenanceReport, error) {
	m.busy.Store(true)
	defer m.busy.Store(false)
	defer m.runs.Add(1)
	if !m.ignoreLease {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			m.renewWhileRunning(ctx, stop)
		}()
		defer func() { close(stop); <-done }()
	}
	start := time.Now()
	rep := MaintenanceReport{Table: m.name, Trigger: s.trigger, Started: start,
		MetadataBytesBefore: -1, MetadataBytesAfter: -1, ManifestsBefore: -1, ManifestsAfter: -1}
	if head, err := m.cat.LoadTable(ctx, m.ident); err == nil {
		c := summaryCounts(head.CurrentSnapshot())
		rep.DataFilesBefore, rep.DeleteFilesBefore = c.dataFiles, c.deleteFiles
		rep.SnapshotsBefore = len(head.Metadata().Snapshots())
		rep.MetadataBytesBefore, rep.ManifestsBefore = fileStats(ctx, head)
	} else {
		return rep, fmt.Errorf("load %s: %w", m.name, err)
	}
	var errs []error
	fail := func(step string, err error) bool {
		if err == nil {
			return false
		}
		rep.Failed = append(rep.Failed, step)
		errs = append(errs, fmt.Errorf("%s: %w", step, err))
		if ctx.Err() == nil {
			m.metrics.MaintenanceFailed(m.name, step)
		}
		return errors.Is(err, errLeaseLost) || ctx.Err() != nil
	}
	stop := false
	if s.compact {
		stop = fail("compact", m.compact(ctx, &rep, s.trigger))
	}
	if !stop && (s.expire || rep.Compacted) {
		stop = fail("expire", m.expire(ctx, &rep))
	}
	if !stop && (s.manifests || rep.Compacted) {
		stop = fail("manifests", m.rewriteManifests(ctx, &rep))
	}
	if !stop && s.orphans {
		fail("orphans", m.removeOrphans(ctx, &rep))
	}
	cctx := context.WithoutCancel(ctx)
	if head, err := m.cat.LoadTable(cctx, m.ident); err == nil {
		c := summaryCounts(head.CurrentSnapshot())
		rep.DataFilesAfter, rep.DeleteFilesAfter = c.dataFiles, c.deleteFiles
		rep.SnapshotsAfter = len(head.Metadata().Snapshots())
		rep.MetadataBytesAfter, rep.ManifestsAfter = fileStats(cctx, head)
		m.metaBytes, m.manifests, m.lastFull = rep.MetadataBytesAfter, rep.ManifestsAfter, time.Now()
	}
	rep.Took = time.Since(start)
	m.lastRun = time.Now()
	if rep.Changed() {
		m.metrics.Maintained(rep)
		m.log.Info("maintained", zap.String("trigger", rep.Trigger), zap.Duration("took", rep.Took),
			zap.Int("data_files_before", rep.DataFilesBefore), zap.Int("data_files_after", rep.DataFilesAfter),
			zap.Int("delete_files_before", rep.DeleteFilesBefore), zap.Int("delete_files_after", rep.DeleteFilesAfter),
			zap.Int("snapshots_before", rep.SnapshotsBefore), zap.Int("snapshots_after", rep.SnapshotsAfter),
			zap.Int("manifests_before", rep.ManifestsBefore), zap.Int("manifests_after", rep.ManifestsAfter),
			zap.Int64("metadata_bytes", rep.MetadataBytesAfter), zap.Strings("failed", rep.Failed))
	}
	return rep, errors.Join(errs...)
}

// compactionConfig is the planner's configuration: every data file with a delete applying to it
// or below 75% of the target size is a candidate, alone or not, so that every equality delete the
// rewrite applies becomes dead and is dropped.
func (m *maintainer) compactionConfig(tbl *table.Table) compaction.Config {
	c := compaction.DefaultConfig()
	target := m.cfg.TargetFileSize
	if target <= 0 {
		target = tbl.Properties().GetInt64(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault)
	}
	c.TargetFileSizeBytes = target
	c.MinFileSizeBytes = target * 3 / 4
	c.MaxFileSizeBytes = target * 9 / 5
	c.MinInputFiles = 1
	c.DeleteFileThreshold = 1
	return c
}

// compact rewrites the data files that deletes apply to (and small ones) with the deletes
// applied, and drops the delete files that no surviving data file needs any more.
//
// The heavy part (reading and writing data) runs against the snapshot S current when it starts,
// while the writer keeps committing. The rewrite is then staged on the newest table with the
// rewritten files' data sequence number set to S's: equality deletes committed after S have
// higher sequence numbers, so they still apply to the rewritten rows, and the deletes it removes
// (all at or below S) never applied to anything newer than S. Watermark properties are not
// touched: the commit only adds the rewrite snapshot and the lease properties.
func (m *maintainer) compact(ctx context.Context, rep *MaintenanceReport, trigger string) error {
	start := time.Now()
	src, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return err
	}
	snap := src.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	before := summaryCounts(snap)
	plan, err := compaction.Analyze(ctx, src, m.compactionConfig(src))
	if err != nil {
		return m.compactionFailed(err)
	}
	var groups []table.CompactionTaskGroup
	rewritten := make(map[string]struct{})
	for _, g := range plan.Groups {
		if len(g.Tasks) == 1 && len(g.Tasks[0].EqualityDeleteFiles)+len(g.Tasks[0].DeleteFiles)+len(g.Tasks[0].DeletionVectorFiles) == 0 {
			continue // one file without deletes: rewriting it gains nothing
		}
		groups = append(groups, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes})
		for _, t := range g.Tasks {
			rewritten[t.File.FilePath()] = struct{}{}
		}
	}
	fs, err := src.FS(ctx)
	if err != nil {
		return m.compactionFailed(err)
	}
	if len(groups) == 0 {
		// Nothing to rewrite; still drop the delete files that apply to no live data file (for
		// example the deletes a load writes for its own keys). An impossible path makes every
		// data file a survivor.
		rewritten[""] = struct{}{}
	}
	dead, err := compaction.CollectDeadEqualityDeletesWithSpecs(ctx, fs, src.Metadata(), snap, rewritten)
	if err != nil {
		return m.compactionFailed(fmt.Errorf("collect dead equality deletes: %w", err))
	}
	if len(groups) == 0 && len(dead) == 0 {
		m.base = before
		m.next = time.Now().Add(m.cfg.MinInterval)
		m.log.Debug("nothing to compact", zap.String("trigger", trigger))
		return nil
	}
	var results []table.CompactionGroupResult
	cleanup := func() {
		for _, r := range results {
			for _, df := range r.NewDataFiles {
				_ = fs.Remove(df.FilePath())
			}
		}
	}
	opts := []table.CompactionGroupOption{table.WithCompactionScanConcurrency(m.cfg.Workers)}
	if m.cfg.TargetFileSize > 0 {
		opts = append(opts, table.WithCompactionTargetFileSize(m.cfg.TargetFileSize))
	}
	for _, g := range groups {
		r, err := table.ExecuteCompactionGroup(ctx, src, g, opts...)
		results = append(results, r)
		if err != nil {
			cleanup()
			return m.compactionFailed(err)
		}
	}
	if m.afterExecute != nil {
		m.afterExecute()
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	id := hex.EncodeToString(tok[:])
	summary := iceberg.Properties{summaryRunKey: id, summaryTriggerKey: trigger,
		summaryStartingKey: strconv.FormatInt(snap.SnapshotID, 10)}
	var removedPos []iceberg.DataFile
	tbl, _, sent, err := m.commit(ctx, "compact", iceberg.Properties{LastCompactionProperty: formatTime(time.Now())},
		func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error {
			if attempt > 0 && landed(head, id, snap.SequenceNumber) {
				return errAlreadyCommitted
			}
			rw := txn.NewRewrite(summary)
			for _, r := range results {
				rw.ApplyResult(r)
			}
			for _, df := range dead {
				rw.DeleteFile(df)
			}
			if len(results) > 0 {
				rw.DataSequenceNumber(snap.SequenceNumber)
			}
			err := rw.Commit(ctx)
			if err != nil && inputsGone(ctx, head, rewritten, dead) {
				return errSuperseded
			}
			return err
		})
	if errors.Is(err, errAlreadyCommitted) {
		tbl, err = m.cat.LoadTable(ctx, m.ident)
	}
	if errors.Is(err, errSuperseded) {
		// Not landed (checked before staging): the new files are referenced by nothing.
		cleanup()
		m.log.Info("compaction superseded: another one rewrote its files first", zap.String("trigger", trigger))
		return nil
	}
	if err != nil {
		if sent == 0 {
			cleanup() // never sent: the new files are ours alone
		}
		return m.compactionFailed(err)
	}
	for _, r := range results {
		rep.DataFilesRewritten += len(r.OldDataFiles)
		rep.DataFilesWritten += len(r.NewDataFiles)
		rep.BytesBefore += r.BytesBefore
		rep.BytesAfter += r.BytesAfter
		removedPos = append(removedPos, r.SafePosDeletes...)
	}
	rep.DeleteFilesRemoved = len(dead) + len(removedPos)
	for _, df := range dead {
		rep.DeleteRowsRemoved += df.Count()
	}
	rep.Compacted = true
	rep.CompactionAttempts = max(sent, 1)
	rep.CompactionTook = time.Since(start)
	m.base = counts{dataFiles: before.dataFiles - rep.DataFilesRewritten + rep.DataFilesWritten,
		deleteFiles: before.deleteFiles - rep.DeleteFilesRemoved, deleteRows: before.deleteRows - rep.DeleteRowsRemoved}
	m.failures = 0
	m.next = time.Now().Add(m.cfg.MinInterval)
	m.log.Info("compacted", zap.String("trigger", trigger), zap.Time("started", start),
		zap.Duration("took", rep.CompactionTook), zap.Int("attempts", rep.CompactionAttempts),
		zap.Int("data_files_rewritten", rep.DataFilesRewritten), zap.Int("data_files_written", rep.DataFilesWritten),
		zap.Int("delete_files_removed", rep.DeleteFilesRemoved), zap.Int64("delete_rows_removed", rep.DeleteRowsRemoved),
		zap.Int64("bytes_before", rep.BytesBefore), zap.Int64("bytes_after", rep.BytesAfter),
		zap.Int64("starting_snapshot", snap.SnapshotID), zap.Int64("snapshot", snapshotID(tbl)))
	return nil
}

// inputsGone reports whether some of a compaction's input files (data files it rewrote, delete
// files it drops) are no longer live in head: another compaction replaced them.
func inputsGone(ctx context.Context, head *table.Table, rewritten map[string]struct{}, dead []iceberg.DataFile) bool {
	snap := head.CurrentSnapshot()
	fs, err := head.FS(ctx)
	if snap == nil || err != nil {
		return false
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return false
	}
	want := make(map[string]bool, len(rewritten)+len(dead))
	for p := range rewritten {
		if p != "" {
			want[p] = true
		}
	}
	for _, df := range dead {
		want[df.FilePath()] = true
	}
	live := 0
	for _, mf := range mans {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return false
			}
			if want[e.DataFile().FilePath()] {
				live++
			}
		}
	}
	return live < len(want)
}

// compactionFailed backs off before the next compaction of the table.
func (m *maintainer) compactionFailed(err error) error {
	m.failures++
	d := max(m.cfg.MinInterval, 5*time.Second) << min(m.failures-1, 6)
	m.next = time.Now().Add(min(d, 10*time.Minute))
	return err
}

// landed reports whether a compaction with this run id is an ancestor of the table's current
// snapshot (searching back to the sequence number it started from).
func landed(tbl *table.Table, id string, from int64) bool {
	meta := tbl.Metadata()
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return false
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
		if s.SequenceNumber <= from {
			return false
		}
		if s.Summary != nil && s.Summary.Properties[summaryRunKey] == id {
			return true
		}
	}
	return false
}

// expire removes the snapshots outside the retention window, then the files only they
// referenced. The file removal runs here, after the commit, not inside it: the commit may run on
// the writer's goroutine.
func (m *maintainer) expire(ctx context.Context, rep *MaintenanceReport) error {
	tbl, pre, _, err := m.commit(ctx, "expire", nil, func(_ context.Context, txn *table.Transaction, head *table.Table, _ int) error {
		if expirable(head.Metadata(), m.cfg.KeepLast, m.cfg.SnapshotRetention, time.Now()) == 0 {
			return errNothingToDo
		}
		return txn.ExpireSnapshots(table.WithRetainLast(m.cfg.KeepLast), table.WithOlderThan(m.cfg.SnapshotRetention),
			table.WithPostCommit(false))
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return err
	}
	kept := make(map[int64]bool)
	for _, s := range tbl.Metadata().Snapshots() {
		kept[s.SnapshotID] = true
	}
	var ids []int64
	for _, s := range pre.Metadata().Snapshots() {
		if !kept[s.SnapshotID] {
			ids = append(ids, s.SnapshotID)
		}
	}
	rep.SnapshotsExpired += len(ids)
	if err := table.NewRemoveSnapshotsUpdate(ids, true).PostCommit(ctx, pre, tbl); err != nil && !onlyNotExist(err) {
		m.log.Warn("removing the files of expired snapshots failed (orphan cleanup will remove them)", zap.Error(err))
	}
	m.log.Info("expired snapshots", zap.Int("expired", len(ids)), zap.Int("left", len(kept)))
	return nil
}

// onlyNotExist reports an error made only of "file does not exist" errors: the file removal after
// expiry lists the files a rewrite removed (DELETED manifest entries) again when the snapshot
// holding that entry expires, after an earlier expiry already removed them.
func onlyNotExist(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyNotExist(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, iofs.ErrNotExist)
}

// rewriteManifests merges the current snapshot's data manifests (every commit adds one).
func (m *maintainer) rewriteManifests(ctx context.Context, rep *MaintenanceReport) error {
	var res *table.RewriteManifestsResult
	_, _, _, err := m.commit(ctx, "manifests", nil, func(ctx context.Context, txn *table.Transaction, _ *table.Table, _ int) error {
		r, err := txn.RewriteManifests(ctx)
		if err != nil {
			return err
		}
		if r.IsNoOp() {
			return errNothingToDo
		}
		res = r
		return nil
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return err
	}
	rep.ManifestsRewritten += len(res.RewrittenManifests)
	rep.ManifestsAdded += len(res.AddedManifests)
	m.log.Info("rewrote manifests", zap.Int("rewritten", len(res.RewrittenManifests)), zap.Int("added", len(res.AddedManifests)))
	return nil
}

// removeOrphans deletes files under the table's location that no metadata references and that
// are older than OrphanMinAge (files being written are younger), then records the time.
func (m *maintainer) removeOrphans(ctx context.Context, rep *MaintenanceReport) error {
	tbl, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return err
	}
	res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(m.cfg.OrphanMinAge))
	if err != nil {
		return fmt.Errorf("orphan cleanup: %w", err)
	}
	rep.OrphansRemoved += len(res.DeletedFiles)
	rep.OrphanBytes += res.TotalSizeBytes
	if len(res.DeletedFiles) > 0 {
		m.log.Info("removed orphan files", zap.Int("files", len(res.DeletedFiles)), zap.Int64("bytes", res.TotalSizeBytes))
	}
	_, _, _, err = m.commit(ctx, "orphans", iceberg.Properties{LastOrphanCleanupProperty: formatTime(time.Now())},
		func(context.Context, *table.Transaction, *table.Table, int) error { return nil })
	return err
}

// MaintainOptions tune an on-demand maintenance run.
type MaintainOptions struct {
	// Log receives the run's log lines. Default: none.
	Log *zap.Logger
	// Metrics receives the run's report and failures. Default: none.
	Metrics MaintenanceMetrics
	// IgnoreLease runs even while another worker holds the table's lease, and leaves the lease
	// alone. Safe for the data (a maintenance commit that loses a race is restaged or fails), but
	// it may duplicate work.
	IgnoreLease bool
	// SkipOrphans leaves orphan files alone.
	SkipOrphans bool
	// BeforeCommit, for tests, is called before each maintenance commit with the step
	// ("compact", "expire", "manifests", "orphans") and the attempt (0 first), after staging:
	// a commit that lands meanwhile makes the attempt lose and be restaged.
	BeforeCommit func(step string, attempt int)
}

// ErrLeaseHeld is returned by MaintainTable when another worker holds the table's lease.
var ErrLeaseHeld = errors.New("maintenance lease held by another worker")

// MaintainTable runs every maintenance step on one table now, regardless of thresholds: it
// compacts whatever has deletes or is small, expires snapshots outside the retention window,
// rewrites manifests and removes orphan files older than cfg.OrphanMinAge. It takes the table's
// lease for the run (unless opts.IgnoreLease) and releases it afterwards.
func MaintainTable(ctx context.Context, cat catalog.Catalog, ident table.Identifier, cfg MaintenanceConfig, opts MaintainOptions) (MaintenanceReport, error) {
	if err := cfg.Validate(); err != nil {
		return MaintenanceReport{}, err
	}
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	mm := opts.Metrics
	if mm == nil {
		mm = nopMaintenanceMetrics{}
	}
	name := ident[0] + "." + ident[len(ident)-1]
	m := newMaintainer(cat, ident, name, cfg, log.With(zap.String("table", name)), mm)
	m.ignoreLease = opts.IgnoreLease
	m.beforeCommit = opts.BeforeCommit
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		return MaintenanceReport{Table: name}, fmt.Errorf("load %s: %w", name, err)
	}
	if !m.lease(ctx, tbl) {
		owner, until := readLease(tbl.Properties())
		return MaintenanceReport{Table: name}, fmt.Errorf("%s: %w (%s until %s)", name, ErrLeaseHeld, owner, until.Format(time.RFC3339))
	}
	defer m.release()
	s := steps{compact: true, expire: true, manifests: true, orphans: !opts.SkipOrphans, trigger: "manual"}
	return m.maintain(ctx, s)
}
