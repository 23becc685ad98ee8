package checkpoint

import (
	"reflect"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// What the table writer tells of a tracked possible key change decides how it is published: a
// key change by its old key's hash, an update that keeps its key as a CDC change, one not told
// yet as a move of an unknown key. Acknowledged events are not published.
func TestPendingMovesFollowWhatTheWriterTold(t *testing.T) {
	t.Parallel()
	s := NewShard("shardId-0", "")
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	d := s.BeginTracked("10", at(100), []Tracked{
		{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(100)},
		{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(110)},
		{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(120)},
		{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(130)},
	})
	moved := d.Event(0).(*eventAck)
	moved.MovesKey(0xabc)
	d.Event(1).(*eventAck).MovesNoKey()
	d.Event(3).(*eventAck).MovesKey(0xabc)
	g := s.PendingTables()["s.a"]
	if !g.Moves.Keys[0xabc].At.Equal(at(100)) || len(g.Moves.Keys) != 1 || !g.Moves.Unknown.At.Equal(at(120)) {
		t.Fatalf("moves %+v, want key abc at 100 and unknown at 120", g.Moves)
	}
	if !g.Kinds[KindChange].At.Equal(at(110)) || !g.Kinds[KindKeyChange].At.Equal(at(100)) {
		t.Fatalf("kinds %+v", g.Kinds)
	}
	moved.Done(1)
	d.Event(2).Done(1)
	g = s.PendingTables()["s.a"]
	if !g.Moves.Keys[0xabc].At.Equal(at(130)) || !g.Moves.Unknown.At.IsZero() {
		t.Fatalf("after acknowledgements: moves %+v, want key abc at 130", g.Moves)
	}
}

// A move of a known key holds nothing: it tells which later writes of its key are re-creations
// (Precedes). A move of an unknown key holds every write of the table after it.
func TestMovesHoldOnlyForUnknownKeys(t *testing.T) {
	t.Parallel()
	var m Moves
	m.Add(7, Gate{At: time.UnixMilli(100), Pos: change.SourcePos{TxID: "50"}})
	for _, c := range []struct {
		h             uint64
		at            int64
		earlier, same bool
	}{{7, 101, true, false}, {7, 100, false, true}, {7, 99, false, false}, {8, 101, false, false}, {8, 100, false, false}, {0, 500, false, false}} {
		if m.Holds(c.at) {
			t.Errorf("Holds(%d): a move of a known key holds", c.at)
		}
		if earlier, same := m.Precedes(c.h, c.at); earlier != c.earlier || same != c.same {
			t.Errorf("Precedes(%d, %d) = %v, %v, want %v, %v", c.h, c.at, earlier, same, c.earlier, c.same)
		}
	}
	m.AddUnknown(Gate{At: time.UnixMilli(200)})
	if !m.Holds(201) || m.Holds(200) {
		t.Error("a move of an unknown key holds every write after it, only after it")
	}
	if _, same := m.Precedes(8, 200); !same {
		t.Error("a write in the millisecond of a move of an unknown key is not told")
	}
}

// Past MaxMoves keys a table's moves count as a move of an unknown key, but moves merged from
// several rows keep every key; merging never changes the merged-in moves; the stored form
// round-trips.
func TestMovesCapMergeAndEncoding(t *testing.T) {
	t.Parallel()
	var m Moves
	for i := range MaxMoves + 3 {
		m.Add(uint64(i+1), Gate{At: time.UnixMilli(int64(1000 + i)).UTC()})
	}
	if len(m.Keys) != MaxMoves || !m.Unknown.At.Equal(time.UnixMilli(int64(1000+MaxMoves)).UTC()) {
		t.Fatalf("%d keys, unknown %v", len(m.Keys), m.Unknown)
	}
	var other Moves
	other.Add(1, Gate{At: time.UnixMilli(5).UTC()})
	before := len(other.Keys)
	other.Merge(m)
	if len(m.Keys) != MaxMoves || before != 1 || !other.Keys[1].At.Equal(time.UnixMilli(5).UTC()) {
		t.Fatal("merge changed its source or lost the older move")
	}
	var disjoint Moves
	for i := range MaxMoves {
		disjoint.Add(uint64(MaxMoves+100+i), Gate{At: time.UnixMilli(int64(3000 + i)).UTC()})
	}
	other.Merge(disjoint) // the bound is a lease row's, not the merged moves'
	if len(other.Keys) != 2*MaxMoves || !other.Unknown.At.Equal(m.Unknown.At) {
		t.Fatalf("merged %d keys, unknown %v: want %d keys and the merged-in unknown", len(other.Keys), other.Unknown, 2*MaxMoves)
	}
	p := PendingTables{"s.a": {Moves: m}}
	got, err := decodePendingTables(p.encode())
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip: %v", err)
	}
	if g := got.For("s.b"); !g.Moves.empty() {
		t.Fatal("another table's moves apply")
	}
}

