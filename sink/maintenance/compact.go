package maintenance

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Compaction rewrites the data files that deletes apply to (and small ones) with the deletes
// applied, and drops the delete files that no surviving data file needs any more. It runs in
// three parts:
//
//   - plan (planCompaction) reads the snapshot S current when it starts and decides which files
//     to rewrite and which delete files become dead;
//   - rewrite (rewriteFiles), the heavy part, reads and writes data against S while the writer
//     keeps committing;
//   - commit (commitRewrite) stages the rewrite on the newest table with the rewritten files'
//     data sequence number set to S's: equality deletes committed after S have higher sequence
//     numbers, so they still apply to the rewritten rows, and the deletes it removes (all at or
//     below S) never applied to anything newer than S. Watermark properties are not touched: the
//     commit only adds the rewrite snapshot and the lease properties.

// compactionPlan is what a compaction of snapshot snap rewrites and drops.
type compactionPlan struct {
	src       *table.Table
	snap      *table.Snapshot
	fs        icebergio.IO
	before    counts
	groups    []table.CompactionTaskGroup
	rewritten map[string]struct{} // data files the groups rewrite; "" alone: none
	dead      []iceberg.DataFile  // equality-delete files that apply to no surviving data file
}

// compactor runs a table's compactions (plan, rewrite, commit) and keeps what the scheduler
// needs of them: what the last one left and when the next may run. The maintenance goroutine
// alone uses it.
type compactor struct {
	*maintained
	commits  *committer
	planner  *deletes.Planner // carries the vectors committed while a compaction rewrote
	base     counts           // what the last compaction left (and could not remove)
	next     time.Time        // no compaction before (min interval, failure backoff)
	failures int
}

func (p *compactionPlan) empty() bool { return len(p.groups) == 0 && len(p.dead) == 0 }

// compact runs one compaction and adds what it did to rep.
func (c *compactor) compact(ctx context.Context, rep *Report, trigger string) error {
	start := time.Now()
	src, err := c.cat.LoadTable(ctx, c.ident)
	if err != nil {
		return err
	}
	if src.CurrentSnapshot() == nil || c.reloading(src, "compaction") {
		return nil
	}
	p, err := c.plan(ctx, src)
	if err != nil {
		return c.failed(err)
	}
	if p.empty() {
		c.base = p.before
		c.next = time.Now().Add(c.cfg.MinInterval)
		c.log.Debug("nothing to compact", zap.String("trigger", trigger))
		return nil
	}
	results, err := c.rewrite(ctx, p)
	if err != nil {
		return c.failed(err)
	}
	if c.afterRewrite != nil {
		c.afterRewrite()
	}
	done, err := c.commitRewrite(ctx, p, results, trigger)
	if errors.Is(err, errSuperseded) {
		// Not landed (checked before staging): the new files are referenced by nothing.
		removeWritten(p.fs, results)
		c.log.Info("compaction superseded: another compaction rewrote its files, or a conversion committed, first", zap.String("trigger", trigger))
		return nil
	}
	if err != nil {
		if done.sent == 0 {
			removeWritten(p.fs, results) // never sent: the new files are ours alone
		}
		return c.failed(err)
	}
	c.compacted(rep, p, results, done, start, trigger)
	return nil
}

// config is the planner's configuration: every data file with a delete applying to it
// or below 75% of the target size is a candidate, alone or not, so that every equality delete the
// rewrite applies becomes dead and is dropped.
func (c *compactor) config(tbl *table.Table) compaction.Config {
	cc := compaction.DefaultConfig()
	target := c.cfg.TargetFileSize
	if target <= 0 {
		target = tbl.Properties().GetInt64(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault)
	}
	cc.TargetFileSizeBytes = target
	cc.MinFileSizeBytes = target * 3 / 4
	cc.MaxFileSizeBytes = target * 9 / 5
	cc.MinInputFiles = 1
	cc.DeleteFileThreshold = 1
	if c.cfg.positionMode() {
		// Position mode (design.md §10.1): the equality deletes were converted; rewrite only
		// the files enough of whose rows are deleted, or that carry many delete files.
		cc.DeleteFileThreshold = c.cfg.MaxDeleteFiles
		cc.DeleteRatioThreshold = c.cfg.RewriteDeletedFraction
	}
	return cc
}

