package maintenance_test

import (
	"context"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// While a reload is in progress (tableprop.ReloadBefore set) the maintainer does not compact:
// the rewritten files would carry the rows from before the reload above its sequence number,
// where the reload's replace would not remove them. Once the mark is gone it compacts again.
func TestNoCompactionWhileReloading(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	ctx := context.Background()
	setProps := func(set iceberg.Properties, remove []string) {
		txn := loadUsers(t, h.cat).NewTransaction()
		if len(set) > 0 {
			if err := txn.SetProperties(set); err != nil {
				t.Fatal(err)
			}
		}
		if len(remove) > 0 {
			if err := txn.RemoveProperties(remove); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	setProps(iceberg.Properties{tableprop.ReloadBefore: "4", tableprop.ReloadRows: "0", tableprop.ReloadStarted: "2025-01-01T00:00:00.000000Z"}, nil)
	mt := testMaintainer(t, h.cat, testConfig())
	mt.IgnoreLease()
	rep, err := mt.Maintain(ctx, maintenance.CompactOnly)
	if err != nil || rep.Compacted {
		t.Fatalf("compacted %v (%v) while a reload is in progress", rep.Compacted, err)
	}
	setProps(nil, tableprop.ReloadProps)
	if rep, err = mt.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted {
		t.Fatalf("not compacted (%v) after the reload ended", err)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}

// createTable submits a create-table control record of shop.users built at ts (the columns of
// usersDef, key id).
func (h *harness) createTable(shard string, seq int, ts string) {
	h.t.Helper()
	ev := sinktest.Event("st", shard, seq, "shop", "users", change.OpControl, nil, nil, h.ack)
	ev.Control = &change.Control{Op: "create-table", TableDef: &change.TableDef{PrimaryKey: []string{"id"}, Columns: []change.ColumnDef{
		{Name: "id", Type: "INT4"}, {Name: "name", Type: "WSTRING", Length: 20, Nullable: true},
		{Name: "amount", Type: "NUMERIC", Precision: 10, Scale: 2, Nullable: true}}}}
	ev.Meta = change.Metadata{RecordType: "control", Operation: "create-table", Timestamp: ts}
	if err := h.s.Submit(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

// A conversion planned before a reload's create-table commits its position deletes after the
// reload's mark (the create-table committed while the conversion was staged): they are above
// the mark but name only data files the reload replaces, so the reload's replace removes them
// with those files. Parquet position deletes are recognised by their file_path bounds;
// deletion vectors have none and name their data file in referenced_data_file. Before, the
// vectors stayed live in main for ever, naming removed data files, and kept their Puffin files.
func TestReloadRemovesPositionDeletesConvertedAfterItsMark(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{maintenance.DeleteModeDV, maintenance.DeleteModePosition} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			def := usersDef
			if mode == maintenance.DeleteModeDV {
				def = dvDef()
			}
			h := newHarnessFor(t, t.TempDir(), def)
			h.createTable("c", 1, "2025-01-01T00:00:00.000000Z")
			m := newModel(h)
			m.load(100)
			m.batch(1, 100)
			m.batch(2, 100)

			cfg := testConfig()
			cfg.DeleteMode = mode
			mt := testMaintainer(t, h.cat, cfg)
			mt.IgnoreLease()
			reloaded := false
			mt.BeforeCommit(func(step string, attempt int) {
				if step == "position" && attempt == 0 && !reloaded {
					reloaded = true
					h.createTable("c", 2, "2025-01-02T00:00:00.000000Z") // the reload starts
					h.flush()
				}
			})
			rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
			if err != nil || !reloaded {
				t.Fatalf("conversion: %v, reload started %v", err, reloaded)
			}
			tbl := loadUsers(t, h.cat)
			mark := tbl.Properties()[tableprop.ReloadBefore]
			if mark == "" || rep.PositionDeleteFilesWritten == 0 {
				t.Fatalf("reload mark %q, %d position-delete files written: the scenario did not happen", mark, rep.PositionDeleteFilesWritten)
			}

			// The reload sends every row the source still holds (the odd keys), then a change.
			want := map[int]string{}
			for id, name := range m.rows {
				if id%2 == 1 {
					want[id] = name
				}
			}
			m.rows = want
			for id, name := range want {
				m.seq++
				h.submit("s0", m.seq, change.OpLoad, num("id", id), str("name", name))
			}
			h.flush()
			m.upsert("s0", 1, "after")
			h.flush()

			rows, tbl := scanRows(t, h.cat)
			sinktest.Eq(t, rows, m.want()...)
			if v := tbl.Properties()[tableprop.ReloadBefore]; v != "" {
				t.Fatalf("reload still in progress (mark %s)", v)
			}
			live := map[string]bool{}
			entries := sinktest.LiveEntries(t, tbl)
			for _, df := range entries {
				if df.ContentType() == iceberg.EntryContentData {
					live[df.FilePath()] = true
				}
			}
			for _, df := range entries {
				if df.ContentType() != iceberg.EntryContentPosDeletes {
					continue
				}
				ref := df.ReferencedDataFile()
				if ref == nil {
					lo := string(df.LowerBoundValues()[deletes.PosPathField])
					ref = &lo
				}
				if !live[*ref] {
					t.Errorf("position delete %s (vector %v) names %s, which the reload removed", df.FilePath(), table.IsDeletionVector(df), *ref)
				}
			}
			h.close()
		})
	}
}
