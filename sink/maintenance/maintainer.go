package maintenance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

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
	errSuperseded = errors.New("superseded by another compaction")
)

// Maintainer maintains one table beside its writer: it measures the table after the writer's
// commits and every check interval, and when a threshold is crossed (and it holds the table's
// lease) compacts, expires snapshots, rewrites manifests and removes orphan files. Its commits
// are staged on the newest table and retried after losing to other commits, so the writer never
// waits for it (design.md, "Maintenance"). See the package comment for who runs what.
type Maintainer struct {
	cat         catalog.Catalog
	ident       table.Identifier
	name        string
	cfg         Config
	owner       string // cfg.Owner plus a token unique to this process
	log         *zap.Logger
	metrics     Metrics
	ignoreLease bool // RunOptions.IgnoreLease
	// onDemand is a run of RunTable (dms2iceberg maintain): no writer hands it a table, and an
	// operator waits for it, so a lost race is re-staged at once and does not use up its
	// retries, as for a table writer; background maintenance yields to the writers instead.
	onDemand bool

	kick   chan struct{}
	latest atomic.Pointer[table.Table] // the writer's newest committed table, not yet measured

	// Handoff of maintenance commits to the writer (zero handoffWait: none, as for RunTable).
	// A job waits in slot for the writer's next commit, at most handoffWait.
	handoffWait  atomic.Int64 // nanoseconds
	slot         atomic.Pointer[commitJob]
	filled       chan struct{} // signalled (buffered 1) when a job is put in slot
	followUpWait time.Duration // followUpWait unless a test sets it
	writerCommit atomic.Int64  // unix nanoseconds of the writer's last commit

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
	eqSince     time.Time     // position mode: when equality deletes were first seen outstanding
	lastPublish time.Time     // position mode: when the positional branch last moved
	runSlots    *Slots        // shared with the process's other maintainers (nil: unbounded)
	keys        *KeyCache     // key columns of data files, shared likewise (nil: none)
	liveCache   manifestCache // live entries of the manifests conversions read
	// Lists of files to delete later (deferred.go), and when storage was last listed for them.
	deferred       []deferredList
	deferredListed time.Time
	clock          func() time.Time // when deferred lists are due (tests move it)

	// For tests and the benchmark.
	busy         atomic.Bool
	runs         atomic.Int64
	beforeCommit func(step string, attempt int) // called before each maintenance commit
	afterRewrite func()                         // called after compaction wrote its files
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
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	m := &Maintainer{cat: cat, ident: ident, name: name, cfg: cfg, owner: cfg.Owner + "#" + hex.EncodeToString(tok[:]),
		log: log.Named("maintenance"), metrics: orNop(metrics), kick: make(chan struct{}, 1), filled: make(chan struct{}, 1), followUpWait: followUpWait,
		created: time.Now(), lastRun: time.Now(), metaBytes: -1, manifests: -1}
	m.handoffWait.Store(int64(handoffWait))
	return m
}

// SetHandoffWait replaces the hand-off wait given to New; safe at any time (the benchmark runs
// the writer on its own clock).
func (m *Maintainer) SetHandoffWait(d time.Duration) { m.handoffWait.Store(int64(d)) }

// Busy reports whether a maintenance run is in progress (for benchmarks).
func (m *Maintainer) Busy() bool { return m.busy.Load() }

// Runs counts the maintenance runs that ended (for benchmarks).
func (m *Maintainer) Runs() int64 { return m.runs.Load() }

// maintain runs the given steps once and reports what they did.
func (m *Maintainer) maintain(ctx context.Context, s steps) (Report, error) {
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

// runSteps runs the steps in order (compact, expire, manifests, orphans), recording each failure
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
	if s.position {
		stop = fail("position", m.convert(ctx, rep))
	}
	if !stop && s.compact {
		stop = fail("compact", m.compact(ctx, rep, s.trigger))
	}
	if !stop && (s.expire || rep.Compacted) {
		stop = fail("expire", m.expire(ctx, rep))
	}
	if !stop && (s.manifests || rep.Compacted) {
		stop = fail("manifests", m.rewriteManifests(ctx, rep))
	}
	if !stop && s.purge {
		stop = fail("purge", m.purge(ctx, rep))
	}
	if !stop && s.orphans {
		stop = fail("orphans", m.removeOrphans(ctx, rep))
	}
	if !stop && m.cfg.positionMode() && (s.branch || rep.Compacted || rep.ManifestsRewritten > 0) {
		m.followMain(ctx, nil, rep) // a no-op while main holds equality deletes
	}
	return errs
}

// reloading reports whether a DMS reload of tbl is in progress (tableprop.ReloadBefore): step
// (compaction, position conversion) is then skipped, because the files it would write carry the
// rows of files at or below the reload's sequence number above it, where the reload's replacing
// commit would not remove them (design.md §12 "Reload"). A step planned before the reload
// started writes files at its planning snapshot's sequence number (compaction: removed by the
// replace) or position deletes naming such files (removed with them).
func (m *Maintainer) reloading(tbl *table.Table, step string) bool {
	if tbl.Properties()[tableprop.ReloadBefore] == "" {
		return false
	}
	m.log.Debug("a reload of the table is in progress: skipped", zap.String("step", step))
	return true
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