// plan decides, on src's current snapshot, which groups of data files to rewrite and
// which equality-delete files that makes dead. It reads manifests, no data.
func (c *compactor) plan(ctx context.Context, src *table.Table) (*compactionPlan, error) {
	snap := src.CurrentSnapshot()
	p := &compactionPlan{src: src, snap: snap, before: summaryCounts(snap), rewritten: make(map[string]struct{})}
	tasks, err := src.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan files for compaction: %w", err)
	}
	cfg := c.config(src)
	plan, err := cfg.PlanCompaction(worthRewriting(tasks, cfg, c.cfg.positionMode()))
	if err != nil {
		return nil, err
	}
	for _, g := range plan.Groups {
		if len(g.Tasks) == 1 && len(g.Tasks[0].EqualityDeleteFiles)+len(g.Tasks[0].DeleteFiles)+len(g.Tasks[0].DeletionVectorFiles) == 0 {
			continue // one file without deletes: rewriting it gains nothing
		}
		p.groups = append(p.groups, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes})
		for _, t := range g.Tasks {
			p.rewritten[t.File.FilePath()] = struct{}{}
		}
	}
	if p.fs, err = src.FS(ctx); err != nil {
		return nil, err
	}
	if len(p.groups) == 0 {
		// Nothing to rewrite; still drop the delete files that apply to no live data file (for
		// example the deletes a load writes for its own keys). An impossible path makes every
		// data file a survivor.
		p.rewritten[""] = struct{}{}
	}
	p.dead, err = compaction.CollectDeadEqualityDeletesWithSpecs(ctx, p.fs, src.Metadata(), snap, p.rewritten)
	if err != nil {
		return nil, fmt.Errorf("collect dead equality deletes: %w", err)
	}
	return p, nil
}

// rewrite reads the planned groups at the plan's snapshot and writes their rows, deletes
// applied, into new data files (nothing is committed). On failure it removes what it wrote.
func (c *compactor) rewrite(ctx context.Context, p *compactionPlan) ([]table.CompactionGroupResult, error) {
	opts := []table.CompactionGroupOption{table.WithCompactionScanConcurrency(c.cfg.Workers)}
	if c.cfg.TargetFileSize > 0 {
		opts = append(opts, table.WithCompactionTargetFileSize(c.cfg.TargetFileSize))
	}
	var results []table.CompactionGroupResult
	for _, g := range p.groups {
		r, err := table.ExecuteCompactionGroup(ctx, p.src, g, opts...)
		results = append(results, r)
		if err != nil {
			removeWritten(p.fs, results)
			return nil, err
		}
	}
	return results, nil
}

// removeWritten deletes the data files a rewrite wrote, when no commit references them.
func removeWritten(fs icebergio.IO, results []table.CompactionGroupResult) {
	for _, r := range results {
		for _, df := range r.NewDataFiles {
			_ = fs.Remove(df.FilePath())
		}
	}
}

// commitRewrite commits the rewritten files and drops the dead deletes on the newest table,
// with the plan snapshot's data sequence number. A retry first checks whether an attempt whose
// outcome was unknown landed (its run id in the summary), and gives up with errSuperseded when
// another compaction replaced some of the inputs.
func (c *compactor) commitRewrite(ctx context.Context, p *compactionPlan, results []table.CompactionGroupResult, trigger string) (committed, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	id := hex.EncodeToString(tok[:])
	summary := iceberg.Properties{tableprop.SummaryMaintenanceRun: id, tableprop.SummaryMaintenanceTrigger: trigger,
		tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.snap.SnapshotID, 10)}
	props := iceberg.Properties{tableprop.LastCompaction: formatTime(time.Now())}
	done, err := c.commits.commit(ctx, "compact", props,
		func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error {
			if attempt > 0 && landed(head, id, p.snap.SequenceNumber) {
				return errAlreadyCommitted
			}
			if convertedSince(head, p.snap) {
				return errSuperseded
			}
			// Deletion vectors committed since the plan on the files it rewrites (a writer's):
			// carried over to the new files, and the vectors removed are the head's.
			moved, err := c.planner.Carry(ctx, p.snap, p.rewritten, results, head)
			if err != nil {
				return err
			}
			if len(moved.Add) > 0 {
				c.log.Info("compaction carries deletion-vector positions committed since its plan",
					zap.Int("keys", moved.Keys), zap.Int("positions", moved.Positions))
			}
			rw := txn.NewRewrite(summary)
			for _, r := range moved.Results {
				rw.ApplyResult(r)
			}
			for _, df := range moved.Add {
				// It takes the highest sequence number of the vectors removed: one of those
				// was committed after the plan, so it is above the new files' (the plan's).
				rw.AddDeleteFile(df)
			}
			for _, df := range moved.Remove {
				rw.DeleteFile(df)
			}
			for _, df := range p.dead {
				rw.DeleteFile(df)
			}
			if len(results) > 0 {
				rw.DataSequenceNumber(p.snap.SequenceNumber)
			}
			err = rw.Commit(ctx)
			if err != nil && inputsGone(ctx, head, p.rewritten, p.dead) {
				return errSuperseded
			}
			return err
		})
	if errors.Is(err, errAlreadyCommitted) {
		done.tbl, err = c.cat.LoadTable(ctx, c.ident)
	}
	return done, err
}

