package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The ordering guard through the sink, with a fake commit bound.

// fakeBound is a commit bound the test moves (unix ms; 0: nothing may commit yet).
type fakeBound struct{ ms atomic.Int64 }

func (f *fakeBound) get() time.Time {
	if ms := f.ms.Load(); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// riskMetrics records OrderingRisk.
type riskMetrics struct {
	NopMetrics
	mu    sync.Mutex
	risks []string
}

func (m *riskMetrics) OrderingRisk(table, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.risks = append(m.risks, table+":"+kind)
}

func (m *riskMetrics) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.risks)
}

// guardHarness runs a sink with ordering mode and the commit bound fb.
func guardHarness(t *testing.T, mode string, fb *fakeBound, opts ...harnessOption) *harness {
	t.Helper()
	opts = append([]harnessOption{withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = mode }),
		withOptions(WithCommitBound(fb.get))}, opts...)
	return newHarness(t, t.TempDir(), opts...)
}

// arrive submits a data record that reached the stream at ms.
func (h *harness) arrive(shard string, seq int, ms int64, tbl string, op change.Op, cols, before []change.Column) {
	h.t.Helper()
	h.event(&change.Event{Table: tbl, Op: op, Columns: cols, Before: before, Arrival: time.UnixMilli(ms),
		Meta: change.Metadata{RecordType: "data", Operation: op.String()},
		Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}})
}

// arriveCtl submits a control record that reached the stream at ms.
func (h *harness) arriveCtl(shard string, seq int, ms int64, tbl, op, def string) {
	h.t.Helper()
	ev := ctlEvent(shard, seq, tbl, op, def)
	ev.Arrival = time.UnixMilli(ms)
	h.event(ev)
}

func tableExists(t *testing.T, cat catalog.Catalog, name string) bool {
	t.Helper()
	_, err := cat.LoadTable(context.Background(), table.Identifier{"shop", name})
	if err != nil && !errors.Is(err, catalog.ErrNoSuchTable) {
		t.Fatal(err)
	}
	return err == nil
}

// (a, d) Shard B is read first with a key change (1→2) and a newer value of key 3; shard A's
// older changes of those keys are read after it. Arrival order ends with B's values; ordering
// shard applies A's changes last: key 1 is resurrected and key 3 holds the older value (today's
// behaviour, and the risk is reported).
func TestOrderingAcrossShards(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{OrderingArrival, OrderingShard} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			fb := &fakeBound{}
			fb.ms.Store(5000)
			m := &riskMetrics{}
			h := guardHarness(t, mode, fb, withOptions(WithMetrics(m)))
			h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 name:WSTRING")
			h.arrive("a", 1, 1100, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a0'")}, nil)
			h.arrive("a", 2, 1100, "items", change.OpInsert, []change.Column{col("id", "3"), col("name", "'x'")}, nil)
			h.flush()
			h.arrive("b", 1, 1300, "items", change.OpUpdate, []change.Column{col("id", "2"), col("name", "'b'")},
				[]change.Column{col("id", "1"), col("name", "'a1'")})
			h.arrive("b", 2, 1300, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "'new'")}, nil)
			h.arrive("a", 3, 1200, "items", change.OpUpdate, []change.Column{col("id", "1"), col("name", "'a1'")}, nil)
			h.arrive("a", 4, 1200, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "'old'")}, nil)
			h.flush()
			rows, _ := scanRows(t, h.cat, "items")
			if mode == OrderingArrival {
				eq(t, rows, "id=2,name=b", "id=3,name=new")
				if r := m.got(); len(r) != 0 {
					t.Fatalf("risks reported with ordering arrival: %v", r)
				}
				return
			}
			eq(t, rows, "id=1,name=a1", "id=2,name=b", "id=3,name=old")
			if r := m.got(); !slices.Equal(r, []string{"shop.items:" + RiskMultiShard, "shop.items:" + RiskKeyChange}) {
				t.Fatalf("risks %v, want one multi-shard and one key-change", r)
			}
		})
	}
}

