package maintenance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

var (
	// errNothingToDo tells commit that the newest table needs no change.
	errNothingToDo = errors.New("nothing to do")
	// errAlreadyCommitted tells commit that an earlier attempt whose outcome was unknown landed.
	errAlreadyCommitted = errors.New("already committed")
	// errLeaseLost stops a run when this process no longer holds the table's lease.
	errLeaseLost = errors.New("maintenance lease lost")
	// errSuperseded: another compaction rewrote some of this one's input files first.
	errSuperseded = deletes.ErrSuperseded
)

// maintained is the table one Maintainer maintains, as each of its parts sees it: set by New (and
// RunTable) before anything runs, read-only after.
type maintained struct {
	cat     catalog.Catalog
	ident   table.Identifier
	name    string
	cfg     Config
	log     *zap.Logger
	metrics Metrics
	// afterRewrite, for tests and the benchmark, is called after a compaction wrote its files
	// and after a conversion planned.
	afterRewrite func()
}

// reloading reports whether a DMS reload of tbl is in progress (tableprop.ReloadBefore): step
// (compaction, position conversion) is then skipped, because the files it would write carry the
// rows of files at or below the reload's sequence number above it, where the reload's replacing
// commit would not remove them (design.md §7 "Reload"). A step planned before the reload
// started writes files at its planning snapshot's sequence number (compaction: removed by the
// replace) or position deletes naming such files (removed with them).
func (t *maintained) reloading(tbl *table.Table, step string) bool {
	if tbl.Properties()[tableprop.ReloadBefore] == "" {
		return false
	}
	t.log.Debug("a reload of the table is in progress: skipped", zap.String("step", step))
	return true
}

// Maintainer maintains one table beside its writer: it measures the table after the writer's
// commits and every check interval, and when a threshold is crossed (and it holds the table's
// lease) compacts, expires snapshots, rewrites manifests and removes orphan files. Its commits
// are staged on the newest table and retried after losing to other commits, so the writer never
// waits for it (design.md, "Maintenance"). See the package comment for who runs what.
//
// It schedules the steps; each step is its own type (compactor, converter, sweeper, branchMover, cleaner),
// as are the lease (leaseHolder), the commits and their hand-off to the writer (committer), the
// deferred file deletions (deferredDeletes) and the delete planning (deletes.Planner).
type Maintainer struct {
	*maintained
	lease     *leaseHolder
	commits   *committer
	deferred  *deferredDeletes
	compactor *compactor
	converter *converter
	sweeper   *sweeper
	branch    *branchMover
	cleaner   *cleaner
	planner   *deletes.Planner // the conversions' and the writer's vectors' (its caches are locked)

	kick   chan struct{}
	latest atomic.Pointer[table.Table] // the writer's newest committed table, not yet measured

	// Owned by the goroutine that runs maintenance: the schedule.
	created    time.Time
	lastRun    time.Time
	lastFull   time.Time
	metaBytes  int64
	manifests  int
	metaWarned time.Time
	structural time.Time // when the metadata-size or manifest trigger last fired
	pauseUntil time.Time // after a failed run, nothing runs before
	pauses     int
	runSlots   *Slots // shared with the process's other maintainers (nil: unbounded)

	// For tests and the benchmark.
	busy atomic.Bool
	runs atomic.Int64
}

// New returns the maintainer of one table; name is the table as logs and metrics show it
// ("namespace.table"). handoffWait is how long a maintenance commit waits for the table's writer
// to run it (see HandoffWait); zero commits on its own. A nil log or metrics means none.
// cfg is used as given (the caller validated it).
func New(cat catalog.Catalog, ident table.Identifier, name string, cfg Config, log *zap.Logger, metrics Metrics,
	handoffWait time.Duration) *Maintainer {
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if log == nil {
		log = zap.NewNop()
	}
	t := &maintained{cat: cat, ident: ident, name: name, cfg: cfg, log: log.Named("maintenance"), metrics: orNop(metrics)}
	lease := newLeaseHolder(t)
	commits := newCommitter(t, lease, handoffWait)
	deferred := &deferredDeletes{maintained: t}
	planner := deletes.NewPlanner(nil)
	branch := &branchMover{maintained: t, commits: commits}
	return &Maintainer{maintained: t, lease: lease, commits: commits, deferred: deferred, planner: planner, branch: branch,
		compactor: &compactor{maintained: t, commits: commits, planner: planner},
		converter: &converter{maintained: t, commits: commits, planner: planner, branch: branch},
		sweeper:   &sweeper{maintained: t, commits: commits, planner: planner},
		cleaner:   &cleaner{maintained: t, commits: commits, deferred: deferred},
		kick:      make(chan struct{}, 1), created: time.Now(), lastRun: time.Now(), metaBytes: -1, manifests: -1}
}

// SetHandoffWait replaces the hand-off wait given to New; safe at any time (the benchmark runs
// the writer on its own clock).
func (m *Maintainer) SetHandoffWait(d time.Duration) { m.commits.handoffWait.Store(int64(d)) }

// Busy reports whether a maintenance run is in progress (for benchmarks).
func (m *Maintainer) Busy() bool { return m.busy.Load() }

