package maintenance

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The steps besides compaction (compact.go): snapshot expiry, manifest rewrite, orphan cleanup.

// cleaner runs the steps that keep a table's metadata and storage small: snapshot expiry (with
// the deletion of the files only expired snapshots referenced, now or deferred), manifest
// rewrite and orphan cleanup.
type cleaner struct {
	*maintained
	commits  *committer
	deferred *deferredDeletes
}

// expire removes the snapshots outside the retention window (snapshot_retention, shortened by
// max_snapshots), then the files only they referenced. The file removal runs here, after the
// commit, not inside it: the commit may run on the writer's goroutine. When a snapshot younger
// than snapshot_retention was expired (the count cap), the files are listed for deletion once
// it would have aged out (deferred.go), so readers in flight keep them for the full window.
func (c *cleaner) expire(ctx context.Context, rep *Report) error {
	done, err := c.commits.commit(ctx, "expire", nil, func(_ context.Context, txn *table.Transaction, head *table.Table, _ int) error {
		n, age := c.cfg.expiry(head.Metadata(), time.Now())
		if n == 0 {
			return errNothingToDo
		}
		return txn.ExpireSnapshots(table.WithRetainLast(c.cfg.KeepLast), table.WithOlderThan(age),
			table.WithPostCommit(false))
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return err
	}
	tbl, pre := done.tbl, done.head
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
	var due time.Time // when the youngest expired snapshot would have aged out
	for _, id := range ids {
		if s := pre.Metadata().SnapshotByID(id); s != nil {
			if d := time.UnixMilli(s.TimestampMs).Add(c.cfg.SnapshotRetention); d.After(due) {
				due = d
			}
		}
	}
	if !due.After(time.Now()) {
		if err := table.NewRemoveSnapshotsUpdate(ids, true).PostCommit(ctx, pre, tbl); err != nil && !onlyNotExist(err) {
			c.log.Warn("removing the files of expired snapshots failed (orphan cleanup will remove them)", zap.Error(err))
		}
		c.log.Info("expired snapshots", zap.Int("expired", len(ids)), zap.Int("left", len(kept)))
		return nil
	}
	files, err := filesOfExpired(ctx, pre, tbl, ids)
	if err == nil && len(files) > 0 {
		err = c.deferred.add(ctx, tbl, files, due)
	}
	if err != nil {
		c.log.Warn("listing the files of expired snapshots for deletion failed (orphan cleanup will remove them)", zap.Error(err))
	}
	rep.FilesDeferred += len(files)
	c.log.Info("expired snapshots (max_snapshots); their files are deleted once snapshot_retention has passed",
		zap.Int("expired", len(ids)), zap.Int("left", len(kept)), zap.Int("files", len(files)), zap.Time("delete_after", due))
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
func (c *cleaner) rewriteManifests(ctx context.Context, rep *Report) error {
	var res *table.RewriteManifestsResult
	_, err := c.commits.commit(ctx, "manifests", nil, func(ctx context.Context, txn *table.Transaction, _ *table.Table, _ int) error {
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
	c.log.Info("rewrote manifests", zap.Int("rewritten", len(res.RewrittenManifests)), zap.Int("added", len(res.AddedManifests)))
	return nil
}

// removeOrphans deletes files under the table's location that no metadata references and that
// are older than OrphanMinAge (files being written are younger), then records the time.
func (c *cleaner) removeOrphans(ctx context.Context, rep *Report) error {
	tbl, err := c.cat.LoadTable(ctx, c.ident)
	if err != nil {
		return err
	}
	res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(c.cfg.OrphanMinAge))
	if err != nil {
		return fmt.Errorf("orphan cleanup: %w", err)
	}
	rep.OrphansRemoved += len(res.DeletedFiles)
	rep.OrphanBytes += res.TotalSizeBytes
	if len(res.DeletedFiles) > 0 {
		c.log.Info("removed orphan files", zap.Int("files", len(res.DeletedFiles)), zap.Int64("bytes", res.TotalSizeBytes))
	}
	_, err = c.commits.commit(ctx, "orphans", iceberg.Properties{tableprop.LastOrphanCleanup: formatTime(time.Now())},
		func(context.Context, *table.Transaction, *table.Table, int) error { return nil })
	return err
}
