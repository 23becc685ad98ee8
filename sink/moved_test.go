package sink

import (
	"strconv"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// twoWorkers runs two sinks (two workers) with ordering arrival over one warehouse, table items
// (id key, name) created by the first at 1000 ms; both commit bounds are 5000 ms.
func twoWorkers(t *testing.T) (a, b *harness, dir string) {
	t.Helper()
	dir = t.TempDir()
	a = worker(t, dir)
	a.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4 name:STRING")
	a.flush()
	return a, worker(t, dir), dir
}

// worker runs a sink with ordering arrival and a commit bound of 5000 ms over dir's warehouse.
func worker(t *testing.T, dir string) *harness {
	t.Helper()
	return newHarness(t, dir, withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = OrderingArrival }),
		withOptions(WithCommitBounds(func() Bound { return Bound{At: time.UnixMilli(5000)} })))
}

// arriveAt submits a data record with a DMS commit timestamp (a source position).
func (h *harness) arriveAt(shard string, seq int, ms int64, commit string, op change.Op, cols, before []change.Column) {
	h.t.Helper()
	h.event(&change.Event{Table: "items", Op: op, Columns: cols, Before: before, Arrival: time.UnixMilli(ms),
		Meta: change.Metadata{RecordType: "data", Operation: op.String(), CommitTimestamp: commit},
		Pos:  change.Position{Shard: shard, Seq: strconv.Itoa(seq)}})
}