// compacted records a committed compaction in rep and in the maintainer's schedule.
func (c *compactor) compacted(rep *Report, p *compactionPlan, results []table.CompactionGroupResult, done committed, start time.Time, trigger string) {
	var removedPos []iceberg.DataFile
	for _, r := range results {
		rep.DataFilesRewritten += len(r.OldDataFiles)
		rep.DataFilesWritten += len(r.NewDataFiles)
		rep.BytesBefore += r.BytesBefore
		rep.BytesAfter += r.BytesAfter
		removedPos = append(removedPos, r.SafePosDeletes...)
	}
	rep.DeleteFilesRemoved = len(p.dead) + len(removedPos)
	for _, df := range p.dead {
		rep.DeleteRowsRemoved += df.Count()
	}
	rep.Compacted = true
	c.planner.KeyCache().Forget(p.rewritten)
	rep.CompactionAttempts = max(done.sent, 1)
	rep.CompactionTook = time.Since(start)
	b := p.before
	c.base = counts{dataFiles: b.dataFiles - rep.DataFilesRewritten + rep.DataFilesWritten,
		deleteFiles: b.deleteFiles - rep.DeleteFilesRemoved, deleteRows: b.deleteRows - rep.DeleteRowsRemoved}
	c.failures = 0
	c.next = time.Now().Add(c.cfg.MinInterval)
	c.log.Info("compacted", zap.String("trigger", trigger), zap.Time("started", start),
		zap.Duration("took", rep.CompactionTook), zap.Int("attempts", rep.CompactionAttempts),
		zap.Int("data_files_rewritten", rep.DataFilesRewritten), zap.Int("data_files_written", rep.DataFilesWritten),
		zap.Int("delete_files_removed", rep.DeleteFilesRemoved), zap.Int64("delete_rows_removed", rep.DeleteRowsRemoved),
		zap.Int64("bytes_before", rep.BytesBefore), zap.Int64("bytes_after", rep.BytesAfter),
		zap.Int64("starting_snapshot", p.snap.SnapshotID), zap.Int64("snapshot", snapshotID(done.tbl)))
}

// convertedSince reports whether a conversion committed to head's main branch since snap, the
// compaction's plan. Its vectors hide rows that equality deletes already hid at the plan (the
// rewrite left them out) as well as rows deleted since; Carry would take all of them for keys a
// writer deleted since the plan and delete those keys from the new files, which hold their
// newer images. Only a second maintainer converts while a compaction runs (a lost lease,
// maintain --ignore-lease), so the compaction gives up and the next one replans.
func convertedSince(head *table.Table, snap *table.Snapshot) bool {
	cur := head.CurrentSnapshot()
	if cur == nil {
		return false
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, head.Metadata().SnapshotByID) {
		if s.SnapshotID == snap.SnapshotID {
			return false
		}
		if s.Summary != nil && s.Summary.Properties[tableprop.SummaryMaintenanceTrigger] == triggerPosition {
			return true
		}
	}
	return false
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

// failed backs off before the next compaction of the table.
func (c *compactor) failed(err error) error {
	c.failures++
	d := max(c.cfg.MinInterval, 5*time.Second) << min(c.failures-1, 6)
	c.next = time.Now().Add(min(d, 10*time.Minute))
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
		if s.Summary != nil && s.Summary.Properties[tableprop.SummaryMaintenanceRun] == id {
			return true
		}
	}
	return false
}

