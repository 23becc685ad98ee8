package deletes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// Deletion vectors for a writer's batch (design.md §10.1): the batch's deleted keys are probed
// in every live data file of the head the writer commits on (all lie below the commit's sequence
// number, as equality deletes would apply to all of them), and each touched file's vector is
// merged with its live one, which the commit replaces. A commit that loses a race is restaged on
// the newer head and planned again, so the vectors always hold the head's positions.

// Vectors are a writer's batch deletes as deletion vectors on the table it commits on: Add the
// vectors to add, Remove the live ones they replace (RowDelta.RemoveDeletes).
type Vectors struct {
	Add, Remove []iceberg.DataFile
	Positions   int64 // deleted positions in Add, the replaced vectors' included
	Probed      int   // data files whose key column was looked up
}

// vectors is the plan as a writer commits it.
func (p *Plan) vectors() *Vectors {
	return &Vectors{Add: p.PosDels, Remove: p.ReplacedDVs, Positions: p.Rows, Probed: len(p.Probed)}
}

// Keys are deleted keys held in memory: values of a table's key columns. Values are those of a
// single int or long column (int values widened); Tuples those of any other key (one value per
// key column, in key order; none null), encoded canonically for the probe (keyenc.go). With a
// nil Partition they are deleted in every data file, as an equality delete of an unpartitioned
// spec is; else only in the data files of partition Partition of spec SpecID (a data file's
// SpecID and Partition), as an equality-delete file written in that partition is. Partition is
// keyed by partition field id and its values must print (fmt's %v) as those of the partition's
// data files do (DataFile.Partition).
type Keys struct {
	SpecID    int32
	Partition map[int]any
	Values    []int64
	Tuples    [][]dms.Datum
}

// VectorsOfKeys plans the deletes of keys, the values of key columns keyIDs deleted by a batch a
// writer is about to commit on head, as deletion vectors on head, with no equality-delete file
// written or read: what VectorsOfFiles makes of the equality deletes holding the same keys.
// head must be at format version 3; a key of one int or long column is given as Values, any
// other as Tuples (an error for a tuple with a null value, which an equality delete would match
// to null keys and a probe never does).
func (pl *Planner) VectorsOfKeys(ctx context.Context, head *table.Table, keyIDs []int, keys []Keys) (*Vectors, error) {
	meta := head.Metadata()
	if meta.Version() < 3 {
		return nil, errors.New("deletion vectors need format version 3")
	}
	if _, err := checkEncodable(head.Schema(), keyIDs); err != nil {
		return nil, err
	}
	dk := newDeletedKeys(head.Schema(), keyIDs)
	if err := dk.check(keys); err != nil {
		return nil, err
	}
	snap, fs, live, err := pl.liveOf(ctx, head)
	if snap == nil || err != nil {
		return live.none, err
	}
	dk.maxSeq = snap.SequenceNumber + 1 // the commit's: above every live file
	dk.addMemory(meta, keys)
	dk.index()
	p, w, err := pl.start(head, snap, fs, live.posDels)
	if err != nil {
		return nil, err
	}
	p.maxSeq = dk.maxSeq
	if err := pl.probeAll(ctx, p, w, live.data, dk); err != nil {
		return nil, err
	}
	return p.vectors(), nil
}

// check returns an error unless keys are of dk's key columns: integers for one int or long
// column, else tuples of as many values, none null.
func (dk *deletedKeys) check(keys []Keys) error {
	for _, k := range keys {
		if len(k.Values) > 0 && !dk.ints {
			return fmt.Errorf("integer keys for key columns %v, which are not one int or long column", dk.keyIDs)
		}
		if len(k.Tuples) > 0 && dk.ints {
			return fmt.Errorf("tuple keys for the integer key column %v", dk.keyIDs)
		}
		for _, t := range k.Tuples {
			if len(t) != len(dk.types) {
				return fmt.Errorf("a key of %d values for %d key columns", len(t), len(dk.types))
			}
			for _, d := range t {
				if d.Null {
					return errors.New("a deleted key with a null value")
				}
			}
		}
	}
	return nil
}

// addMemory adds keys (checked), deleted at dk.maxSeq, to their scopes.
func (dk *deletedKeys) addMemory(meta table.Metadata, keys []Keys) {
	var buf []byte
	for _, k := range keys {
		sc := dk.global
		if k.Partition != nil {
			sc = dk.scope(meta, k.SpecID, k.Partition)
		}
		for _, v := range k.Values {
			sc.intSeq[v] = dk.maxSeq
		}
		for _, t := range k.Tuples {
			buf = AppendKeyOf(buf[:0], dk.types, t)
			sc.seq[string(buf)] = dk.maxSeq
		}
	}
}

// VectorsOfFiles turns eqDels, the equality deletes a writer wrote for a batch it is about to
// commit on head (not committed), into deletion vectors on head. head must be at format version
// 3.
func (pl *Planner) VectorsOfFiles(ctx context.Context, head *table.Table, eqDels []iceberg.DataFile) (*Vectors, error) {
	snap, fs, live, err := pl.liveOf(ctx, head)
	if snap == nil || err != nil {
		return live.none, err
	}
	data, posDels := live.data, live.posDels
	own := make([]LiveFile, len(eqDels))
	for i, df := range eqDels {
		own[i] = LiveFile{File: df, Seq: snap.SequenceNumber + 1} // the commit's: above every live file
	}
	p, err := pl.Plan(ctx, head, snap, fs, data, own, posDels)
	if err != nil {
		return nil, err
	}
	return p.vectors(), nil
}

// headFiles are the live files of a head a writer's vectors are planned on; none is what to
// return when it has no snapshot (nothing to delete from).
type headFiles struct {
	data, posDels []LiveFile
	none          *Vectors
}

// liveOf returns head's current snapshot, file IO and live data and position-delete files; a nil
// snapshot (and the empty vectors in none) when head has none.
func (pl *Planner) liveOf(ctx context.Context, head *table.Table) (*table.Snapshot, icebergio.IO, headFiles, error) {
	snap := head.CurrentSnapshot()
	if snap == nil {
		return nil, nil, headFiles{none: &Vectors{}}, nil
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return snap, nil, headFiles{}, err
	}
	data, _, posDels, err := pl.manifests.LiveFiles(fs, snap)
	return snap, fs, headFiles{data: data, posDels: posDels}, err
}

// IntKeyed reports whether the key columns keyIDs are one int or long column of schema, whose
// deleted keys are given as Keys.Values (any other as Keys.Tuples).
func IntKeyed(schema *iceberg.Schema, keyIDs []int) bool {
	if len(keyIDs) != 1 {
		return false
	}
	f, ok := schema.FindFieldByID(keyIDs[0])
	return ok && intKey(keyIDs, f.Type)
}

// Keyed reports whether the key columns keyIDs of schema can be planned from memory
// (VectorsOfKeys): every column is in the schema with a type the key encoding covers.
func Keyed(schema *iceberg.Schema, keyIDs []int) bool {
	_, err := checkEncodable(schema, keyIDs)
	return err == nil
}

// PartitionedByKey reports whether every partition field of every spec of meta has its source
// among the key columns keyIDs: rows of equal keys then lie in the same partition, and keys
// deleted in every data file (Keys with no Partition) delete what the partition-scoped equality
// deletes of the same keys would.
func PartitionedByKey(meta table.Metadata, keyIDs []int) bool {
	for _, spec := range meta.PartitionSpecs() {
		for _, f := range spec.Fields() {
			for _, src := range f.SourceIDs {
				if !slices.Contains(keyIDs, src) {
					return false
				}
			}
		}
	}
	return true
}
