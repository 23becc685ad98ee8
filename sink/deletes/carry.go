package deletes

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
)

// A compaction carries, when it commits, the positions a writer deleted since its plan in the
// files it rewrites over to the files it wrote: it reads the keys at those positions and deletes
// the rows with those keys from its new files, with new vectors in the same commit. With random
// keys nearly every commit touches every file, so a compaction that gave up on a changed vector
// would never commit; and pausing the writers' vectors for it would leave equality deletes on
// main around every compaction.

// Carried is a compaction's commit on a head whose rewritten files gained vector positions since
// its plan: Results with the head's vectors as the ones removed, and Add, the vectors of the new
// files holding the carried positions.
type Carried struct {
	Results []table.CompactionGroupResult
	Add     []iceberg.DataFile
	// Remove are the head's vectors of the rewritten files when Add is not empty: removed
	// explicitly (iceberg-go's rewrite adds delete files only in place of others).
	Remove []iceberg.DataFile
	// Keys and Positions count the keys deleted since the plan and the positions of the new
	// files they delete.
	Keys, Positions int
}

// Carry compares the deletion vectors of the files a compaction planned on snap rewrites
// (rewritten, by path) in head with those of snap. Where they differ, the rows at the positions
// deleted since (their keys, read from the key column) are deleted from the compaction's new
// files (results) by new vectors. It returns ErrSuperseded when that cannot be done: the table's
// key is not one integer column, or a vector lost positions (only a rewrite of its file does
// that).
func (pl *Planner) Carry(ctx context.Context, snap *table.Snapshot, rewritten map[string]struct{},
	results []table.CompactionGroupResult, head *table.Table) (Carried, error) {
	out := Carried{Results: results}
	if head.Metadata().Version() < 3 {
		return out, nil
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return out, err
	}
	_, _, before, err := pl.manifests.LiveFiles(fs, snap)
	if err != nil {
		return out, err
	}
	_, _, now, err := pl.manifests.LiveFiles(fs, head.CurrentSnapshot())
	if err != nil {
		return out, err
	}
	is := liveDVs(now)
	deleted, keyID, err := pl.deletedSince(ctx, fs, head, rewritten, liveDVs(before), is)
	if err != nil {
		return out, err
	}
	// The head's vectors of the rewritten files are the ones the rewrite removes.
	out.Results = make([]table.CompactionGroupResult, len(results))
	for i, r := range results {
		r.SafeDeletionVectors = nil
		for _, old := range r.OldDataFiles {
			if e, ok := is[old.FilePath()]; ok {
				r.SafeDeletionVectors = append(r.SafeDeletionVectors, e.File)
			}
		}
		out.Results[i] = r
	}
	if len(deleted) == 0 {
		return out, nil
	}
	slices.Sort(deleted)
	deleted = slices.Compact(deleted)
	out.Keys = len(deleted)
	if out.Add, out.Positions, err = pl.deleteFromNew(ctx, fs, head.Metadata(), keyID, deleted, results); err != nil || len(out.Add) == 0 {
		return out, err
	}
	for i := range out.Results {
		out.Remove = append(out.Remove, out.Results[i].SafeDeletionVectors...)
		out.Results[i].SafeDeletionVectors = nil
	}
	return out, nil
}

// deletedSince returns the keys deleted in the rewritten files since the plan: at the positions
// their vectors in head (is) hold beyond those of the plan's snapshot (was), and the key column
// they were read from.
func (pl *Planner) deletedSince(ctx context.Context, fs icebergio.IO, head *table.Table, rewritten map[string]struct{},
	was, is map[string]LiveFile) (deleted []int64, keyID int, err error) {
	keyID = -1
	for path := range rewritten {
		a, okA := was[path]
		b, okB := is[path]
		if okA == okB && (!okA || dvKey(a.File) == dvKey(b.File)) {
			continue
		}
		if !okB {
			return nil, keyID, ErrSuperseded
		}
		if keyID < 0 {
			if keyID = IntIdentifier(head); keyID < 0 {
				return nil, keyID, ErrSuperseded
			}
		}
		nowBM, err := dv.ReadDV(fs, b.File)
		if err != nil {
			return nil, keyID, fmt.Errorf("read deletion vector of %s: %w", path, err)
		}
		wasBM := dv.NewRoaringPositionBitmap()
		if okA {
			if wasBM, err = dv.ReadDV(fs, a.File); err != nil {
				return nil, keyID, fmt.Errorf("read deletion vector of %s: %w", path, err)
			}
		}
		// A file's positions only grow while it lives: one in the plan's vector that the
		// head's lacks means another rewrite, which this one cannot build on.
		for pos := range wasBM.Positions() {
			if !nowBM.Contains(pos) {
				return nil, keyID, ErrSuperseded
			}
		}
		if nowBM.Cardinality() == wasBM.Cardinality() {
			continue // the same positions in another vector
		}
		err = pl.keys.KeysAt(ctx, fs, path, keyID, func(pos int64) bool {
			return nowBM.Contains(uint64(pos)) && !wasBM.Contains(uint64(pos))
		}, func(key int64) { deleted = append(deleted, key) })
		if err != nil {
			return nil, keyID, fmt.Errorf("read the keys of %s: %w", path, err)
		}
	}
	return deleted, keyID, nil
}

// deleteFromNew writes the vectors deleting the keys deleted (sorted) from the compaction's new
// files, and returns them (none when no new file holds one) and the positions they delete.
func (pl *Planner) deleteFromNew(ctx context.Context, fs icebergio.IO, meta table.Metadata, keyID int, deleted []int64,
	results []table.CompactionGroupResult) ([]iceberg.DataFile, int, error) {
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, 0, errors.New("the table's file IO cannot write")
	}
	dvw := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	n := 0
	for _, r := range results {
		for _, df := range r.NewDataFiles {
			var positions []int64
			err := pl.keys.ProbeInts(ctx, fs, df.FilePath(), keyID, df.Count(), deleted, func(key, pos int64) {
				if _, found := slices.BinarySearch(deleted, key); found {
					positions = append(positions, pos)
				}
			})
			if err != nil {
				return nil, 0, fmt.Errorf("probe %s: %w", df.FilePath(), err)
			}
			if len(positions) == 0 {
				continue
			}
			n += len(positions)
			if err := dvw.Add(df.FilePath(), positions, df.SpecID(), df.Partition()); err != nil {
				return nil, 0, err
			}
		}
	}
	if n == 0 {
		return nil, 0, nil
	}
	location, err := deleteLocationOf(meta)
	if err != nil {
		return nil, 0, err
	}
	add, err := dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", location, uuid.NewString()))
	if err != nil {
		return nil, 0, fmt.Errorf("write deletion vectors: %w", err)
	}
	return add, n, nil
}
