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
// files (results) by new vectors. It returns ErrSuperseded when that cannot be done: the table
// has no key (CarryKey) or a vector lost positions (only a rewrite of its file does that).
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
	deleted, err := pl.deletedSince(ctx, fs, head, rewritten, liveDVs(before), is)
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
	if deleted.empty() {
		return out, nil
	}
	out.Keys = deleted.sort()
	if out.Add, out.Positions, err = pl.deleteFromNew(ctx, fs, head.Metadata(), deleted, results); err != nil || len(out.Add) == 0 {
		return out, err
	}
	for i := range out.Results {
		out.Remove = append(out.Remove, out.Results[i].SafeDeletionVectors...)
		out.Results[i].SafeDeletionVectors = nil
	}
	return out, nil
}

// carriedKeys are the keys deleted in a compaction's rewritten files since its plan, of key
// columns keyIDs (of types): integers for one int or long column, else encoded (keyenc.go).
type carriedKeys struct {
	keyIDs []int
	types  []iceberg.Type
	ints   bool
	vals   []int64
	encs   []string
}

func (k *carriedKeys) empty() bool { return len(k.vals) == 0 && len(k.encs) == 0 }

// sort sorts and deduplicates the keys, and returns how many there are.
func (k *carriedKeys) sort() int {
	slices.Sort(k.vals)
	k.vals = slices.Compact(k.vals)
	slices.Sort(k.encs)
	k.encs = slices.Compact(k.encs)
	return len(k.vals) + len(k.encs)
}

// CarryKey returns the columns the writers' deletes of head's rows are keyed by: its identifier
// fields, else a keyless table's record identity (the string column IdentityColumn); nil when
// neither is there or a type has no key encoding.
func CarryKey(schema *iceberg.Schema) []int {
	ids := schema.IdentifierFieldIDs
	if len(ids) == 0 {
		f, ok := schema.FindFieldByName(IdentityColumn)
		if _, str := f.Type.(iceberg.StringType); !ok || !str {
			return nil
		}
		ids = []int{f.ID}
	}
	if !Keyed(schema, ids) {
		return nil
	}
	return ids
}

// IdentityColumn is the column of a keyless table that holds each row's DMS record identity,
// which its writers' deletes are keyed by (sink.KeylessIdentityColumn).
const IdentityColumn = "_dms_record_id"

// keyOf returns the carried keys of head's key (CarryKey), or ErrSuperseded.
func keyOf(head *table.Table) (*carriedKeys, error) {
	ids := CarryKey(head.Schema())
	if ids == nil {
		return nil, ErrSuperseded
	}
	types, err := keyTypes(head.Schema(), ids)
	if err != nil {
		return nil, ErrSuperseded
	}
	return &carriedKeys{keyIDs: ids, types: types, ints: IntKeyed(head.Schema(), ids)}, nil
}

// deletedSince returns the keys deleted in the rewritten files since the plan: at the positions
// their vectors in head (is) hold beyond those of the plan's snapshot (was), read from the key
// columns.
func (pl *Planner) deletedSince(ctx context.Context, fs icebergio.IO, head *table.Table, rewritten map[string]struct{},
	was, is map[string]LiveFile) (*carriedKeys, error) {
	deleted := &carriedKeys{}
	for path := range rewritten {
		a, okA := was[path]
		b, okB := is[path]
		if okA == okB && (!okA || dvKey(a.File) == dvKey(b.File)) {
			continue
		}
		if !okB {
			return nil, ErrSuperseded
		}
		if deleted.keyIDs == nil {
			var err error
			if deleted, err = keyOf(head); err != nil {
				return nil, err
			}
		}
		nowBM, err := dv.ReadDV(fs, b.File)
		if err != nil {
			return nil, fmt.Errorf("read deletion vector of %s: %w", path, err)
		}
		wasBM := dv.NewRoaringPositionBitmap()
		if okA {
			if wasBM, err = dv.ReadDV(fs, a.File); err != nil {
				return nil, fmt.Errorf("read deletion vector of %s: %w", path, err)
			}
		}
		// A file's positions only grow while it lives: one in the plan's vector that the
		// head's lacks means another rewrite, which this one cannot build on.
		for pos := range wasBM.Positions() {
			if !nowBM.Contains(pos) {
				return nil, ErrSuperseded
			}
		}
		if nowBM.Cardinality() == wasBM.Cardinality() {
			continue // the same positions in another vector
		}
		at := func(pos int64) bool { return nowBM.Contains(uint64(pos)) && !wasBM.Contains(uint64(pos)) }
		if deleted.ints {
			err = pl.keys.KeysAt(ctx, fs, path, deleted.keyIDs[0], at, func(key int64) { deleted.vals = append(deleted.vals, key) })
		} else {
			err = pl.keys.EncodedKeysAt(ctx, fs, path, deleted.types, deleted.keyIDs, at, func(key []byte) {
				deleted.encs = append(deleted.encs, string(key))
			})
		}
		if err != nil {
			return nil, fmt.Errorf("read the keys of %s: %w", path, err)
		}
	}
	return deleted, nil
}

// positionsOf returns the positions of new data file df whose key is in deleted.
func (pl *Planner) positionsOf(ctx context.Context, fs icebergio.IO, df iceberg.DataFile, deleted *carriedKeys) ([]int64, error) {
	var positions []int64
	if deleted.ints {
		err := pl.keys.ProbeInts(ctx, fs, df.FilePath(), deleted.keyIDs[0], df.Count(), deleted.vals, func(key, pos int64) {
			if _, found := slices.BinarySearch(deleted.vals, key); found {
				positions = append(positions, pos)
			}
		})
		return positions, err
	}
	err := pl.keys.ProbeKeys(ctx, fs, df.FilePath(), deleted.types, deleted.keyIDs, df.Count(), deleted.encs, func(key []byte, pos int64) {
		if _, found := slices.BinarySearch(deleted.encs, string(key)); found {
			positions = append(positions, pos)
		}
	})
	return positions, err
}

// deleteFromNew writes the vectors deleting the keys deleted (sorted) from the compaction's new
// files, and returns them (none when no new file holds one) and the positions they delete.
func (pl *Planner) deleteFromNew(ctx context.Context, fs icebergio.IO, meta table.Metadata, deleted *carriedKeys,
	results []table.CompactionGroupResult) ([]iceberg.DataFile, int, error) {
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, 0, errors.New("the table's file IO cannot write")
	}
	dvw := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	n := 0
	for _, r := range results {
		for _, df := range r.NewDataFiles {
			positions, err := pl.positionsOf(ctx, fs, df, deleted)
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