// Under primary-key partitioning a key change (2 -> 3) travels on the new key's shard, and an
// older change of the old key on its own shard, read by another worker, may commit after it.
// The key change commits without waiting for it, and the older change is not written back: the
// row of key 2 stays deleted.
func TestOlderChangeOfAMovedKeyIsNotWrittenBack(t *testing.T) {
	t.Parallel()
	a, b, _ := twoWorkers(t)
	a.arrive("h", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	a.flush()
	// Worker A: the key change, committed at once.
	a.arrive("n", 1, 1200, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")})
	a.flush()
	rows, _ := scanRows(t, a.cat, "items")
	eq(t, rows, "id=3,name=y")
	// Worker B: an older update and an older load row of key 2, committed after it.
	b.arrive("h", 2, 1100, "items", change.OpUpdate, []change.Column{col("id", "2"), col("name", "y2")}, nil)
	b.arrive("l", 1, 1150, "items", change.OpLoad, []change.Column{col("id", "2"), col("name", "loaded")}, nil)
	b.arrive("h", 3, 1110, "items", change.OpInsert, []change.Column{col("id", "7"), col("name", "z")}, nil)
	b.flush()
	rows, tbl := scanRows(t, b.cat, "items")
	eq(t, rows, "id=3,name=y", "id=7,name=z")
	// The load row and the update of key 2 collapse into one surviving image, not written.
	if got := tbl.CurrentSnapshot().Summary.Properties[tableprop.SummaryOvertaken]; got != "1" {
		t.Fatalf("summary says %q images overtaken, want 1", got)
	}
}

// With source positions the position decides, whatever the arrival: an older change of the
// moved key that arrived after the key change is not written back; a newer insert of the freed
// key is.
func TestMovedKeyBySourcePosition(t *testing.T) {
	t.Parallel()
	a, b, _ := twoWorkers(t)
	a.arriveAt("h", 1, 1050, "2025-06-01T00:00:00.000000Z", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	a.arriveAt("n", 1, 1200, "2025-06-01T00:00:02.000000Z", change.OpUpdate, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")})
	a.flush()
	// Arrived later, committed at the source earlier (DMS's parallel threads race).
	b.arriveAt("h", 2, 1300, "2025-06-01T00:00:01.000000Z", change.OpUpdate, []change.Column{col("id", "2"), col("name", "stale")}, nil)
	b.flush()
	rows, _ := scanRows(t, b.cat, "items")
	eq(t, rows, "id=3,name=y")
	// The freed key reused, newer than the key change: written.
	b.arriveAt("h", 3, 1400, "2025-06-01T00:00:03.000000Z", change.OpInsert, []change.Column{col("id", "2"), col("name", "again")}, nil)
	b.flush()
	rows, _ = scanRows(t, b.cat, "items")
	eq(t, rows, "id=2,name=again", "id=3,name=y")
}

// The moves a worker learns come from the snapshots: a worker started after the key change was
// committed reads them back from the table.
func TestMovedKeysAreReadByAWorkerStartedLater(t *testing.T) {
	t.Parallel()
	a, _, dir := twoWorkers(t)
	a.arrive("h", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	a.arrive("n", 1, 1200, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")})
	a.flush()
	a.close()
	late := worker(t, dir)
	late.arrive("h", 2, 1100, "items", change.OpUpdate, []change.Column{col("id", "2"), col("name", "y2")}, nil)
	late.flush()
	rows, _ := scanRows(t, late.cat, "items")
	eq(t, rows, "id=3,name=y")
}

func TestMovedKeysOvertake(t *testing.T) {
	t.Parallel()
	m := newMovedKeys()
	note(m.marks, move{key: "k", at: 100, pos: change.SourcePos{CommitTS: "2025-06-01T00:00:02.000000Z"}}, time.Now())
	cases := []struct {
		name string
		r    row
		want bool
	}{
		{"a load row that arrived before the move", row{at: 50, src: srcPos{load: true}}, true},
		{"a reload's load row, after the move", row{at: 500, src: srcPos{load: true}}, false},
		{"older by position, arrived later", row{at: 500, src: srcPos{SourcePos: change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z"}}}, true},
		{"newer by position, arrived earlier", row{at: 50, src: srcPos{SourcePos: change.SourcePos{CommitTS: "2025-06-01T00:00:03.000000Z"}}}, false},
		{"no position, arrived earlier", row{at: 99}, true},
		{"no position, the same millisecond, an update", row{at: 100}, true},
		{"no position, the same millisecond, an insert", row{at: 100, ins: true}, false},
		{"no position, arrived later", row{at: 101}, false},
		{"a replay from the dead-letter table", row{at: 1, replay: true}, false},
	}
	for _, c := range cases {
		if got := m.overtakes([]byte("k"), &c.r); got != c.want {
			t.Errorf("%s: overtakes = %v, want %v", c.name, got, c.want)
		}
		if m.overtakes([]byte("other"), &c.r) {
			t.Errorf("%s: another key is overtaken", c.name)
		}
	}
	// An older move does not replace a newer one.
	note(m.marks, move{key: "k", at: 10, pos: change.SourcePos{CommitTS: "2025-06-01T00:00:00.500000Z"}}, time.Now())
	if !m.overtakes([]byte("k"), &row{at: 500, src: srcPos{SourcePos: change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z"}}}) {
		t.Error("an older move replaced the newer one")
	}
}

func TestMovesRoundTrip(t *testing.T) {
	t.Parallel()
	in := movedContent{moved: []move{{key: "\x00\x01bin", at: 5, pos: change.SourcePos{CommitTS: "c", TxID: "t", TxRecord: "r", Position: "p"}}, {key: "k", at: 6}},
		recreated: []move{{key: "r", at: 7}}}
	b, err := encodeMoves(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeMoves(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.moved) != 2 || out.moved[0] != in.moved[0] || out.moved[1] != in.moved[1] || len(out.recreated) != 1 || out.recreated[0] != in.recreated[0] {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}

// Two changes of one key from different shards in one millisecond whose positions do not
// compare (one transaction without its details): a key change moving the key away and an
// update of it. The update cannot follow the move at the source, so the key ends deleted,
// whichever shard sorts first and whether they commit together or apart.
func TestUpdateTiedWithTheMoveOfItsKeyIsOlder(t *testing.T) {
	t.Parallel()
	for _, apart := range []bool{false, true} {
		h, _ := itemsWithGates(t)
		h.arrive("z", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
		h.flush()
		tx := func(ev *change.Event) *change.Event { ev.Meta.TransactionID = "77"; return ev }
		h.event(tx(update("a", "1", 1300, []change.Column{col("id", "3"), col("name", "y")}, []change.Column{col("id", "2"), col("name", "y")})))
		if apart {
			h.flush()
		}
		h.event(tx(update("z", "2", 1300, []change.Column{col("id", "2"), col("name", "y2")}, []change.Column{col("id", "2"), col("name", "y")})))
		h.flush()
		rows, _ := scanRows(t, h.cat, "items")
		eq(t, rows, "id=3,name=y")
	}
}
