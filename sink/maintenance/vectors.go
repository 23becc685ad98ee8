package maintenance

import (
	"context"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
)

// Deletion vectors written by the writer (Config.WriterVectors, design.md §10.1): in dv mode the
// table's writer asks its maintainer, for each commit attempt, to turn the batch's deletes into
// deletion vectors on the table it commits on, and commits those instead. The plan is made by
// the maintainer's planner (sink/deletes), on the writer's goroutine, through the caches the
// conversions use.
//
// Two things keep the maintainer's own commits right beside them:
//   - a conversion merges, when it commits, the vectors a writer replaced since its plan
//     (deletes.Plan.Remerge) instead of replacing them with its own;
//   - a compaction carries, when it commits, the positions a writer deleted since its plan in the
//     files it rewrites over to the files it wrote (deletes.Planner.Carry).
//
// Any worker's writer may write vectors, whoever holds the maintenance lease: a lost race is
// restaged and planned again on the newer head like any commit.

// WriterVectors are a writer's batch deletes as deletion vectors on the table it commits on:
// Add the vectors to add, Remove the live ones they replace (RowDelta.RemoveDeletes).
type WriterVectors = deletes.Vectors

// KeyCache keeps the key columns of data files in memory for the probes of every table's
// maintainer in the process (deletes.KeyCache).
type KeyCache = deletes.KeyCache

// NewKeyCache returns a cache of at most limit bytes of key columns; limit <= 0 returns nil (no
// cache).
func NewKeyCache(limit int64) *KeyCache { return deletes.NewKeyCache(limit) }

// UseKeyCache makes m's conversions and vectors probe through c (nil: read every file; no
// writer vectors). Call it before Run.
func (m *Maintainer) UseKeyCache(c *KeyCache) { m.planner.UseKeyCache(c) }

// Vectors turns eqDels, the equality deletes a writer wrote for a batch it is about to commit on
// head (not committed), into deletion vectors on head. It returns nil and no error when the
// writer is to commit the equality deletes instead: the table is not in dv mode with
// WriterVectors on or not at format v3, the process keeps no key cache, or the key is not one
// integer column.
func (m *Maintainer) Vectors(ctx context.Context, head *table.Table, eqDels []iceberg.DataFile) (*WriterVectors, error) {
	if len(eqDels) == 0 || !m.WritesVectors(head) || !deletes.IntKeyed(head.Schema(), eqDels[0].EqualityFieldIDs()) {
		return nil, nil
	}
	return m.planner.VectorsOfFiles(ctx, head, eqDels)
}

// VectorsOfKeys is Vectors for deleted keys held in memory: keys are values of head's key
// columns keyIDs (deletes.Keys: integers for one int or long column, else tuples), deleted by a
// batch the writer is about to commit on head. No equality-delete file is written or read. It
// returns nil and no error when the writer is to commit equality deletes instead: the table is
// not in dv mode with WriterVectors on or not at format v3, or the process keeps no key cache.
func (m *Maintainer) VectorsOfKeys(ctx context.Context, head *table.Table, keyIDs []int, keys []deletes.Keys) (*WriterVectors, error) {
	if len(keys) == 0 || !m.WritesVectors(head) || !deletes.Keyed(head.Schema(), keyIDs) {
		return nil, nil
	}
	return m.planner.VectorsOfKeys(ctx, head, keyIDs, keys)
}

// WritesVectors reports whether the table's writers commit deletion vectors on head: dv mode
// with WriterVectors on, a key cache (the index a probe looks keys up in, design.md §10.1) and
// format v3. From equality-delete files (Vectors) only for a key of one integer column: other
// keys are planned from the keys in memory (VectorsOfKeys).
func (m *Maintainer) WritesVectors(head *table.Table) bool {
	return m.cfg.WriterVectors && m.cfg.DeleteMode == DeleteModeDV && m.planner.KeyCache() != nil &&
		head.Metadata().Version() >= 3
}
