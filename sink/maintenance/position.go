package maintenance

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The conversion of equality deletes into position deletes (delete modes position and dv, design.md
// §10.1): plan on snapshot P (sink/deletes reads the equality deletes' keys, probes the key column
// of each data file they can apply to and writes the position deletes), then two commits on the
// newest table: add the position deletes, then drop the equality deletes. Both read the same
// rows as before.

// triggerPosition is the maintenance trigger in the summaries of a conversion's commits.
const triggerPosition = "position"

// converter runs a table's conversions and remembers since when equality deletes have been
// outstanding (the scheduler's PositionDelay). The maintenance goroutine alone uses it; its
// planner's caches are shared with the writer's Vectors.
type converter struct {
	*maintained
	commits *committer
	planner *deletes.Planner
	branch  *branchMover
	eqSince time.Time // when equality deletes were first seen outstanding
}

// convert turns the table's outstanding equality deletes into position deletes and adds what it
// did to rep.
func (c *converter) convert(ctx context.Context, rep *Report) error {
	start := time.Now()
	src, err := c.cat.LoadTable(ctx, c.ident)
	if err != nil {
		return err
	}
	if src.CurrentSnapshot() == nil || c.reloading(src, "position conversion") {
		return nil
	}
	p, err := c.plan(ctx, src)
	if err != nil {
		return err
	}
	if p == nil {
		c.eqSince = time.Time{}
		return nil
	}
	rep.DataFilesProbed += len(p.Probed)
	if c.afterRewrite != nil {
		c.afterRewrite()
	}
	attempts := 0
	if len(p.PosDels) > 0 {
		sent, err := c.addPositions(ctx, p, rep)
		attempts += sent
		if errors.Is(err, errSuperseded) {
			c.log.Info("conversion superseded: the files it probed were rewritten; the next one replans")
			return nil
		}
		if err != nil {
			return err
		}
	}
	done, err := c.dropEqualityDeletes(ctx, p)
	attempts += max(done.sent, 1)
	if errors.Is(err, errSuperseded) {
		// The position deletes committed are right (they hide rows the equality deletes hide);
		// the next conversion replans the equality deletes.
		c.log.Info("dropping converted equality deletes superseded; the next conversion replans")
		return nil
	}
	if err != nil {
		return err
	}
	c.converted(p, rep, attempts, start)
	c.branch.publishConverted(ctx, p, done.tbl, rep)
	return nil
}

// plan reads the equality deletes of src's current snapshot, probes the data files they can
// apply to and writes the position deletes (nothing is committed). It returns nil when there is
// no equality delete.
func (c *converter) plan(ctx context.Context, src *table.Table) (*deletes.Plan, error) {
	snap := src.CurrentSnapshot()
	fs, err := src.FS(ctx)
	if err != nil {
		return nil, err
	}
	data, eqDels, posDels, err := c.planner.Manifests().LiveFiles(fs, snap)
	if err != nil {
		return nil, err
	}
	if len(eqDels) == 0 {
		return nil, nil
	}
	return c.planner.Plan(ctx, src, snap, fs, data, eqDels, posDels)
}

// addPositions runs the conversion's first commit: it adds the plan's position deletes (and
// removes the deletion vectors they replace), merged again with the vectors a writer replaced
// since the plan. It returns the commit requests sent (at least 1); the plan's files are removed
// when no commit can reference them.
func (c *converter) addPositions(ctx context.Context, p *deletes.Plan, rep *Report) (int, error) {
	done, err := c.commits.commitThenMore(ctx, "position", nil, func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error {
		live, changed, err := p.Check(ctx, head)
		if err != nil {
			return err
		}
		if attempt > 0 && p.LandedIn(live) {
			return errAlreadyCommitted // an attempt whose outcome was unknown landed
		}
		add, remove := p.PosDels, p.ReplacedDVs
		if len(changed) > 0 {
			if add, remove, err = p.Remerge(ctx, head.Metadata(), changed); err != nil {
				return err
			}
			p.Remerged = append(add, p.Remerged...) // the newest first, for ours
			rep.VectorsRemerged++
		}
		rd := txn.NewRowDelta(iceberg.Properties{tableprop.SummaryMaintenanceTrigger: triggerPosition,
			tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.Snap.SnapshotID, 10)})
		rd.AddDeletes(add...)
		if len(remove) > 0 {
			rd.RemoveDeletes(remove...)
		}
		return rd.Commit(ctx)
	})
	sent := max(done.sent, 1)
	if errors.Is(err, errAlreadyCommitted) {
		return sent, nil
	}
	if err != nil && (done.sent == 0 || errors.Is(err, errSuperseded)) {
		deletes.RemoveFiles(p.FS, p.PosDels) // never committed: the files are ours alone
		deletes.RemoveFiles(p.FS, p.Remerged)
	}
	return sent, err
}