// A lease row names at most maxRowMoves keys over its tables; the tables past the bound publish
// their moves as a move of an unknown key (which holds every later write: conservative).
func TestMovesRowBound(t *testing.T) {
	t.Parallel()
	p := PendingTables{}
	for ti, name := range []string{"s.a", "s.b", "s.c", "s.d", "s.e"} {
		var g TableGates
		for i := range MaxMoves {
			g.Moves.Add(uint64(ti*MaxMoves+i+1), Gate{At: time.UnixMilli(int64(1000 + i)).UTC()})
		}
		p[name] = g
	}
	got, err := decodePendingTables(p.encode())
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	for _, g := range got {
		keys += len(g.Moves.Keys)
	}
	if keys != maxRowMoves || len(got["s.e"].Moves.Keys) != 0 || !got["s.e"].Moves.Unknown.At.Equal(time.UnixMilli(1000).UTC()) {
		t.Fatalf("%d keys on the row, s.e %d keys and unknown %v", keys, len(got["s.e"].Moves.Keys), got["s.e"].Moves.Unknown.At)
	}
}

// A possible key change tracked before its table's key columns were known is classified from
// its images as soon as they are, without waiting for its table writer: a key change by its old
// key, an update that keeps its key as a CDC change. Without the key columns it stays a move of
// an unknown key.
func TestPendingMovesAreClassifiedOnceTheKeyIsKnown(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	col := func(n, v string) change.Column {
		return change.Column{Name: n, Value: change.Value{Kind: change.KindNumber, Text: v}}
	}
	moves := &change.Event{Op: change.OpUpdate, Before: []change.Column{col("id", "1"), col("v", "a")}, Columns: []change.Column{col("id", "2"), col("v", "a")}}
	keeps := &change.Event{Op: change.OpUpdate, Before: []change.Column{col("id", "3"), col("v", "a")}, Columns: []change.Column{col("id", "3"), col("v", "b")}}
	track := func(s *Shard) {
		s.BeginTracked("10", at(100), []Tracked{
			{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(100), Images: moves},
			{Schema: "s", Table: "a", Kind: KindKeyChange, At: at(110), Images: keeps},
		})
	}
	var known []string
	s := NewShard("shardId-0", "").WithKeyColumns(func(schema, table string) []string {
		if schema == "s" && table == "a" {
			return known
		}
		return nil
	})
	track(s)
	if g := s.PendingTables()["s.a"]; !g.Moves.Unknown.At.Equal(at(100)) || len(g.Moves.Keys) != 0 {
		t.Fatalf("before the key is known: moves %+v, want unknown at 100", g.Moves)
	}
	known = []string{"id"}
	h, _ := change.KeyHash(moves.Before, known)
	g := s.PendingTables()["s.a"]
	if len(g.Moves.Keys) != 1 || !g.Moves.Keys[h].At.Equal(at(100)) || !g.Moves.Unknown.At.IsZero() {
		t.Fatalf("once the key is known: moves %+v, want key %x at 100 only", g.Moves, h)
	}
	if !g.Kinds[KindChange].At.Equal(at(110)) {
		t.Fatalf("the update that keeps its key: kinds %+v, want a CDC change at 110", g.Kinds)
	}
	blind := NewShard("shardId-1", "")
	track(blind)
	if g := blind.PendingTables()["s.a"]; !g.Moves.Unknown.At.Equal(at(100)) {
		t.Fatalf("without key columns: moves %+v, want unknown at 100", g.Moves)
	}
}
