package sink

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// rowsAt scans the table at snapshot id and returns its rows rendered like scanRows.
func rowsAt(t *testing.T, tbl *table.Table, id int64) []string {
	t.Helper()
	_, it, err := tbl.Scan(table.WithSnapshotID(id)).ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rec, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var parts []string
			for _, f := range tbl.Schema().Fields() {
				if idx := rec.Schema().FieldIndices(f.Name); len(idx) > 0 {
					v, ok := dms.RenderArrow(rec.Column(idx[0]), i, f.Type)
					if !ok {
						v = "null"
					}
					parts = append(parts, f.Name+"="+v)
				}
			}
			out = append(out, strings.Join(parts, ","))
		}
		rec.Release()
	}
	sort.Strings(out)
	return out
}

// A truncate removes, in one snapshot at its place in the table's order, every row older than
// it; rows after it apply on top; a replay of the same records after a restart gives the same
// table and no new snapshot. Keyed and keyless tables alike.
func TestTruncateRemovesOlderRows(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{true, false} {
		name := map[bool]string{true: "keyed", false: "keyless"}[keyed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			def := "id:INT4 name:WSTRING"
			if keyed {
				def = "id*:INT4 name:WSTRING"
			}
			dir := t.TempDir()
			ins := func(h *harness, seq int, id, v string) {
				h.data("a", seq, "items", change.OpInsert, []change.Column{col("id", id), col("name", "'"+v+"'")}, nil)
			}
			var before, afterFirst int
			run := func(replay bool) *harness {
				h := newHarness(t, dir, withMaintenance(nil))
				h.ctl("c", 1, "items", "create-table", def)
				ins(h, 1, "1", "a")
				ins(h, 2, "2", "b")
				h.flush()
				if !replay {
					before = len(loadTable(t, h, "shop", "items").Metadata().Snapshots())
				}
				ins(h, 3, "3", "c") // buffered when the truncate comes: older than it
				h.ctl("c", 2, "items", "truncate", "")
				ins(h, 4, "1", "new")
				h.flush()
				if !replay {
					afterFirst = len(loadTable(t, h, "shop", "items").Metadata().Snapshots())
				}
				return h
			}
			h := run(false)
			rows, tbl := scanRows(t, h.cat, "items")
			eq(t, rows, "id=1,name=new")
			// Snapshots of the second flush: a/3, the truncate, a/4.
			snaps := tbl.Metadata().Snapshots()
			if afterFirst-before != 3 {
				t.Fatalf("second flush made %d snapshots, want 3 (rows before, truncate, rows after)", afterFirst-before)
			}
			trunc := snaps[before+1]
			if got := rowsAt(t, tbl, snaps[before].SnapshotID); len(got) != 3 {
				t.Fatalf("before the truncate: %v, want 3 rows", got)
			}
			if got := rowsAt(t, tbl, trunc.SnapshotID); len(got) != 0 {
				t.Fatalf("at the truncate snapshot: %v, want no rows", got)
			}
			if trunc.Summary == nil || trunc.Summary.Properties[tableprop.Watermark("st", "c")] != "2" {
				t.Fatalf("truncate snapshot summary %v, want the watermark of shard c at 2", trunc.Summary)
			}
			if p := trunc.Summary.Properties; p["total-data-files"] != "0" || p["total-delete-files"] != "0" {
				t.Fatalf("truncate snapshot keeps files: %v", p)
			}
			if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["c"] != "2" || wm["a"] != "4" {
				t.Fatalf("watermarks %v, want c=2 a=4", wm)
			}
			if len(h.dlq.Letters()) != 0 {
				t.Fatalf("dead letters: %+v", h.dlq.Letters())
			}
			if got := h.ack.N.Load(); got != 6 {
				t.Fatalf("acknowledged %d, want 6", got)
			}
			h.close()

			h = run(true)
			rows, tbl = scanRows(t, h.cat, "items")
			eq(t, rows, "id=1,name=new")
			if n := len(tbl.Metadata().Snapshots()); n != afterFirst {
				t.Fatalf("replay made snapshots: %d, was %d", n, afterFirst)
			}
			if len(h.dlq.Letters()) != 0 {
				t.Fatalf("dead letters on replay: %+v", h.dlq.Letters())
			}
			h.close()
		})
	}
}

