package sink

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// With full before-images (MySQL's ColumnFilter all) the before-image of every update holds every
// column, so the consumer, which does not know the key, cannot tell a key change from an update
// that changed another column. The writer compares the key columns. Neither waits for another
// process's older CDC change (the change gate): an update that keeps its key commits at once,
// and so does a real key change, which writes the key it moved away with its commit (moved.go).
func TestFullBeforeImageUpdateIsNoKeyChange(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	h.arrive("a", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "x")}, nil)
	h.arrive("b", 1, 1060, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	h.flush()
	var g checkpoint.TableGates
	g.Kinds[checkpoint.KindChange] = checkpoint.Gate{At: time.UnixMilli(1100)} // another process's older change
	g.Kinds[checkpoint.KindKeyChange] = checkpoint.Gate{At: time.UnixMilli(1101)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	// An update of key 1 with a full before-image that changes name only: no key change.
	h.arrive("a", 2, 1200, "items", change.OpUpdate, []change.Column{col("id", "1"), col("name", "x2")},
		[]change.Column{col("id", "1"), col("name", "x")})
	// A key change 2 -> 3 with a full before-image.
	h.arrive("b", 2, 1210, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")})
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x2", "id=3,name=y")
	if tbl.CurrentSnapshot().Summary.Properties[tableprop.SummaryMoved] == "" {
		t.Fatal("the key change's commit names no moved-keys file")
	}
}

// The gate clock counts the time from a flush that left rows a gate holds back to the next flush.
func TestGateClock(t *testing.T) {
	t.Parallel()
	var c gateClock
	t0 := time.Unix(100, 0)
	if d := c.note(false, t0); d != 0 {
		t.Fatalf("nothing held: %v", d)
	}
	if d := c.note(true, t0.Add(time.Second)); d != 0 {
		t.Fatalf("held from now on: %v", d)
	}
	if d := c.note(true, t0.Add(3*time.Second)); d != 2*time.Second {
		t.Fatalf("held for 2 s: %v", d)
	}
	if d := c.note(false, t0.Add(4*time.Second)); d != time.Second {
		t.Fatalf("released after 1 s more: %v", d)
	}
	if d := c.note(false, t0.Add(9*time.Second)); d != 0 {
		t.Fatalf("nothing held since: %v", d)
	}
}

// gateMetrics records GateWait.
type gateMetrics struct {
	NopMetrics
	waited atomic.Int64
}

func (m *gateMetrics) GateWait(_ string, d time.Duration) { m.waited.Add(int64(d)) }

// A writer whose change waits for another worker's older load row reports the wait.
func TestGateWaitIsReported(t *testing.T) {
	t.Parallel()
	m := &gateMetrics{}
	h, gb := itemsWithGates(t, WithMetrics(m))
	h.arrive("b", 1, 1060, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	h.flush()
	var g checkpoint.TableGates
	g.Kinds[checkpoint.KindLoad] = checkpoint.Gate{At: time.UnixMilli(1100)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.arrive("b", 2, 1210, "items", change.OpUpdate, []change.Column{col("id", "2"), col("name", "y2")}, nil)
	h.flush()
	if m.waited.Load() != 0 {
		t.Fatalf("waited %v before a second flush", time.Duration(m.waited.Load()))
	}
	time.Sleep(20 * time.Millisecond)
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	if w := time.Duration(m.waited.Load()); w < 20*time.Millisecond {
		t.Fatalf("reported %v of gate wait, want at least the 20 ms between the flushes", w)
	}
}

// A data record held behind a control record (its turn comes when the bound passes the control
// record) is classified with the key known when it was held: an update with a full before-image
// that keeps its key does not wait for another worker's older change.
func TestHeldFullBeforeImageUpdateIsNoKeyChange(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	h.arrive("a", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "x")}, nil)
	h.flush()
	// Past the bound: held, and the update after it with it.
	h.arriveCtl("c", 2, 6000, "items", "add-column", "id*:INT4 name:STRING tier:STRING")
	h.arrive("a", 2, 6100, "items", change.OpUpdate, []change.Column{col("id", "1"), col("name", "x2")},
		[]change.Column{col("id", "1"), col("name", "x")})
	h.flush()
	var g checkpoint.TableGates
	g.Kinds[checkpoint.KindChange] = checkpoint.Gate{At: time.UnixMilli(1100)} // another process's older change
	gb.set(Bound{At: time.UnixMilli(7000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x2,tier=null")
}

// itemsWithGates runs a sink with ordering arrival whose commit bound (5000 ms) and gates the
// test sets, with table items (id key, name) created at 1000 ms.
func itemsWithGates(t *testing.T, opts ...Option) (*harness, *gateBound) {
	t.Helper()
	gb := &gateBound{}
	gb.set(Bound{At: time.UnixMilli(5000)})
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = OrderingArrival }),
		withOptions(append([]Option{WithCommitBounds(gb.get)}, opts...)...))
	h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 name:STRING")
	return h, gb
}