// (b) A data record buffered before its create-table but arrived after it gets the table-def's
// types and key; a table without any table-def is created from its first record once the bound
// passes it (the inference fallback). Ordering shard creates the table from the data record.
func TestOrderingCreateTableFirst(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{OrderingArrival, OrderingShard} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			fb := &fakeBound{}
			h := guardHarness(t, mode, fb)
			h.arrive("a", 1, 2000, "items", change.OpInsert, []change.Column{col("id", "1"), col("qty", "5")}, nil)
			h.arrive("a", 2, 2000, "plain", change.OpInsert, []change.Column{col("id", "1"), col("qty", "5")}, nil)
			h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 qty:INT4")
			h.flush()
			if mode == OrderingArrival && (tableExists(t, h.cat, "items") || tableExists(t, h.cat, "plain") || h.ack.N.Load() != 0) {
				t.Fatalf("something applied at a zero bound (acks %d)", h.ack.N.Load())
			}
			fb.ms.Store(1500)
			h.flush()
			if mode == OrderingArrival {
				if rows, _ := scanRows(t, h.cat, "items"); len(rows) != 0 || tableExists(t, h.cat, "plain") || h.ack.N.Load() != 1 {
					t.Fatalf("at bound 1500: rows %v, plain exists %v, acks %d; want the created table only", rows, tableExists(t, h.cat, "plain"), h.ack.N.Load())
				}
			}
			fb.ms.Store(3000)
			h.flush()
			rows, tbl := scanRows(t, h.cat, "items")
			eq(t, rows, "id=1,qty=5")
			qty, _ := tbl.Schema().FindFieldByName("qty")
			typed := qty.Type.String() == "int" && len(tbl.Schema().IdentifierFieldIDs) == 1
			if typed != (mode == OrderingArrival) {
				t.Fatalf("%s: schema %v (want the table-def's types and key only with ordering arrival)", mode, tbl.Schema())
			}
			rows, _ = scanRows(t, h.cat, "plain")
			eq(t, rows, "id=1,qty=5")
			if h.ack.N.Load() != 3 {
				t.Fatalf("acks %d, want 3", h.ack.N.Load())
			}
			// A control record of an existing table waits for the bound like data.
			h.arriveCtl("c", 2, 5000, "items", "add-column", "id*:INT4 qty:INT4 note:WSTRING")
			h.flush()
			_, tbl = scanRows(t, h.cat, "items")
			if _, has := tbl.Schema().FindFieldByName("note"); has != (mode == OrderingShard) {
				t.Fatalf("%s: add-column arrived after the bound applied: %v", mode, has)
			}
			fb.ms.Store(6000)
			h.flush()
			_, tbl = scanRows(t, h.cat, "items")
			if _, has := tbl.Schema().FindFieldByName("note"); !has || h.ack.N.Load() != 4 {
				t.Fatalf("add-column not applied once the bound passed it (acks %d)", h.ack.N.Load())
			}
			// The schema change is complete through just before the control record.
			if got, want := tbl.Properties()[tableprop.CompleteThrough], map[string]string{OrderingArrival: "1970-01-01T00:00:04.999Z"}[mode]; got != want {
				t.Fatalf("%s: complete-through %q after the add-column, want %q", mode, got, want)
			}
		})
	}
}