// Guarded (ordering arrival with a commit bound), the truncate applies at its arrival among the
// data of every shard: rows that arrived before it are removed even when read after it, rows
// that arrived after it stay even when read before it.
func TestTruncateInArrivalOrder(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	h := guardHarness(t, OrderingArrival, fb)
	h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 name:WSTRING")
	h.arrive("b", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "'before'")}, nil)
	h.arrive("b", 2, 1300, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'after'")}, nil)
	h.arriveCtl("c", 2, 1200, "items", "truncate", "")
	h.arrive("a", 1, 1100, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'before'")}, nil)
	h.arrive("a", 2, 1250, "items", change.OpInsert, []change.Column{col("id", "3"), col("name", "'after'")}, nil)
	h.arrive("a", 3, 1260, "items", change.OpUpdate, []change.Column{col("id", "1"), col("name", "'again'")}, nil)
	fb.ms.Store(5000)
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=again", "id=2,name=after", "id=3,name=after")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

// A truncate of a table that does not exist creates nothing; one of a table without a
// snapshot, or whose rows a truncate removed already, commits only its watermark. A truncate
// replayed from the dead-letter table is not applied (it would remove every row newer than
// it): it is dead-lettered again with the reason.
func TestTruncateEdgeCases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "none", "truncate", "")
	h.ctl("c", 2, "empty", "create-table", "id*:INT4")
	h.ctl("c", 3, "empty", "truncate", "")
	h.flush()
	if tableExists(t, h.cat, "none") {
		t.Fatal("a truncate created its table")
	}
	tbl := loadTable(t, h, "shop", "empty")
	if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["c"] != "3" {
		t.Fatalf("watermarks %v, want c=3", wm)
	}
	h.data("a", 1, "empty", change.OpInsert, []change.Column{col("id", "1")}, nil)
	h.flush()
	h.ctl("c", 4, "empty", "truncate", "")
	h.ctl("c", 5, "empty", "TRUNCATE", "")
	h.data("a", 2, "empty", change.OpInsert, []change.Column{col("id", "2")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "empty")
	eq(t, rows, "id=2")
	if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["c"] != "5" {
		t.Fatalf("watermarks %v, want c=5", wm)
	}
	ev := ctlEvent("c", 1, "empty", "truncate", "")
	ev.Replay = true
	h.event(ev)
	h.flush()
	rows, _ = scanRows(t, h.cat, "empty")
	eq(t, rows, "id=2")
	if got := classes(h.dlq.Letters()); !slices.Equal(got, []string{ClassUnsupported}) {
		t.Fatalf("dead letters %v, want one %s", got, ClassUnsupported)
	}
	if got := h.ack.N.Load(); got != 8 {
		t.Fatalf("acknowledged %d, want 8", got)
	}
}

// A rename-table is not applied (which name the record carries is undocumented): it is
// dead-lettered with the manual step, and neither the table nor a table of the other name is
// touched.
func TestRenameTableIsDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "items", "create-table", "id*:INT4 name:WSTRING")
	h.data("a", 1, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	snaps := len(loadTable(t, h, "shop", "items").Metadata().Snapshots())
	h.ctl("c", 2, "items", "rename-table", "id*:INT4 name:WSTRING extra:INT4")
	h.ctl("c", 3, "goods", "rename-table", "id*:INT4 name:WSTRING")
	h.flush()
	tbl := loadTable(t, h, "shop", "items")
	if n := len(tbl.Metadata().Snapshots()); n != snaps {
		t.Fatalf("rename-table committed to the table: %d snapshots, was %d", n, snaps)
	}
	if _, ok := tbl.Schema().FindFieldByName("extra"); ok {
		t.Fatal("rename-table's table-def was applied")
	}
	if tableExists(t, h.cat, "goods") {
		t.Fatal("rename-table created a table")
	}
	if got := classes(h.dlq.Letters()); !slices.Equal(got, []string{ClassUnsupported, ClassUnsupported}) {
		t.Fatalf("dead letters %v", got)
	}
	if r := h.dlq.Letters()[0].Reason; !strings.Contains(r, "rename-table") || !strings.Contains(r, "sink.tables") {
		t.Fatalf("reason %q does not name the manual step", r)
	}
}

// gateBound is a commit bound with cross-process gates the test sets.
type gateBound struct {
	mu sync.Mutex
	b  Bound
}

func (g *gateBound) get() Bound {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b
}

func (g *gateBound) set(b Bound) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.b = b
}

// With several processes, a truncate waits for the older data another process holds
// uncommitted (the change and load gates), as data waits for older control records; and while
// it waits, the rows that arrived after it wait too, even those already buffered.
func TestTruncateWaitsForOlderDataElsewhere(t *testing.T) {
	t.Parallel()
	gb := &gateBound{}
	gb.set(Bound{At: time.UnixMilli(5000)})
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = OrderingArrival }),
		withOptions(WithCommitBounds(gb.get)))
	h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4")
	h.arrive("a", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "1")}, nil)
	h.flush()
	var g checkpoint.TableGates
	g.Kinds[checkpoint.KindChange] = checkpoint.Gate{At: time.UnixMilli(1100)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.arrive("b", 1, 1300, "items", change.OpInsert, []change.Column{col("id", "2")}, nil) // buffered: arrived after the truncate
	h.arriveCtl("c", 2, 1200, "items", "truncate", "")
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1") // the truncate waits for the change at 1100 elsewhere; b/1 waits for the truncate
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2")
}

// A truncate that came before its table existed (DMS may truncate before a full load) is
// recorded in the table when it is created, so a replay after a restart does not apply it to the
// rows that came after it.
func TestTruncateBeforeTheTableExistsIsNotReappliedOnReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func() *harness {
		h := newHarness(t, dir, withMaintenance(nil))
		h.ctl("c", 1, "items", "truncate", "")
		h.data("a", 1, "items", change.OpLoad, []change.Column{col("id", "1")}, nil)
		h.flush()
		return h
	}
	h := run()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1")
	h.close()
	h = run()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1")
	h.close()
}
