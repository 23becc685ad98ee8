package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// vectorMaintainer is a dv-mode maintainer with writer vectors on, a key cache and the lease.
func vectorMaintainer(t *testing.T, h *harness) *maintenance.Maintainer {
	t.Helper()
	cfg := testConfig()
	cfg.DeleteMode = maintenance.DeleteModeDV
	cfg.WriterVectors = true
	mt := testMaintainer(t, h.cat, cfg)
	mt.UseKeyCache(maintenance.NewKeyCache(64 << 20))
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	return mt
}

// vectorsOnly checks that the table reads the model's rows with no equality-delete file and one
// deletion vector per data file that has any, and returns it.
func vectorsOnly(t *testing.T, h *harness, m *model) *table.Table {
	t.Helper()
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 0 {
		t.Fatalf("%d equality-delete files", eqFiles)
	}
	for path, n := range posDeletesPerDataFile(t, tbl) {
		if n != 1 {
			t.Fatalf("data file %s has %d deletion vectors, want 1", path, n)
		}
	}
	return tbl
}

// converted opens a dv table of keys 1..n, commits batch 1 and converts its equality deletes
// with a vector maintainer (writer vectors on, key cache, lease), which it returns.
func converted(t *testing.T, n int) (*harness, *model, *maintenance.Maintainer) {
	t.Helper()
	h := newHarnessFor(t, t.TempDir(), dvDef())
	m := newModel(h)
	m.load(n)
	m.batch(1, n)
	mt := vectorMaintainer(t, h)
	if rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly); err != nil || !rep.Converted {
		t.Fatalf("conversion: %v %+v", err, rep)
	}
	return h, m, mt
}

// writeKeyDeletes writes, as the table's writer does for a batch, an equality-delete file of
// ids on tbl (nothing is committed).
func writeKeyDeletes(t *testing.T, tbl *table.Table, ids []int) []iceberg.DataFile {
	t.Helper()
	f, ok := tbl.Schema().FindFieldByName("id")
	if !ok {
		t.Fatal("no id column")
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32,
		Metadata: arrow.NewMetadata([]string{table.ArrowParquetFieldIDKey}, []string{strconv.Itoa(f.ID)})}}, nil)
	b := array.NewRecordBuilder(sinktest.Allocator(t), sc)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int32Builder).Append(int32(id))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	files, err := tbl.NewTransaction().WriteEqualityDeletes(context.Background(), []int{f.ID},
		func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// commitVectors deletes ids as a writer with vectors does: it plans the vectors on the newest
// table and commits them in place of the equality deletes, which it then removes. It fails the
// test when the maintainer declines.
func commitVectors(t *testing.T, h *harness, mt *maintenance.Maintainer, m *model, ids []int) *maintenance.WriterVectors {
	t.Helper()
	ctx := context.Background()
	tbl := loadUsers(t, h.cat)
	eqDels := writeKeyDeletes(t, tbl, ids)
	v, err := mt.Vectors(ctx, tbl, eqDels)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		t.Fatal("the maintainer declined to plan vectors")
	}
	txn := tbl.NewTransaction()
	rd := txn.NewRowDelta(nil).AddDeletes(v.Add...)
	if len(v.Remove) > 0 {
		rd.RemoveDeletes(v.Remove...)
	}
	if err := rd.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		delete(m.rows, id)
	}
	return v
}

// A writer's deletion vectors delete a key in every data file that holds it (the load's and a
// later batch's), keep one vector per data file (merged with the live one, which they replace),
// and leave no equality delete: the table reads the model's rows.
func TestWriterVectorsDeleteKeysInEveryDataFile(t *testing.T) {
	t.Parallel()
	h, m, mt := converted(t, 300) // batch 1 updates keys of the load: their old images stay in its file
	updated := []int{}
	for id := 1; id <= 300; id += 7 {
		if _, ok := m.rows[id]; ok {
			updated = append(updated, id) // 1, 8, ...: updated by batch 1, in two files
		}
	}
	v := commitVectors(t, h, mt, m, updated[:10])
	if v.Probed < 2 || len(v.Remove) == 0 {
		t.Fatalf("plan %+v: want at least the load's and batch 1's files probed and the load's vector replaced", v)
	}
	vectorsOnly(t, h, m)
	commitVectors(t, h, mt, m, []int{2, 3, 5, 299, 300, 1000}) // 1000: no such key
	vectorsOnly(t, h, m)
	h.close()
}

