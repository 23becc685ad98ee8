package sink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
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
// A change that writes a key another process's older pending key change moves away waits for
// it (the key change's delete would remove it); changes of other keys do not.
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
	// Another process holds a key change that moves key 2 away, arrived at 1300.
	var g checkpoint.TableGates
	g.Moves.Add(kc.moved.Load(), checkpoint.Gate{At: time.UnixMilli(1300)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.arrive("b", 1, 1250, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "older")}, nil)
	h.arrive("c", 1, 1400, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "newer")}, nil)
	h.arrive("d", 1, 1410, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "z")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=older", "id=3,name=y2", "id=5,name=z")
	// A pending key change whose old key is not known holds every later write of the table.
	var u checkpoint.TableGates
	u.Moves.AddUnknown(checkpoint.Gate{At: time.UnixMilli(1300)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": u}})
	h.arrive("d", 2, 1600, "items", change.OpInsert, []change.Column{col("id", "6"), col("name", "w")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=older", "id=3,name=y2", "id=5,name=z")
	// Both committed: what waited commits.
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=newer", "id=3,name=y2", "id=5,name=z", "id=6,name=w")
}

// Within one arrival millisecond (one PutRecords call of DMS) a change that re-creates a key
// another process's pending key change moves away does not wait (so waits never cycle): its
// commit records the key as re-created, and the key change's commit, which reads it, does not
// delete the newer row.
func TestRecreatedInTheMoveMillisecondIsKept(t *testing.T) {
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
	// Worker A takes in the key change 2 -> 3 (transaction 500) and has not committed it.
	kc := &moveAck{}
	x := update("n", "1", 1300, []change.Column{col("id", "3"), col("name", "y")}, []change.Column{col("id", "2"), col("name", "y")})
	x.Meta.TransactionID = "500"
	a.submitWith(x, kc)
	deadline := time.Now().Add(10 * time.Second)
	for kc.moved.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// Worker B sees it pending and re-creates key 2 in the same millisecond (transaction 501).
	var g checkpoint.TableGates
	g.Moves.Add(kc.moved.Load(), checkpoint.Gate{At: time.UnixMilli(1300)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	z := &change.Event{Table: "items", Op: change.OpInsert, Columns: []change.Column{col("id", "2"), col("name", "again")},
		Arrival: time.UnixMilli(1300), Meta: change.Metadata{RecordType: "data", Operation: "insert", TransactionID: "501"},
		Pos: change.Position{Shard: "h", Seq: "2"}}
	b.submitWith(z, &moveAck{})
	b.flush()
	rows, _ := scanRows(t, b.cat, "items")
	eq(t, rows, "id=2,name=again")
	a.flush()
	rows, _ = scanRows(t, a.cat, "items")
	eq(t, rows, "id=2,name=again", "id=3,name=y")
}

// Within one writer, a key change held back on its shard holds back a later write of the key
// it moves away on another shard: otherwise that write would commit first and the key change's
// delete, committed later, would remove it.
func TestHeldKeyChangeHoldsLaterWritesOfItsOldKey(t *testing.T) {
	t.Parallel()
	h, gb := itemsWithGates(t)
	// Learn the hash of key 5 from a key change 5 -> 9.
	h.arrive("a", 1, 1010, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "v")}, nil)
	kc := &moveAck{}
	h.submitWith(update("a", "2", 1020, []change.Column{col("id", "9"), col("name", "v")}, []change.Column{col("id", "5"), col("name", "v")}), kc)
	h.arrive("a", 3, 1030, "items", change.OpInsert, []change.Column{col("id", "7"), col("name", "w")}, nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=7,name=w", "id=9,name=v")
	// Another process moves key 5 away at 1100: shard b's re-creation of 5 waits, and the key
	// change 7 -> 8 behind it on shard b waits with it; shard c's re-creation of 7 must wait too.
	var g checkpoint.TableGates
	g.Moves.Add(kc.moved.Load(), checkpoint.Gate{At: time.UnixMilli(1100)})
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	h.arrive("b", 1, 1200, "items", change.OpInsert, []change.Column{col("id", "5"), col("name", "again")}, nil)
	h.arrive("b", 2, 1300, "items", change.OpUpdate, []change.Column{col("id", "8"), col("name", "w")}, []change.Column{col("id", "7"), col("name", "w")})
	h.arrive("c", 1, 1400, "items", change.OpInsert, []change.Column{col("id", "7"), col("name", "new")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=7,name=w", "id=9,name=v")
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=5,name=again", "id=7,name=new", "id=8,name=w", "id=9,name=v")
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