// Runs counts the maintenance runs that ended (for benchmarks).
func (m *Maintainer) Runs() int64 { return m.runs.Load() }

// maintain runs the given steps once and reports what they did.
func (m *Maintainer) maintain(ctx context.Context, s steps) (Report, error) {
	m.busy.Store(true)
	defer m.busy.Store(false)
	defer m.runs.Add(1)
	if !m.lease.ignore {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			m.lease.renewWhileRunning(ctx, stop)
		}()
		defer func() { close(stop); <-done }()
	}
	start := time.Now()
	rep := Report{Table: m.name, Trigger: s.trigger, Started: start,
		MetadataBytesBefore: -1, MetadataBytesAfter: -1, ManifestsBefore: -1, ManifestsAfter: -1}
	head, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return rep, fmt.Errorf("load %s: %w", m.name, err)
	}
	rep.DataFilesBefore, rep.DeleteFilesBefore, rep.SnapshotsBefore, rep.MetadataBytesBefore, rep.ManifestsBefore = shape(ctx, head)
	errs := m.runSteps(ctx, s, &rep)
	cctx := context.WithoutCancel(ctx)
	if head, err := m.cat.LoadTable(cctx, m.ident); err == nil {
		rep.DataFilesAfter, rep.DeleteFilesAfter, rep.SnapshotsAfter, rep.MetadataBytesAfter, rep.ManifestsAfter = shape(cctx, head)
		m.metaBytes, m.manifests, m.lastFull = rep.MetadataBytesAfter, rep.ManifestsAfter, time.Now()
	}
	rep.Took = time.Since(start)
	m.lastRun = time.Now()
	if rep.Changed() {
		m.metrics.Maintained(rep)
		m.logReport(rep)
	}
	return rep, errors.Join(errs...)
}

// runSteps runs the steps in order (sweep, position, compact, expire, manifests, purge, orphans), recording each failure
// in rep; a lost lease or an ended context stops the steps after it.
func (m *Maintainer) runSteps(ctx context.Context, s steps, rep *Report) []error {
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
	if s.position || s.compact {
		stop = fail("sweep", m.sweeper.sweep(ctx, rep))
	}
	if !stop && s.position {
		stop = fail("position", m.converter.convert(ctx, rep))
	}
	if !stop && s.compact {
		stop = fail("compact", m.compactor.compact(ctx, rep, s.trigger))
	}
	if !stop && (s.expire || rep.Compacted) {
		stop = fail("expire", m.cleaner.expire(ctx, rep))
	}
	if !stop && (s.manifests || rep.Compacted) {
		stop = fail("manifests", m.cleaner.rewriteManifests(ctx, rep))
	}
	if !stop && s.purge {
		stop = fail("purge", m.deferred.purge(ctx, rep))
	}
	if !stop && s.orphans {
		stop = fail("orphans", m.cleaner.removeOrphans(ctx, rep))
	}
	if !stop && m.cfg.positionMode() && (s.branch || rep.Compacted || rep.ManifestsRewritten > 0) {
		m.branch.followMain(ctx, nil, rep) // a no-op while main holds equality deletes
	}
	return errs
}

// shape reads a table's data files, delete files and snapshots, and its metadata size and
// manifest count (fileStats).
func shape(ctx context.Context, tbl *table.Table) (dataFiles, deleteFiles, snapshots int, metaBytes int64, manifests int) {
	c := summaryCounts(tbl.CurrentSnapshot())
	metaBytes, manifests = fileStats(ctx, tbl)
	return c.dataFiles, c.deleteFiles, len(tbl.Metadata().Snapshots()), metaBytes, manifests
}

func (m *Maintainer) logReport(rep Report) {
	m.log.Info("maintained", zap.String("trigger", rep.Trigger), zap.Duration("took", rep.Took),
		zap.Int("data_files_before", rep.DataFilesBefore), zap.Int("data_files_after", rep.DataFilesAfter),
		zap.Int("delete_files_before", rep.DeleteFilesBefore), zap.Int("delete_files_after", rep.DeleteFilesAfter),
		zap.Int("snapshots_before", rep.SnapshotsBefore), zap.Int("snapshots_after", rep.SnapshotsAfter),
		zap.Int("manifests_before", rep.ManifestsBefore), zap.Int("manifests_after", rep.ManifestsAfter),
		zap.Int64("metadata_bytes", rep.MetadataBytesAfter), zap.Strings("failed", rep.Failed))
}

func snapshotID(tbl *table.Table) int64 {
	if tbl == nil || tbl.CurrentSnapshot() == nil {
		return 0
	}
	return tbl.CurrentSnapshot().SnapshotID
}

// AfterCommit is called by the table's writer, on its goroutine, after each of its commits, with
// the committed table. It runs the maintenance commit waiting for the writer, if any, on that
// table (so the two never conflict) and passes the result to adopt; then it hands the newest
// table to the maintainer and wakes it. Without a waiting commit it does not block.
func (m *Maintainer) AfterCommit(ctx context.Context, tbl *table.Table, adopt func(*table.Table) error) {
	if m == nil || tbl == nil {
		return
	}
	m.latest.Store(m.commits.runWaiting(ctx, tbl, adopt))
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