// Vectors declines (the writer then commits its equality deletes) outside dv mode with writer
// vectors on and without a key cache; the lease does not matter.
func TestWriterVectorsDecline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarnessFor(t, dir, dvDef())
	m := newModel(h)
	m.load(100)
	m.batch(1, 100)
	ctx := context.Background()
	tbl := loadUsers(t, h.cat)
	eqDels := writeKeyDeletes(t, tbl, []int{1})

	off := testConfig()
	off.DeleteMode, off.WriterVectors = maintenance.DeleteModeDV, false
	a := testMaintainer(t, h.cat, off)
	a.UseKeyCache(maintenance.NewKeyCache(1 << 20))
	a.IgnoreLease()
	if v, err := a.Vectors(ctx, tbl, eqDels); v != nil || err != nil {
		t.Fatalf("writer_vectors off: %+v %v, want nil", v, err)
	}
	// Any worker's writer may write vectors, whoever holds the maintenance lease.
	noLease := testConfig()
	noLease.DeleteMode, noLease.WriterVectors = maintenance.DeleteModeDV, true
	b := testMaintainer(t, h.cat, noLease)
	b.UseKeyCache(maintenance.NewKeyCache(1 << 20))
	if v, err := b.Vectors(ctx, tbl, eqDels); v == nil || err != nil {
		t.Fatalf("without the lease: %+v %v, want vectors", v, err)
	}
	noCache := testMaintainer(t, h.cat, noLease)
	if v, err := noCache.Vectors(ctx, tbl, eqDels); v != nil || err != nil {
		t.Fatalf("without a key cache: %+v %v, want nil", v, err)
	}
	removeFiles(t, tbl, eqDels)
	h.close()
}