// worthRewriting keeps the data files whose rewrite the table's changes pay for, so that a
// compaction's cost follows the changes since the last one, not the table's size (design.md §10,
// "What a compaction rewrites"). iceberg-go's planner takes every file under 75% of the target
// size, so a table of files a little smaller than that (a full load flushed in parts, or the
// output of earlier compactions) was rewritten whole by every compaction. Kept:
//   - a file with deletes that call for it: cfg.DeleteFileThreshold delete files (in position
//     mode only position deletes and deletion vectors count; its equality deletes are the
//     conversion's work, not a rewrite's), or cfg.DeleteRatioThreshold of its rows deleted by
//     file-scoped deletes;
//   - small files (under cfg.MinFileSizeBytes, no such deletes), tiered per partition: from the
//     smallest up, a file joins while it is at most twice the size of the files rewritten before
//     it together (the partition's files kept for their deletes first: merging into a rewrite
//     that happens anyway costs only the small file), and only when the partition rewrites at
//     least two files. A large file is thus rewritten only once the small files merged into it
//     add up to half its size, so it grows by half each time, and each row is rewritten a
//     logarithmic number of times.
//
// Every kept file also passes the planner's own rules, so cfg.PlanCompaction bin-packs exactly
// these. A kept file keeps all its deletes (equality ones included): the rewrite applies them.
func worthRewriting(tasks []table.FileScanTask, cfg compaction.Config, positionMode bool) []table.FileScanTask {
	type partition struct {
		rewritten int64 // bytes of the files kept for their deletes
		kept      int
		small     []table.FileScanTask
	}
	parts := map[string]*partition{}
	var order []string
	var keep []table.FileScanTask
	for _, t := range tasks {
		key := fmt.Sprint(t.File.SpecID(), t.File.Partition()) // fmt prints maps in key order
		p := parts[key]
		if p == nil {
			p = &partition{}
			parts[key] = p
			order = append(order, key)
		}
		n := len(t.DeleteFiles) + len(t.DeletionVectorFiles)
		if !positionMode {
			n += len(t.EqualityDeleteFiles)
		}
		switch {
		case n >= cfg.DeleteFileThreshold || (cfg.DeleteRatioThreshold > 0 && deletedFraction(t) >= cfg.DeleteRatioThreshold):
			keep = append(keep, t)
			p.rewritten += t.File.FileSizeBytes()
			p.kept++
		case t.File.FileSizeBytes() < cfg.MinFileSizeBytes:
			p.small = append(p.small, t)
		}
	}
	for _, key := range order {
		p := parts[key]
		slices.SortStableFunc(p.small, func(a, b table.FileScanTask) int {
			return cmp.Compare(a.File.FileSizeBytes(), b.File.FileSizeBytes())
		})
		sum, n := p.rewritten, 0
		for _, t := range p.small {
			if p.kept+n > 0 && t.File.FileSizeBytes() > 2*sum {
				break
			}
			sum += t.File.FileSizeBytes()
			n++
		}
		if p.kept+n >= 2 {
			keep = append(keep, p.small[:n]...)
		}
	}
	return keep
}

// deletedFraction is the fraction of t's rows that its file-scoped position deletes and deletion
// vectors delete (as the planner counts it; equality deletes cannot be attributed to one file).
func deletedFraction(t table.FileScanTask) float64 {
	rows := t.File.Count()
	if rows <= 0 {
		return 0
	}
	var deleted int64
	for _, d := range slices.Concat(t.DeleteFiles, t.DeletionVectorFiles) {
		if d.ContentType() == iceberg.EntryContentEqDeletes {
			continue
		}
		if ref := d.ReferencedDataFile(); ref != nil && *ref != "" || deletes.SameBounds(d) {
			deleted += d.Count()
		}
	}
	return float64(min(deleted, rows)) / float64(rows)
}
