package sink

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// moveAck records what the writer tells an event's tracker (change.KeyChangeNoter).
type moveAck struct {
	done  atomic.Int64
	moved atomic.Uint64
	noKey atomic.Bool
}

func (a *moveAck) Done(n int)        { a.done.Add(int64(n)) }
func (a *moveAck) MovesKey(h uint64) { a.moved.Store(h) }
func (a *moveAck) MovesNoKey()       { a.noKey.Store(true) }
func (h *harness) submitWith(ev *change.Event, ack change.Acker) {
	h.t.Helper()
	ev.Raw, ev.Pos.Stream, ev.Ack, ev.Schema = []byte(`{}`), "st", ack, "shop"
	if err := h.s.Submit(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

func update(shard, seq string, ms int64, cols, before []change.Column) *change.Event {
	return &change.Event{Table: "items", Op: change.OpUpdate, Columns: cols, Before: before, Arrival: time.UnixMilli(ms),
		Meta: change.Metadata{RecordType: "data", Operation: "update"}, Pos: change.Position{Shard: shard, Seq: seq}}
}

// The writer tells the tracker of an update that may change its key what it moves: the old
// key's hash for a key change, nothing for an update that keeps its key (full before-images).
// A change that writes a key another process's older pending key change moves away does not
// wait for it: its commit lists the key as re-created. A pending key change whose old key is not
// known holds every later write of the table.
func TestMoveGate(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	h.arrive("a", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	h.flush()
	kc, same := &moveAck{}, &moveAck{}
	h.submitWith(update("a", "2", 1100, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")}), kc)
	h.submitWith(update("a", "3", 1110, []change.Column{col("id", "3"), col("name", "y2")},
		[]change.Column{col("id", "3"), col("name", "y")}), same)
	h.flush()
	if kc.moved.Load() == 0 || kc.noKey.Load() || !same.noKey.Load() || same.moved.Load() != 0 {
		t.Fatalf("told: key change %x/%v, same key %x/%v", kc.moved.Load(), kc.noKey.Load(), same.moved.Load(), same.noKey.Load())
	}
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=3,name=y2")
	// Another process holds a key change that moves key 2 away, arrived at 1300: the writes of
	// key 2 before and after it commit, the later one listed as re-created.
	var g checkpoint.TableGates
	g.Moves.Add(kc.moved.Load(), checkpoint.Gate{At: time.UnixMilli(1300)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.arrive("b", 1, 1250, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "older")}, nil)
	h.arrive("c", 1, 1400, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "newer")}, nil)
	h.arrive("d", 1, 1410, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "z")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=newer", "id=3,name=y2", "id=5,name=z")
	if got := h.recreatedKeys("items"); got != 1 {
		t.Fatalf("the commit lists %d re-created keys, want key 2", got)
	}
	// A pending key change whose old key is not known holds every later write of the table.
	var u checkpoint.TableGates
	u.Moves.AddUnknown(checkpoint.Gate{At: time.UnixMilli(1300)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": u}})
	h.arrive("d", 2, 1600, "items", change.OpInsert, []change.Column{col("id", "6"), col("name", "w")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=newer", "id=3,name=y2", "id=5,name=z")
	// Committed: what waited commits.
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=newer", "id=3,name=y2", "id=5,name=z", "id=6,name=w")
}

// A change that writes a key another process's pending key change moves away does not wait for
// it (so waits never cycle, and a backlog does not go one publish round per move): its commit
// records the key as re-created, and the key change's commit, which reads it, does not delete
// the newer row. In the move's own millisecond (one PutRecords call of DMS) only a change that
// creates the key counts as newer: an update there is the older one (movedKeys.overtakes), and
// the key change's delete removes it, as it would have overtaken it committed the other way.
func TestRecreatedAfterAPendingMoveIsKept(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		at   int64
		op   change.Op
		tx   string
		want []string
	}{
		{"insert in the move's millisecond", 1300, change.OpInsert, "501", []string{"id=2,name=again", "id=3,name=y"}},
		{"insert after the move", 1400, change.OpInsert, "501", []string{"id=2,name=again", "id=3,name=y"}},
		{"update after the move", 1400, change.OpUpdate, "", []string{"id=2,name=again", "id=3,name=y"}},
		{"update in the move's millisecond", 1300, change.OpUpdate, "", []string{"id=3,name=y"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a := worker(t, dir)
			a.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 name:STRING")
			a.arrive("h", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
			a.flush()
			gb := &gateBound{}
			gb.set(Bound{At: time.UnixMilli(5000)})
			b := newHarness(t, dir, withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = OrderingArrival }),
				withOptions(WithCommitBounds(gb.get)))
			// Worker A takes in the key change 2 -> 3 and has not committed it.
			kc := &moveAck{}
			x := update("n", "1", 1300, []change.Column{col("id", "3"), col("name", "y")}, []change.Column{col("id", "2"), col("name", "y")})
			if c.tx != "" {
				x.Meta.TransactionID = "500"
			}
			a.submitWith(x, kc)
			deadline := time.Now().Add(10 * time.Second)
			for kc.moved.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			// Worker B sees it pending and writes key 2 again.
			var g checkpoint.TableGates
			g.Moves.Add(kc.moved.Load(), checkpoint.Gate{At: time.UnixMilli(1300)})
			gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
			z := &change.Event{Table: "items", Op: c.op, Columns: []change.Column{col("id", "2"), col("name", "again")},
				Arrival: time.UnixMilli(c.at), Meta: change.Metadata{RecordType: "data", Operation: c.op.String(), TransactionID: c.tx},
				Pos: change.Position{Shard: "h", Seq: "2"}}
			if c.op == change.OpUpdate {
				z.Before = []change.Column{col("id", "2"), col("name", "y")}
			}
			b.submitWith(z, &moveAck{})
			b.flush()
			rows, _ := scanRows(t, b.cat, "items")
			eq(t, rows, "id=2,name=again")
			a.flush()
			rows, _ = scanRows(t, a.cat, "items")
			eq(t, rows, c.want...)
		})
	}
}

// Within one writer, a key change held back on its shard is pending as another process's is: a
// later write of the key it moves away on another shard commits listed as re-created, and the
// key change, committed later, keeps it.
func TestHeldKeyChangeKeepsLaterWritesOfItsOldKey(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	h.arrive("a", 1, 1010, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "v")}, nil)
	h.arrive("a", 2, 1020, "items", change.OpInsert, []change.Column{col("id", "7"), col("name", "w")}, nil)
	h.flush()
	// Another process holds a load row routed by its key at 1250: shard b's key change 7 -> 8 at
	// 1300, routed by table, waits for it; shard c's re-creation of 7 at 1400, routed by its key,
	// does not.
	var g checkpoint.TableGates
	g.Kinds[checkpoint.KindLoad] = checkpoint.Gate{At: time.UnixMilli(1250)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.event(&change.Event{Table: "items", Op: change.OpUpdate, Columns: []change.Column{col("id", "8"), col("name", "w")},
		Before: []change.Column{col("id", "7"), col("name", "w")}, Arrival: time.UnixMilli(1300), Pos: change.Position{Shard: "b", Seq: "1"},
		Meta: change.Metadata{RecordType: "data", Operation: "update"}})
	h.event(&change.Event{Table: "items", Op: change.OpInsert, Columns: []change.Column{col("id", "7"), col("name", "new")},
		Arrival: time.UnixMilli(1400), Pos: change.Position{Shard: "c", Seq: "1"},
		Meta: change.Metadata{RecordType: "data", Operation: "insert", PartitionKeyType: change.PartitionPrimaryKey}})
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=5,name=v", "id=7,name=new")
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=5,name=v", "id=7,name=new", "id=8,name=w")
}

// A CDC change routed by its key (DMS ParallelApply: partition-key-type primary-key) shares its
// shard with its key's load rows routed the same way, so it does not wait for another process's
// pending load rows of that kind; it waits for load rows routed otherwise, and a CDC change
// routed by table waits for every load row, as before.
func TestKeyRoutedChangesWaitOnlyForStrayLoadRows(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	routed := func(shard string, seq int, ms int64, id, name, pkType string) {
		h.event(&change.Event{Table: "items", Op: change.OpInsert, Columns: []change.Column{col("id", id), col("name", name)},
			Arrival: time.UnixMilli(ms), Pos: change.Position{Shard: shard, Seq: fmt.Sprint(seq)},
			Meta: change.Metadata{RecordType: "data", Operation: "insert", PartitionKeyType: pkType}})
	}
	// Another process holds a load row routed by its key that arrived at 1100.
	var byKey checkpoint.TableGates
	byKey.Kinds[checkpoint.KindLoad] = checkpoint.Gate{At: time.UnixMilli(1100)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": byKey}})
	routed("a", 1, 1200, "1", "by-key", change.PartitionPrimaryKey)
	routed("b", 1, 1210, "2", "by-table", "schema-table")
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=by-key")
	// A stray load row (routed by table) pending elsewhere holds key-routed changes after it too.
	var stray checkpoint.TableGates
	stray.Kinds[checkpoint.KindLoad] = checkpoint.Gate{At: time.UnixMilli(1100)}
	stray.Kinds[checkpoint.KindLoadNotByKey] = checkpoint.Gate{At: time.UnixMilli(1150)}
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": stray}})
	routed("a", 2, 1300, "3", "by-key", change.PartitionPrimaryKey)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=by-key")
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=by-key", "id=2,name=by-table", "id=3,name=by-key")
}

// recreatedKeys returns how many keys the newest snapshot of main lists as re-created.
func (h *harness) recreatedKeys(name string) int {
	h.t.Helper()
	_, tbl := scanRows(h.t, h.cat, name)
	snap := tbl.CurrentSnapshot()
	if snap == nil || snap.Summary == nil || snap.Summary.Properties[tableprop.SummaryMoved] == "" {
		return 0
	}
	fs, err := tbl.FS(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	f, err := fs.Open(snap.Summary.Properties[tableprop.SummaryMoved])
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := decodeMoves(b)
	if err != nil {
		h.t.Fatal(err)
	}
	return len(c.recreated)
}