// (c) Nothing past the bound is committed or acknowledged, also not by the final flush of a
// graceful stop; it is once the bound moves. Every commit records the bound it was cut at, and a
// quiet table's complete-through follows the bound through properties-only commits.
func TestOrderingBound(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	fb.ms.Store(1000)
	var mu sync.Mutex
	var infos []CommitInfo
	h := guardHarness(t, OrderingArrival, fb, withConfig(func(c *Config) {
		c.Ordering = OrderingArrival
		c.FreshnessInterval = 20 * time.Millisecond
	}), withOptions(WithCommitListener(func(ci CommitInfo) {
		mu.Lock()
		defer mu.Unlock()
		infos = append(infos, ci)
	})))
	h.arriveCtl("c", 1, 500, "items", "create-table", "id*:INT4 name:WSTRING")
	h.arrive("a", 1, 900, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'x'")}, nil)
	h.arrive("a", 2, 1100, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'y'")}, nil)
	h.arrive("a", 3, 950, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "'late'")}, nil) // behind a/2 in its shard
	h.arrive("b", 1, 950, "items", change.OpInsert, []change.Column{col("id", "3"), col("name", "'z'")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x", "id=3,name=z")
	props := tbl.Properties()
	if wm := tableprop.Watermarks(props, "st"); wm["a"] != "1" || wm["b"] != "1" || h.ack.N.Load() != 3 {
		t.Fatalf("watermarks %v acks %d; want a=1 b=1 and 3 acks (control, a/1, b/1)", wm, h.ack.N.Load())
	}
	if got := props[tableprop.CompleteThrough]; got != "1970-01-01T00:00:01.000Z" ||
		tbl.CurrentSnapshot().Summary.Properties[tableprop.CompleteThrough] != got {
		t.Fatalf("complete-through %q, summary %v", got, tbl.CurrentSnapshot().Summary.Properties)
	}
	fb.ms.Store(2000)
	h.flush()
	rows, tbl = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x", "id=2,name=y", "id=3,name=z", "id=5,name=late")
	if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["a"] != "3" || h.ack.N.Load() != 5 {
		t.Fatalf("watermarks %v acks %d after the bound moved", wm, h.ack.N.Load())
	}
	mu.Lock()
	if len(infos) != 2 || !infos[0].CompleteThrough.Equal(time.UnixMilli(1000)) || !infos[1].CompleteThrough.Equal(time.UnixMilli(2000)) {
		t.Fatalf("commit infos %+v", infos)
	}
	mu.Unlock()
	// A quiet table: its complete-through follows the bound.
	fb.ms.Store(10_000)
	deadline := time.Now().Add(5 * time.Second)
	for tbl.Properties()[tableprop.CompleteThrough] != "1970-01-01T00:00:10.000Z" {
		if time.Now().After(deadline) {
			t.Fatalf("complete-through of a quiet table stayed %q", tbl.Properties()[tableprop.CompleteThrough])
		}
		time.Sleep(20 * time.Millisecond)
		tbl = loadTable(t, h, "shop", "items")
	}
	// Past the bound at shutdown: not committed, not acknowledged.
	h.arrive("a", 4, 20_000, "items", change.OpInsert, []change.Column{col("id", "4"), col("name", "'w'")}, nil)
	h.close()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x", "id=2,name=y", "id=3,name=z", "id=5,name=late")
	if h.ack.N.Load() != 5 {
		t.Fatalf("acks %d after the stop, want 5 (a/4 is past the bound)", h.ack.N.Load())
	}
}

// A flush with nothing within the bound keeps the buffer and the flush interval keeps ticking:
// once the bound moves, the next tick commits without an explicit flush.
func TestOrderingFlushIntervalTicks(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	fb.ms.Store(1000)
	h := guardHarness(t, OrderingArrival, fb, withConfig(func(c *Config) {
		c.Ordering = OrderingArrival
		c.FlushInterval = 20 * time.Millisecond
	}))
	h.arriveCtl("c", 1, 500, "items", "create-table", "id*:INT4 name:WSTRING")
	h.arrive("a", 1, 2000, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'x'")}, nil)
	// The create-table is within the bound: wait until it is applied (its ack), however loaded
	// the machine, so that the table exists; then let several ticks pass below the bound.
	for deadline := time.Now().Add(30 * time.Second); h.ack.N.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the create-table within the bound was not applied")
		}
	}
	time.Sleep(150 * time.Millisecond)
	if rows, _ := scanRows(t, h.cat, "items"); len(rows) != 0 || h.ack.N.Load() != 1 {
		t.Fatalf("rows %v acks %d before the bound passed the record", rows, h.ack.N.Load())
	}
	fb.ms.Store(3000)
	deadline := time.Now().Add(30 * time.Second)
	for h.ack.N.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the flush interval stopped ticking: nothing committed after the bound moved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x")
}
