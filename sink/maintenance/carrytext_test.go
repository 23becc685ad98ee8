package maintenance_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// textDef is dvDef with a text key (the id's digits as text).
func textDef() sink.TableConfig {
	d := dvDef()
	d.Columns = append([]sink.ColumnSpec{{Name: "id", Type: "WSTRING", Length: 12}}, d.Columns[1:]...)
	return d
}

// commitTextVectors deletes ids of a text-keyed table as a writer with vectors does: planned
// from the keys in memory (VectorsOfKeys) on the newest table and committed. It fails the test
// when the maintainer declines.
func commitTextVectors(t *testing.T, h *harness, mt *maintenance.Maintainer, m *model, ids []int) {
	t.Helper()
	ctx := context.Background()
	tbl := loadUsers(t, h.cat)
	f, _ := tbl.Schema().FindFieldByName("id")
	var keys deletes.Keys
	for _, id := range ids {
		keys.Tuples = append(keys.Tuples, []dms.Datum{{S: strconv.Itoa(id)}})
	}
	v, err := mt.VectorsOfKeys(ctx, tbl, []int{f.ID}, []deletes.Keys{keys})
	if err != nil || v == nil {
		t.Fatalf("vectors of text keys: %+v %v", v, err)
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
}

// A text-keyed table: its equality deletes are converted through the encoded key columns, and
// a writer's vectors committed while a compaction rewrites are carried over to the new files by
// their encoded keys (a compaction that gave up on a text key would never commit beside a
// writer).
func TestCompactionCarriesVectorsOfTextKeys(t *testing.T) {
	t.Parallel()
	h := newHarnessFor(t, t.TempDir(), textDef())
	m := newModel(h)
	m.load(200)
	m.batch(1, 200)
	mt := vectorMaintainer(t, h)
	if rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly); err != nil || !rep.Converted {
		t.Fatalf("conversion: %v %+v", err, rep)
	}
	vectorsOnly(t, h, m)
	var victims []int
	for id := 1; id <= 200 && len(victims) < 8; id += 3 {
		if _, ok := m.rows[id]; ok {
			victims = append(victims, id)
		}
	}
	mt.AfterRewrite(func() { commitTextVectors(t, h, mt, m, victims) })
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil || !rep.Compacted {
		t.Fatalf("compaction beside a writer's vectors: %v, report %+v: want compacted", err, rep)
	}
	tbl := vectorsOnly(t, h, m)
	live := sinktest.DataSeqs(t, tbl)
	carried := int64(0)
	for _, df := range sinktest.LiveEntries(t, tbl) {
		if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil {
			if _, ok := live[*ref]; !ok {
				t.Fatalf("a deletion vector references %s, which the compaction rewrote", *ref)
			}
			carried += df.Count()
		}
	}
	if carried != int64(len(victims)) {
		t.Fatalf("the new files' vectors hold %d positions, want the %d rows deleted during the compaction", carried, len(victims))
	}
	h.close()
}
