package maintenance

import (
	"context"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Deletion vectors written by the writer (Config.WriterVectors, design.md §11.1): in dv mode the
// table's writer asks its maintainer, for each commit attempt, to turn the batch's equality
// deletes into deletion vectors on the table it commits on, and commits those instead. The
// plan is the conversion's (planPositions), made on the writer's goroutine: the batch's keys are
// probed in every live data file of the head (all lie below the commit's sequence number, as
// the equality deletes would apply to all of them), and each touched file's vector is merged
// with its live one, which the commit replaces. A commit that loses a race is restaged on the
// newer head and planned again, so the vectors always hold the head's positions.
//
// Three things keep other commits right beside them:
//   - a conversion merges, when it commits, the vectors a writer replaced since its plan
//     (conversionPlan.remerge) instead of replacing them with its own;
//   - a compaction holds vectorGate from its plan to its commit, so that the writer writes
//     equality deletes meanwhile (the compaction's outputs keep the plan's sequence number, so
//     those still apply to them, and the next conversion turns them into vectors);
//   - a compaction whose rewritten files' vectors changed since its plan anyway (a writer of
//     another worker that still believed it held the lease) is superseded (vectorsMoved).

// WriterVectors are a writer's batch deletes as deletion vectors on the table it commits on:
// Add the vectors to add, Remove the live ones they replace (RowDelta.RemoveDeletes). Release
// must be called once the commit attempt they were planned for has ended.
type WriterVectors struct {
	Add, Remove []iceberg.DataFile
	Positions   int64 // deleted positions in Add, the replaced vectors' included
	Probed      int   // data files whose key column was looked up
	release     func()
}

// Release ends the plan's hold on the maintainer (a compaction waits for it); safe on nil and
// more than once.
func (v *WriterVectors) Release() {
	if v != nil && v.release != nil {
		v.release()
		v.release = nil
	}
}

// Vectors turns eqDels, the equality deletes a writer wrote for a batch it is about to commit on
// head (not committed), into deletion vectors on head. It returns nil and no error when the
// writer is to commit the equality deletes instead: the table is not in dv mode with
// WriterVectors on or not at format v3, its key is not one integer column, this process does not
// hold the table's maintenance lease, or a compaction is under way.
func (m *Maintainer) Vectors(ctx context.Context, head *table.Table, eqDels []iceberg.DataFile) (*WriterVectors, error) {
	if !m.writesVectors() || len(eqDels) == 0 ||
		head.Metadata().Version() < 3 || !m.intKeyed(head, eqDels) {
		return nil, nil
	}
	if !m.ignoreLease && !m.holds(time.Now()) {
		return nil, nil
	}
	if !m.vectorGate.TryRLock() {
		m.vectorsYielded.Add(1)
		return nil, nil
	}
	v := &WriterVectors{release: m.vectorGate.RUnlock}
	snap := head.CurrentSnapshot()
	if snap == nil {
		return v, nil // nothing to delete from
	}
	fs, err := head.FS(ctx)
	if err != nil {
		v.Release()
		return nil, err
	}
	data, _, posDels, err := m.liveCache.liveFiles(fs, snap)
	if err != nil {
		v.Release()
		return nil, err
	}
	own := make([]liveFile, len(eqDels))
	for i, df := range eqDels {
		own[i] = liveFile{df: df, seq: snap.SequenceNumber + 1} // the commit's: above every live file
	}
	p, err := m.planPositions(ctx, head, snap, fs, data, own, posDels)
	if err != nil {
		v.Release()
		return nil, err
	}
	v.Add, v.Remove, v.Positions, v.Probed = p.posDels, p.replacedDVs, p.rows, len(p.probed)
	return v, nil
}

// writesVectors reports whether the table's writer may commit deletion vectors (Vectors).
func (m *Maintainer) writesVectors() bool {
	return m.cfg.WriterVectors && m.cfg.DeleteMode == DeleteModeDV && m.keys != nil && !m.onDemand
}

// intKeyed reports whether eqDels' key is one integer column of head's schema, which the key
// cache looks up without reading the data files' columns again (text keys would read every data
// file's key column at every commit).
func (m *Maintainer) intKeyed(head *table.Table, eqDels []iceberg.DataFile) bool {
	ids := eqDels[0].EqualityFieldIDs()
	if len(ids) != 1 {
		return false
	}
	f, ok := head.Schema().FindFieldByID(ids[0])
	return ok && intKey(ids, f.Type)
}

// VectorsYielded counts the writer commits that wrote equality deletes because a compaction held
// the vector gate (for tests and the benchmark).
func (m *Maintainer) VectorsYielded() int64 { return m.vectorsYielded.Load() }

// vectorsMoved reports whether some data file a compaction rewrites has, in head, another
// deletion vector than in the plan's snapshot: the rewrite would drop the newer positions.
func (m *Maintainer) vectorsMoved(ctx context.Context, p *compactionPlan, head *table.Table) (bool, error) {
	if head.Metadata().Version() < 3 {
		return false, nil
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return false, err
	}
	_, _, before, err := m.liveCache.liveFiles(fs, p.snap)
	if err != nil {
		return false, err
	}
	_, _, now, err := m.liveCache.liveFiles(fs, head.CurrentSnapshot())
	if err != nil {
		return false, err
	}
	was, is := liveDVs(before), liveDVs(now)
	for path := range p.rewritten {
		a, okA := was[path]
		b, okB := is[path]
		if okA != okB || okA && dvKey(a.df) != dvKey(b.df) {
			return true, nil
		}
	}
	return false, nil
}
