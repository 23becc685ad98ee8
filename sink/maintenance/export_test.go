package maintenance

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
)

// Internals the external tests (package maintenance_test, which drives a real sink to make the
// commits maintenance works on) reach.

// Steps is what one run does.
type Steps = steps

// CompactOnly and ExpireAndManifests are the runs the tests start by hand.
var (
	CompactOnly        = Steps{compact: true, trigger: "test"}
	PositionOnly       = Steps{position: true, trigger: "test"}
	ExpireAndManifests = Steps{expire: true, manifests: true, trigger: "test"}
	Purge              = Steps{purge: true, trigger: "test"}
)

// SetClock moves the clock deferred deletions are due by; ListDeferred reads the pending lists
// from storage, as a restarted process does, and returns how many it knows.
func (m *Maintainer) SetClock(f func() time.Time) { m.deferred.clock = f }
func (m *Maintainer) ListDeferred(ctx context.Context, tbl *table.Table) int {
	m.deferred.list(ctx, tbl, time.Now())
	return len(m.deferred.lists)
}

var (
	ErrLeaseLost = errLeaseLost
)

// Expirable counts the snapshots expiry removes by age alone (no max_snapshots).
func Expirable(meta table.Metadata, keepLast int, retention time.Duration, now time.Time) int {
	n, _ := expiry(meta, keepLast, 0, retention, now)
	return n
}

// NewForTest is New without hand-off.
func NewForTest(cat catalog.Catalog, ident table.Identifier, name string, cfg Config, log *zap.Logger) *Maintainer {
	return New(cat, ident, name, cfg, log, nil, 0)
}

func (m *Maintainer) Lease(ctx context.Context, tbl *table.Table) bool { return m.lease.take(ctx, tbl) }
func (m *Maintainer) Maintain(ctx context.Context, s Steps) (Report, error) {
	return m.maintain(ctx, s)
}
func (m *Maintainer) AcquireOn(ctx context.Context, base *table.Table, now time.Time) (bool, error) {
	return m.lease.acquireOn(ctx, base, now)
}
func (m *Maintainer) Holds(now time.Time) bool                      { return m.lease.holds(now) }
func (m *Maintainer) SetLease(until time.Time)                      { m.lease.set(until) }
func (m *Maintainer) LeaseProps(until time.Time) iceberg.Properties { return m.lease.props(until) }
func (m *Maintainer) Owner() string                                 { return m.lease.owner }
func (m *Maintainer) IgnoreLease()                                  { m.lease.ignore = true }
func (m *Maintainer) AfterRewrite(f func())                         { m.afterRewrite = f }
func (m *Maintainer) BeforeCommit(f func(step string, attempt int)) { m.commits.beforeCommit = f }

// SummaryCounts returns the data and delete files of a snapshot, from its summary.
func SummaryCounts(s *table.Snapshot) (dataFiles, deleteFiles int) {
	c := summaryCounts(s)
	return c.dataFiles, c.deleteFiles
}

// ListLive lists tbl's current snapshot through m's manifest cache and without it; it returns
// the file paths of both listings (data, then deletes) and the manifests cached after.
func (m *Maintainer) ListLive(ctx context.Context, tbl *table.Table) (cached, direct []string, manifests []string, err error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	paths := func(lists ...[]deletes.LiveFile) []string {
		var out []string
		for _, l := range lists {
			for _, f := range l {
				out = append(out, fmt.Sprintf("%s@%d", f.File.FilePath(), f.Seq))
			}
		}
		return out
	}
	d, e, p, err := m.planner.Manifests().LiveFiles(fs, tbl.CurrentSnapshot())
	if err != nil {
		return nil, nil, nil, err
	}
	cached = paths(d, e, p)
	if d, e, p, err = deletes.LiveFilesAll(fs, tbl.CurrentSnapshot()); err != nil {
		return nil, nil, nil, err
	}
	return cached, paths(d, e, p), m.planner.Manifests().Cached(), nil
}

// SetFollowUpWait replaces how long the writer waits for a conversion's second commit.
func (m *Maintainer) SetFollowUpWait(d time.Duration) { m.commits.followUpWait = d }

// Held is the bytes c holds (0 for a nil cache), as Stats reports them.
func Held(c *KeyCache) int64 {
	held, _, _ := c.Stats()
	return held
}
