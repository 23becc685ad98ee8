package sink

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// Commit contention: several workers commit to one table when its records come from shards that
// different workers own (primary-key partitioning, or DMS's default layout during a full load).
// Iceberg commits are optimistic, and a writer stages its commit on the table as its own last
// commit left it: once another writer committed in between, its first attempt is bound to fail,
// and it pays a refresh plus a second set of manifests and a metadata file. With N writers at the
// same flush interval nearly every first attempt failed (BenchmarkHotTable, PostgreSQL catalog,
// 4 writers: 2.1–2.3 attempts per commit). A writer whose commits lost a race within
// contendedFor therefore refreshes the table before it stages a flush (one catalog read and one
// metadata file, which the failed attempt would have cost as well); the races left are commits
// that really overlap (4 writers: 1.1–1.4 attempts per commit). A writer alone on its table never
// refreshes. Stretching the flush interval under contention (fewer, larger commits) was measured
// too and dropped: it lowered the commit rate but not the share of lost races, and cost
// freshness (docs/benchmarks.md).

// contendedFor is how long after a lost race a writer refreshes its table before each flush.
const contendedFor = 5 * time.Minute

// refreshIfContended refreshes the writer's table before a flush when its commits lost a race
// within contendedFor and another writer has moved the table since. A refused table (a newer
// state version) stops the writer; any other failure leaves the commit loop to refresh after the
// attempt, as it would without this.
func (cm *committer) refreshIfContended(ctx context.Context) error {
	if cm.contended.IsZero() || time.Since(cm.contended) > contendedFor || cm.st.tbl == nil {
		return nil
	}
	fresh, err := cm.env.cat.LoadTable(ctx, cm.ident)
	if err != nil {
		cm.log.Debug("reload before the flush failed", zap.Error(err))
		return nil
	}
	if !commit.Moved(cm.st.tbl, fresh) {
		return nil
	}
	if err := cm.st.use(fresh); err != nil {
		if stateversion.IsRefused(err) {
			return err
		}
		cm.log.Warn("reload failed", zap.Error(err))
	}
	return nil
}
