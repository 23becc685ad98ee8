package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
	"go.uber.org/zap"
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
// Two things keep the maintainer's own commits right beside them:
//   - a conversion merges, when it commits, the vectors a writer replaced since its plan
//     (conversionPlan.remerge) instead of replacing them with its own;
//   - a compaction carries, when it commits, the positions a writer deleted since its plan in the
//     files it rewrites over to the files it wrote (carryVectors): it reads the keys at those
//     positions and deletes the rows with those keys from its new files, with new vectors in the
//     same commit. With random keys nearly every commit touches every file, so a compaction
//     that gave up on a changed vector would never commit; and pausing the writers' vectors
//     for it would leave equality deletes on main around every compaction.
//
// Any worker's writer may write vectors, whoever holds the maintenance lease: a lost race is
// restaged and planned again on the newer head like any commit.

// WriterVectors are a writer's batch deletes as deletion vectors on the table it commits on:
// Add the vectors to add, Remove the live ones they replace (RowDelta.RemoveDeletes).
type WriterVectors struct {
	Add, Remove []iceberg.DataFile
	Positions   int64 // deleted positions in Add, the replaced vectors' included
	Probed      int   // data files whose key column was looked up
}

// Vectors turns eqDels, the equality deletes a writer wrote for a batch it is about to commit on
// head (not committed), into deletion vectors on head. It returns nil and no error when the
// writer is to commit the equality deletes instead: the table is not in dv mode with
// WriterVectors on or not at format v3, the process keeps no key cache, or the key is not one
// integer column.
func (m *Maintainer) Vectors(ctx context.Context, head *table.Table, eqDels []iceberg.DataFile) (*WriterVectors, error) {
	if !m.writesVectors() || m.keys == nil || len(eqDels) == 0 ||
		head.Metadata().Version() < 3 || !m.intKeyed(head, eqDels) {
		return nil, nil
	}
	v := &WriterVectors{}
	snap := head.CurrentSnapshot()
	if snap == nil {
		return v, nil // nothing to delete from
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return nil, err
	}
	data, _, posDels, err := m.liveCache.liveFiles(fs, snap)
	if err != nil {
		return nil, err
	}
	own := make([]liveFile, len(eqDels))
	for i, df := range eqDels {
		own[i] = liveFile{df: df, seq: snap.SequenceNumber + 1} // the commit's: above every live file
	}
	p, err := m.planPositions(ctx, head, snap, fs, data, own, posDels)
	if err != nil {
		return nil, err
	}
	v.Add, v.Remove, v.Positions, v.Probed = p.posDels, p.replacedDVs, p.rows, len(p.probed)
	return v, nil
}