// Deleted keys held in memory (VectorsOfKeys) make the deletion vectors the same keys' equality
// deletes make (Vectors): the same data files probed, the same live vectors replaced, the same
// positions in each data file's vector; committed, the table reads the model's rows. Keys that
// no file holds and an empty batch change nothing; outside dv mode VectorsOfKeys declines.
func TestWriterVectorsOfKeysMatchEqualityDeletes(t *testing.T) {
	t.Parallel()
	h, m, mt := converted(t, 300)
	ctx := context.Background()
	ids := []int{1, 8, 15, 22, 2, 3, 5, 299, 300, 1000} // 1000: no such key
	tbl := loadUsers(t, h.cat)
	eqDels := writeKeyDeletes(t, tbl, ids)
	byFiles, err := mt.Vectors(ctx, tbl, eqDels)
	if err != nil || byFiles == nil {
		t.Fatalf("Vectors: %+v %v", byFiles, err)
	}
	removeFiles(t, tbl, eqDels)
	keyID := tbl.Schema().IdentifierFieldIDs[0]
	keys := make([]int64, len(ids))
	for i, id := range ids {
		keys[i] = int64(id)
	}
	byKeys, err := mt.VectorsOfKeys(ctx, tbl, []int{keyID}, []deletes.Keys{{Values: keys}})
	if err != nil || byKeys == nil {
		t.Fatalf("VectorsOfKeys: %+v %v", byKeys, err)
	}
	if byKeys.Probed != byFiles.Probed || byKeys.Positions != byFiles.Positions || byKeys.Positions == 0 {
		t.Fatalf("from keys: %d files probed, %d positions; from equality deletes: %d, %d",
			byKeys.Probed, byKeys.Positions, byFiles.Probed, byFiles.Positions)
	}
	if got, want := paths(byKeys.Remove), paths(byFiles.Remove); !slices.Equal(got, want) {
		t.Fatalf("replaced vectors %v, want %v", got, want)
	}
	if got, want := sinktest.VectorPositions(t, tbl, byKeys.Add), sinktest.VectorPositions(t, tbl, byFiles.Add); !maps.EqualFunc(got, want, slices.Equal[[]uint64]) {
		t.Fatalf("positions from keys %v, from equality deletes %v", got, want)
	}
	removeFiles(t, tbl, byFiles.Add)
	commit := func(v *maintenance.WriterVectors) {
		t.Helper()
		txn := tbl.NewTransaction()
		rd := txn.NewRowDelta(nil).AddDeletes(v.Add...)
		if len(v.Remove) > 0 {
			rd.RemoveDeletes(v.Remove...)
		}
		if err := rd.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit(byKeys)
	for _, id := range ids {
		delete(m.rows, id)
	}
	tbl = vectorsOnly(t, h, m)
	if v, err := mt.VectorsOfKeys(ctx, tbl, []int{keyID}, []deletes.Keys{{Values: []int64{5000}}}); err != nil || len(v.Add) != 0 || v.Positions != 0 {
		t.Fatalf("keys no file holds: %+v %v, want no vector", v, err)
	}
	if v, err := mt.VectorsOfKeys(ctx, tbl, []int{keyID}, nil); v != nil || err != nil {
		t.Fatalf("no keys: %+v %v, want nil", v, err)
	}
	off := testConfig()
	off.DeleteMode, off.WriterVectors = maintenance.DeleteModeDV, false
	declines := testMaintainer(t, h.cat, off)
	declines.UseKeyCache(maintenance.NewKeyCache(1 << 20))
	if v, err := declines.VectorsOfKeys(ctx, tbl, []int{keyID}, []deletes.Keys{{Values: keys}}); v != nil || err != nil {
		t.Fatalf("writer_vectors off: %+v %v, want nil", v, err)
	}
	h.close()
}

// paths returns the sorted paths of files (with a vector's offset, which names it in its file).
func paths(files []iceberg.DataFile) []string {
	var out []string
	for _, df := range files {
		p := df.FilePath()
		if off := df.ContentOffset(); off != nil {
			p += "@" + strconv.FormatInt(*off, 10)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func removeFiles(t *testing.T, tbl *table.Table, files []iceberg.DataFile) {
	t.Helper()
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// A writer's deletion vectors committed while a compaction rewrites the files they apply to are
// carried over to the compaction's new files in its commit: the rows they delete stay deleted,
// no vector is left on a removed file, and the new files' vectors hold exactly those rows. A
// compaction that gave up instead would never commit beside a writer with random keys.
func TestCompactionCarriesVectorsCommittedSinceItsPlan(t *testing.T) {
	t.Parallel()
	h, m, mt := converted(t, 200)
	ctx := context.Background()
	// Another worker's writer, while the compaction rewrites: keys of the load (whose file
	// already has a vector) and of batch 1's file (which has none yet).
	other := testConfig()
	other.DeleteMode, other.WriterVectors = maintenance.DeleteModeDV, true
	o := testMaintainer(t, h.cat, other)
	o.UseKeyCache(maintenance.NewKeyCache(1 << 20))
	var victims []int
	for id := 1; id <= 200 && len(victims) < 8; id += 3 {
		if _, ok := m.rows[id]; ok {
			victims = append(victims, id)
		}
	}
	mt.AfterRewrite(func() { commitVectors(t, h, o, m, victims) })
	rep, err := mt.Maintain(ctx, maintenance.CompactOnly)
	if err != nil || !rep.Compacted {
		t.Fatalf("compaction beside a writer's vectors: %v, report %+v: want compacted", err, rep)
	}
	tbl := vectorsOnly(t, h, m)
	live := sinktest.DataSeqs(t, tbl)
	carried := int64(0)
	for _, df := range sinktest.LiveEntries(t, tbl) {
		ref := df.ReferencedDataFile()
		if !table.IsDeletionVector(df) || ref == nil {
			continue
		}
		if _, ok := live[*ref]; !ok {
			t.Fatalf("a deletion vector references %s, which the compaction rewrote", *ref)
		}
		carried += df.Count()
	}
	if carried != int64(len(victims)) {
		t.Fatalf("the new files' vectors hold %d positions, want the %d rows deleted during the compaction", carried, len(victims))
	}
	h.close()
}

// A conversion planned before a writer replaced some of the probed files' deletion vectors
// merges the newer vectors when it commits: the table keeps both the conversion's positions
// and the writer's, one vector per data file.
func TestConversionMergesVectorsAWriterReplaced(t *testing.T) {
	t.Parallel()
	h, m, mt := converted(t, 200)
	ctx := context.Background()
	m.batch(2, 200) // equality deletes for the next conversion
	victims := []int{}
	for id := 4; id <= 200 && len(victims) < 6; id += 3 {
		if _, ok := m.rows[id]; ok {
			victims = append(victims, id)
		}
	}
	mt.AfterRewrite(func() { commitVectors(t, h, mt, m, victims) }) // after the plan, before commit 1
	rep, err := mt.Maintain(ctx, maintenance.PositionOnly)
	if err != nil || !rep.Converted || rep.VectorsRemerged == 0 {
		t.Fatalf("conversion beside a writer's vectors: %v, report %+v: want converted with the newer vectors merged", err, rep)
	}
	vectorsOnly(t, h, m)
	h.close()
}

// A conversion by a second maintainer (a lost lease, or maintain --ignore-lease) that commits
// while a compaction rewrites: its vectors hide rows that equality deletes already hid when the
// compaction planned, and that the rewrite therefore left out. They are not deletes of keys
// since the plan, which the compaction carries over to its new files by key: the new files
// hold the keys' newer images (keys 1..20 updated in two batches: the first batch's images
// hidden by the second's equality deletes, both batches' small files rewritten, the large load
// file kept, so no equality delete is dead). The rows stay the model's, whether the
// conversion's second commit (dropping the equality deletes) landed before the compaction's
// commit or not; a compaction that cannot tell superseded and replans.
func TestCompactionBesideAnotherMaintainersConversion(t *testing.T) {
	t.Parallel()
	for _, whole := range []bool{true, false} {
		name := map[bool]string{true: "both commits", false: "first commit only"}[whole]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarnessFor(t, t.TempDir(), dvDef())
			m := newModel(h)
			m.load(4000)
			ctx := context.Background()
			cfg := testConfig()
			cfg.DeleteMode = maintenance.DeleteModeDV
			cfg.TargetFileSize = 16 << 10 // the load's file is large, the batches' small
			mt := testMaintainer(t, h.cat, cfg)
			mt.IgnoreLease()
			// The load's own equality deletes (dead: they apply to no older file) go first.
			if _, err := mt.Maintain(ctx, maintenance.PositionOnly); err != nil {
				t.Fatal(err)
			}
			for b := 1; b <= 2; b++ {
				for id := 1; id <= 20; id++ {
					m.upsert("s0", id, fmt.Sprintf("u%d", b))
				}
				h.flush()
			}
			o := testMaintainer(t, h.cat, cfg)
			o.IgnoreLease()
			if !whole {
				o.BeforeCommit(func(step string, _ int) {
					if step == "position-drop" {
						panic(errStopHere)
					}
				})
			}
			converted := false
			mt.AfterRewrite(func() {
				defer func() {
					if r := recover(); r != nil && r != errStopHere {
						panic(r)
					}
				}()
				converted = true
				if rep, err := o.Maintain(ctx, maintenance.PositionOnly); err != nil || !rep.Converted {
					t.Errorf("the other maintainer's conversion: %v %+v", err, rep)
				}
			})
			rep, err := mt.Maintain(ctx, maintenance.CompactOnly)
			if !converted {
				t.Fatal("the compaction rewrote nothing")
			}
			t.Logf("compaction: %v; compacted %v, %d files rewritten", err, rep.Compacted, rep.DataFilesRewritten)
			rows, tbl := scanRows(t, h.cat)
			sinktest.Eq(t, rows, m.want()...)
			live := sinktest.DataSeqs(t, tbl)
			for _, df := range sinktest.LiveEntries(t, tbl) {
				if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil {
					if _, ok := live[*ref]; !ok {
						t.Fatalf("a deletion vector references %s, which is not live", *ref)
					}
				}
			}
			// The next compaction, alone, compacts.
			mt.AfterRewrite(nil)
			if rep, err := mt.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted {
				t.Fatalf("the next compaction: %v, compacted %v", err, rep.Compacted)
			}
			rows, _ = scanRows(t, h.cat)
			sinktest.Eq(t, rows, m.want()...)
			h.close()
		})
	}
}

var errStopHere = errors.New("stop here")

// A table written before it became format v3 (by this service in position mode, or by another
// engine) holds Parquet position-delete files. A writer's deletion vector for such a data file
// merges their positions (deletes.Plan.addDV), and from then on no reader applies them (the v3
// spec: position deletes are ignored for a data file with a vector), but the writer's commit
// cannot drop them (iceberg-go's RowDelta removes vectors only) and, with writer vectors, no
// conversion ever runs to drop them. The next maintenance run drops them; the rows stay the
// model's. A Parquet file of a data file without a vector stays.
func TestMaintenanceDropsPositionDeletesAVectorSuperseded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir()) // format v2
	m := newModel(h)
	m.load(4000) // one large data file
	for id := 1; id <= 4000; id += 400 {
		m.del("s0", id)
	}
	for id := 4001; id <= 4020; id++ {
		m.upsert("s0", id, "late") // a small one
	}
	h.flush()
	m.del("s0", 4005)
	h.flush()
	ctx := context.Background()
	pm := testMaintainer(t, h.cat, positionConfig())
	pm.IgnoreLease()
	if rep, err := pm.Maintain(ctx, maintenance.PositionOnly); err != nil || !rep.Converted {
		t.Fatalf("conversion: %v %+v", err, rep)
	}
	tbl := loadUsers(t, h.cat)
	txn := tbl.NewTransaction()
	if err := txn.UpgradeFormatVersion(3); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	parquet := func() (onVectored, other int) {
		tbl := loadUsers(t, h.cat)
		vectored := map[string]bool{}
		entries := sinktest.LiveEntries(t, tbl)
		for _, df := range entries {
			if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil {
				vectored[*ref] = true
			}
		}
		for _, df := range entries {
			if df.ContentType() != iceberg.EntryContentPosDeletes || table.IsDeletionVector(df) {
				continue
			}
			if vectored[string(df.LowerBoundValues()[deletes.PosPathField])] {
				onVectored++
			} else {
				other++
			}
		}
		return onVectored, other
	}
	if on, other := parquet(); on != 0 || other != 2 {
		t.Fatalf("%d Parquet position-delete files on data files with vectors, %d others; want 0 and 2 before the vectors", on, other)
	}
	cfg := testConfig()
	cfg.DeleteMode, cfg.WriterVectors = maintenance.DeleteModeDV, true
	cfg.TargetFileSize = 16 << 10 // the load's file is not small: compaction leaves it
	mt := testMaintainer(t, h.cat, cfg)
	mt.UseKeyCache(maintenance.NewKeyCache(64 << 20))
	mt.IgnoreLease()
	commitVectors(t, h, mt, m, []int{5, 6}) // in the load's file only
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if on, other := parquet(); on != 1 || other != 1 {
		t.Fatalf("%d Parquet position-delete files on data files with vectors, %d others; want 1 and 1 after the writer's vector", on, other)
	}
	if _, err := mt.Maintain(ctx, maintenance.CompactOnly); err != nil {
		t.Fatal(err)
	}
	rows, _ = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if on, other := parquet(); on != 0 || other != 1 {
		t.Fatalf("%d Parquet position-delete files on data files with vectors, %d others; want 0 and 1 after maintenance", on, other)
	}
	h.close()
}
