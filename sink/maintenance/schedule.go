package maintenance

import (
	"context"
	"errors"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
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
	deferredDue          bool // a list of deferred file deletions is due
	branchBehind         bool // the positional branch is not at main's head
	behind               time.Duration
	hasBranch            bool
}

// steps is what a run does.
type steps struct {
	position, compact, expire, manifests, orphans, purge, branch bool
	trigger                                                      string
}

func (s steps) any() bool {
	return s.position || s.compact || s.expire || s.manifests || s.orphans || s.purge || s.branch
}

func (s *steps) why(trigger string) {
	if s.trigger == "" {
		s.trigger = trigger
	}
}

// Run measures and maintains the table until ctx ends, on the calling goroutine. Maintenance
// failures are logged and counted, never returned (it returns nil): they must not stop
// ingestion. On return it releases a held lease.
func (m *Maintainer) Run(ctx context.Context) error {
	every := m.cfg.CheckInterval
	if m.cfg.positionMode() {
		// Equality deletes are converted within PositionDelay, also on a table that stopped
		// committing.
		every = min(every, max(m.cfg.PositionDelay, 100*time.Millisecond))
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	defer m.lease.release()
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
func (m *Maintainer) check(ctx context.Context) {
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
	release, err := m.runSlots.acquire(ctx)
	if err != nil {
		return
	}
	defer release()
	if !m.lease.take(ctx, tbl) {
		return
	}
	_, err = m.maintain(ctx, s)
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

func (m *Maintainer) status(st tableState, now time.Time) Status {
	owner := st.leaseOwner
	if !st.leaseUntil.After(now) {
		owner = ""
	}
	return Status{Table: m.name, DeleteFiles: st.deleteFiles, DataFiles: st.dataFiles,
		DeleteRows: st.deleteRows, Records: st.records,
		NewDataFiles: max(0, st.dataFiles-m.compactor.base.dataFiles), NewDeleteFiles: max(0, st.deleteFiles-m.compactor.base.deleteFiles),
		Snapshots: st.snapshots, Expirable: st.expirable, MetadataBytes: st.metaBytes, Manifests: st.manifests,
		LeaseHeld: m.lease.ignore || m.lease.holds(now), LeaseOwner: owner, LastCompaction: st.lastCompaction,
		BranchBehind: st.behind, HasBranch: st.hasBranch}
}

// measure reads the table's state: totals from the current snapshot's summary and lease and
// history from the metadata (no I/O); with full, also the metadata file's size and the number of
// manifests (one stat and one manifest-list read).
func (m *Maintainer) measure(ctx context.Context, tbl *table.Table, now time.Time, full bool) tableState {
	meta := tbl.Metadata()
	props := tbl.Properties()
	st := tableState{counts: summaryCounts(tbl.CurrentSnapshot()), snapshots: len(meta.Snapshots())}
	st.expirable, _ = m.cfg.expiry(meta, now)
	st.leaseOwner, st.leaseUntil = ReadLease(props)
	st.lastCompaction = parseTime(props[tableprop.LastCompaction])
	st.lastOrphans = parseTime(props[tableprop.LastOrphanCleanup])
	if b := m.cfg.PositionalBranch; b != "" && m.cfg.positionMode() {
		st.behind, st.hasBranch = BranchBehind(meta, b, now)
		if head := tbl.CurrentSnapshot(); head != nil {
			at := meta.SnapshotByName(b)
			st.branchBehind = at == nil || at.SnapshotID != head.SnapshotID
		}
	}
	if full {
		m.lastFull = now
		m.metaBytes, m.manifests = fileStats(ctx, tbl)
		m.deferred.list(ctx, tbl, now)
	}
	st.deferredDue = m.deferred.due(m.deferred.now())
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

// expiry returns how many snapshots ExpireSnapshots would remove with the config's settings and
// the age to hand it as older-than: the main branch keeps its newest KeepLast ancestors and every
// ancestor younger than the age, up to the first one that is neither; snapshots outside the
// branch are kept while younger than the age. The age is SnapshotRetention, or less when the main
// branch has more than MaxSnapshots ancestors, so that its newest MaxSnapshots stay (give or take
// snapshots of the same millisecond; never fewer than KeepLast). One walk of the ancestry.
func (c Config) expiry(meta table.Metadata, now time.Time) (n int, age time.Duration) {
	return expiry(meta, c.KeepLast, c.MaxSnapshots, c.SnapshotRetention, now)
}

func expiry(meta table.Metadata, keepLast, maxSnapshots int, retention time.Duration, now time.Time) (int, time.Duration) {
	age := retention
	cutoff := now.Add(-age).UnixMilli()
	keep := make(map[int64]bool)
	// Main first (its cap sets the age), then every other branch (the positional branch, a
	// reload's) as ExpireSnapshots walks it: its newest keepLast ancestors and the younger ones.
	walk := func(head int64, capped bool) {
		for i, s := range table.AncestorsOf(head, meta.SnapshotByID) {
			if capped && maxSnapshots > 0 && i == maxSnapshots {
				// The first ancestor past the cap is older than this age; ExpireSnapshots measures
				// against a later clock, so it is too.
				if c := max(0, now.Sub(time.UnixMilli(s.TimestampMs))-time.Millisecond); c < age {
					age, cutoff = c, now.Add(-c).UnixMilli()
				}
			}
			if s.TimestampMs < cutoff && i >= keepLast {
				break
			}
			keep[s.SnapshotID] = true
		}
	}
	if s := meta.SnapshotByName(table.MainBranch); s != nil {
		walk(s.SnapshotID, true)
	}
	for name, ref := range meta.Refs() {
		keep[ref.SnapshotID] = true
		if name != table.MainBranch && ref.SnapshotRefType == table.BranchRef {
			walk(ref.SnapshotID, false)
		}
	}
	n := 0
	for _, s := range meta.Snapshots() {
		if !keep[s.SnapshotID] && s.TimestampMs < cutoff {
			n++
		}
	}
	return n, age
}

// due decides what to run from the measured state.
func (m *Maintainer) due(st tableState, now time.Time) steps {
	var s steps
	c := m.cfg
	interval := now.Sub(m.lastRun) >= c.Interval
	if !now.Before(m.compactor.next) {
		m.dueCompaction(&s, st, interval)
	}
	if c.positionMode() && st.deleteRows > 0 {
		// Equality deletes outstanding: convert them once the oldest has waited PositionDelay,
		// and always before a compaction (which would otherwise rewrite what they apply to).
		if m.converter.eqSince.IsZero() {
			m.converter.eqSince = now
		}
		if s.compact || now.Sub(m.converter.eqSince) >= c.PositionDelay {
			s.position = true
			s.why("position")
		}
	} else {
		m.converter.eqSince = time.Time{}
		if c.positionMode() && c.PositionalBranch != "" && st.branchBehind && now.Sub(m.branch.lastPublish) >= c.PositionDelay {
			// No equality delete on main: the positional branch follows it (at most every
			// PositionDelay: a table taking only appends moves main at every commit).
			s.branch = true
			s.why("positional-branch")
		}
	}
	if st.deferredDue {
		s.purge = true
		s.why("deferred-deletes")
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

// dueCompaction sets s.compact when a compaction threshold is crossed (files and rows added
// since the last compaction), or at the interval when there is anything to compact.
func (m *Maintainer) dueCompaction(s *steps, st tableState, interval bool) {
	c := m.cfg
	switch {
	case st.deleteFiles-m.compactor.base.deleteFiles >= c.MaxDeleteFiles:
		s.compact = true
		s.why("delete-files")
	case !c.positionMode() && st.deleteRows-m.compactor.base.deleteRows >= c.MaxDeleteRows:
		s.compact = true
		s.why("delete-rows")
	case st.dataFiles-m.compactor.base.dataFiles >= c.MaxSmallFiles:
		s.compact = true
		s.why("small-files")
	case interval && (st.deleteFiles > m.compactor.base.deleteFiles || st.dataFiles > m.compactor.base.dataFiles+1):
		s.compact = true
		s.why("interval")
	}
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