// writesVectors reports whether the table's writers may commit deletion vectors (Vectors).
func (m *Maintainer) writesVectors() bool {
	return m.cfg.WriterVectors && m.cfg.DeleteMode == DeleteModeDV
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

// carried is a compaction's commit on a head whose rewritten files gained vector positions
// since its plan: results with the head's vectors as the ones removed, and add, the vectors of
// the new files holding the carried positions.
type carried struct {
	results []table.CompactionGroupResult
	add     []iceberg.DataFile
	// remove are the head's vectors of the rewritten files when add is not empty: removed
	// explicitly (iceberg-go's rewrite adds delete files only in place of others).
	remove []iceberg.DataFile
}

// carryVectors compares the deletion vectors of the files p rewrites in head with those of the
// plan's snapshot. Where they differ, the rows at the positions deleted since (their keys, read
// from the key column) are deleted from the compaction's new files by new vectors. It returns
// errSuperseded when that cannot be done: the table's key is not one integer column, or a
// vector lost positions (only a rewrite of its file does that).
func (m *Maintainer) carryVectors(ctx context.Context, p *compactionPlan, results []table.CompactionGroupResult, head *table.Table) (carried, error) {
	out := carried{results: results}
	if head.Metadata().Version() < 3 {
		return out, nil
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return out, err
	}
	_, _, before, err := m.liveCache.liveFiles(fs, p.snap)
	if err != nil {
		return out, err
	}
	_, _, now, err := m.liveCache.liveFiles(fs, head.CurrentSnapshot())
	if err != nil {
		return out, err
	}
	was, is := liveDVs(before), liveDVs(now)
	var deleted []int64 // keys deleted since the plan in the rewritten files
	keyID := -1
	for path := range p.rewritten {
		a, okA := was[path]
		b, okB := is[path]
		if okA == okB && (!okA || dvKey(a.df) == dvKey(b.df)) {
			continue
		}
		if !okB {
			return out, errSuperseded
		}
		if keyID < 0 {
			if keyID = intIdentifier(head); keyID < 0 {
				return out, errSuperseded
			}
		}
		nowBM, err := dv.ReadDV(fs, b.df)
		if err != nil {
			return out, fmt.Errorf("read deletion vector of %s: %w", path, err)
		}
		wasBM := dv.NewRoaringPositionBitmap()
		if okA {
			if wasBM, err = dv.ReadDV(fs, a.df); err != nil {
				return out, fmt.Errorf("read deletion vector of %s: %w", path, err)
			}
		}
		// A file's positions only grow while it lives: one in the plan's vector that the
		// head's lacks means another rewrite, which this one cannot build on.
		for pos := range wasBM.Positions() {
			if !nowBM.Contains(pos) {
				return out, errSuperseded
			}
		}
		if nowBM.Cardinality() == wasBM.Cardinality() {
			continue // the same positions in another vector
		}
		err = m.keys.keysAt(ctx, fs, path, keyID, func(pos int64) bool {
			return nowBM.Contains(uint64(pos)) && !wasBM.Contains(uint64(pos))
		}, func(key int64) { deleted = append(deleted, key) })
		if err != nil {
			return out, fmt.Errorf("read the keys of %s: %w", path, err)
		}
	}
	// The head's vectors of the rewritten files are the ones the rewrite removes.
	out.results = make([]table.CompactionGroupResult, len(results))
	for i, r := range results {
		r.SafeDeletionVectors = nil
		for _, old := range r.OldDataFiles {
			if e, ok := is[old.FilePath()]; ok {
				r.SafeDeletionVectors = append(r.SafeDeletionVectors, e.df)
			}
		}
		out.results[i] = r
	}
	if len(deleted) == 0 {
		return out, nil
	}
	slices.Sort(deleted)
	deleted = slices.Compact(deleted)
	meta := head.Metadata()
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return out, errors.New("the table's file IO cannot write")
	}
	dvw := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	n := 0
	for _, r := range results {
		for _, df := range r.NewDataFiles {
			var positions []int64
			err := m.keys.probeInts(ctx, fs, df.FilePath(), keyID, df.Count(), deleted, func(key, pos int64) {
				if _, found := slices.BinarySearch(deleted, key); found {
					positions = append(positions, pos)
				}
			})
			if err != nil {
				return out, fmt.Errorf("probe %s: %w", df.FilePath(), err)
			}
			if len(positions) == 0 {
				continue
			}
			n += len(positions)
			if err := dvw.Add(df.FilePath(), positions, df.SpecID(), df.Partition()); err != nil {
				return out, err
			}
		}
	}
	if n == 0 {
		return out, nil
	}
	location, err := deleteLocationOf(meta)
	if err != nil {
		return out, err
	}
	out.add, err = dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", location, uuid.NewString()))
	if err != nil {
		return out, fmt.Errorf("write deletion vectors: %w", err)
	}
	for i := range out.results {
		out.remove = append(out.remove, out.results[i].SafeDeletionVectors...)
		out.results[i].SafeDeletionVectors = nil
	}
	m.log.Info("compaction carries deletion-vector positions committed since its plan",
		zap.Int("keys", len(deleted)), zap.Int("positions", n))
	return out, nil
}

// intIdentifier returns the field id of head's key when it is one int or long column, else -1.
func intIdentifier(head *table.Table) int {
	sc := head.Schema()
	ids := sc.IdentifierFieldIDs
	if len(ids) != 1 {
		return -1
	}
	if f, ok := sc.FindFieldByID(ids[0]); ok && intKey(ids, f.Type) {
		return ids[0]
	}
	return -1
}