// dropEqualityDeletes runs the conversion's second commit: it drops the converted equality
// deletes and the position-delete files the new ones replace. With a positional branch the
// branch's move follows the drop at once (the writer that runs the drop waits for it, as for the
// drop after the first commit).
func (c *converter) dropEqualityDeletes(ctx context.Context, p *deletes.Plan) (committed, error) {
	drop := c.commits.commit
	if c.cfg.PositionalBranch != "" {
		drop = c.commits.commitThenMore
	}
	return drop(ctx, "position-drop", nil, func(ctx context.Context, txn *table.Transaction, head *table.Table, _ int) error {
		// A vector replaced since commit 1 (a writer's) holds commit 1's positions too.
		if _, _, err := p.Check(ctx, head); err != nil {
			return err
		}
		rw := txn.NewRewrite(iceberg.Properties{tableprop.SummaryMaintenanceTrigger: triggerPosition,
			tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.Snap.SnapshotID, 10)})
		for _, e := range p.EqDels {
			rw.DeleteFile(e.File)
		}
		for _, df := range p.Replaced {
			rw.DeleteFile(df)
		}
		return rw.Commit(ctx)
	})
}

// converted records a committed conversion in rep and the log.
func (c *converter) converted(p *deletes.Plan, rep *Report, attempts int, start time.Time) {
	c.eqSince = time.Time{}
	rep.Converted = true
	rep.EqualityDeletesConverted += len(p.EqDels)
	rep.PositionDeletesWritten += p.Rows
	rep.PositionDeleteFilesWritten += len(p.PosDels)
	rep.ConversionAttempts += attempts
	rep.ConversionTook += time.Since(start)
	c.log.Info("converted equality deletes", zap.Duration("took", time.Since(start)),
		zap.Int("equality_delete_files", len(p.EqDels)), zap.Int("data_files_probed", len(p.Probed)),
		zap.Bool("deletion_vectors", p.DVs),
		zap.Int("position_delete_files", len(p.PosDels)), zap.Int("position_delete_files_merged", len(p.Replaced)+len(p.ReplacedDVs)),
		zap.Int64("positions", p.Rows),
		zap.Int("attempts", attempts), zap.Int64("starting_snapshot", p.Snap.SnapshotID))
}

// DeleteCounts are the delete files live in a snapshot by kind: equality deletes, and position
// deletes of which DVs are deletion vectors (format v3).
type DeleteCounts struct{ Equality, Position, DVs int }

// CountDeletes counts the delete files live in tbl's current snapshot (all zero without one):
// what a reader must apply, and in delete_mode position or dv what is left to convert.
func CountDeletes(ctx context.Context, tbl *table.Table) (DeleteCounts, error) {
	return CountDeletesIn(ctx, tbl, tbl.CurrentSnapshot())
}

// CountDeletesIn is CountDeletes for snapshot snap of tbl (a branch's, an older one).
func CountDeletesIn(ctx context.Context, tbl *table.Table, snap *table.Snapshot) (DeleteCounts, error) {
	var n DeleteCounts
	if snap == nil {
		return n, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return n, err
	}
	_, eqs, pos, err := deletes.LiveFilesAll(fs, snap)
	if err != nil {
		return n, err
	}
	n.Equality, n.Position = len(eqs), len(pos)
	for _, f := range pos {
		if table.IsDeletionVector(f.File) {
			n.DVs++
		}
	}
	return n, nil
}
