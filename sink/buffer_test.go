package sink

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// all is the limit without a bound in buffer order (ordering shard, or no commit bound).
var all = limit{bound: unbounded}

// bufLayout is a layout of (id INT, name STRING, qty INT) without a catalog: keyed on id or
// keyless, with the given watermarks.
func bufLayout(keyed bool, wm map[string]string) *layout {
	l := &layout{names: []string{"id", "name", "qty"},
		types:  []iceberg.Type{iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.Int32},
		byName: map[string]int{"id": 0, "name": 1, "qty": 2}, live: []int{1, 2}, watermark: wm}
	if keyed {
		l.keyIdx, l.keyIDs = []int{0}, []int{1}
	}
	return l
}

// keyPaths are the two ways a plan keys its rows (keyindex.go): the id column as an int, its
// own map key, and the same values under a type whose keys are encoded (a double key: AppendKey
// encodes its bits, here the ids). Plan tests run on both.
var keyPaths = []struct {
	name string
	typ  iceberg.Type
}{{"direct", iceberg.PrimitiveTypes.Int32}, {"encoded", iceberg.PrimitiveTypes.Float64}}

// keyedAs is l with its id column of type t.
func keyedAs(l *layout, t iceberg.Type) *layout {
	l.types[0] = t
	return l
}

// filled is a buffer holding copies of rows, each from a record of 10 bytes. The copies own
// their values: a plan may complete a row in place (a partial image), and the key paths of one
// case run in parallel on the same rows.
func filled(rows []row) *buffer {
	b := newBuffer()
	for _, r := range rows {
		r.vals, r.oldKey, r.absent = slices.Clone(r.vals), slices.Clone(r.oldKey), slices.Clone(r.absent)
		b.add(r, 10)
	}
	return &b
}

// brow is a buffered row: op is "u" (upsert), "d" (delete), "k<old>" (key change from id old),
// "p" (a partial update lacking qty) or "r" (a replayed upsert); pos is "shard/seq".
func brow(op, pos string, id int, name string, qty int) row {
	var shard string
	var seq int
	if _, err := fmt.Sscanf(pos, "%1s/%d", &shard, &seq); err != nil {
		panic(err)
	}
	r := row{shard: shard, seq: fmt.Sprint(seq), vals: []dms.Datum{{I: int64(id)}, {S: name}, {I: int64(qty)}}}
	switch {
	case op == "d":
		r.del = true
		r.vals[1], r.vals[2] = dms.Datum{Null: true}, dms.Datum{Null: true}
	case op == "p":
		r.vals[2] = dms.Datum{Null: true}
		r.absent = []int32{2}
	case op == "r":
		r.replay = true
	case op[0] == 'k':
		var old int
		if _, err := fmt.Sscanf(op[1:], "%d", &old); err != nil {
			panic(err)
		}
		r.oldKey = []dms.Datum{{I: int64(old)}}
	}
	return r
}

// The plan trims what the watermarks cover (never replayed rows), keeps every row of a keyless
// table, and collapses a keyed table's rows to the last change per key, deleting every touched
// key; partial images are completed from earlier images of their key where the batch has one.
func TestBufferPlan(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		keyed   bool
		wm      map[string]string
		rows    []row
		upserts []int    // row indexes
		deletes []int64  // ids, in first-touched order
		maxSeq  []string // "shard=seq"
		trimmed int
		// partial images: completed within the batch, looked up in the table (row indexes),
		// missing (their key was deleted earlier in the batch)
		fromBuffer int
		lookups    []int
		missing    int
		// qty of the surviving row image of row index merged (-1: not checked)
		merged, mergedQty int
	}{
		{name: "keyless keeps every row and trims covered ones", wm: map[string]string{"a": "2"},
			rows:    []row{brow("u", "a/1", 1, "x", 0), brow("u", "a/3", 1, "x", 0), brow("u", "b/1", 1, "x", 0), brow("u", "a/2", 2, "y", 0)},
			upserts: []int{1, 2}, maxSeq: []string{"a=3", "b=1"}, trimmed: 2, merged: -1},
		{name: "keyless replay is never trimmed and never advances", wm: map[string]string{"a": "5"},
			rows:    []row{brow("r", "a/1", 1, "x", 0), brow("u", "a/6", 2, "y", 0)},
			upserts: []int{0, 1}, maxSeq: []string{"a=6"}, merged: -1},
		{name: "last change per key wins", keyed: true,
			rows: []row{brow("u", "a/1", 1, "first", 1), brow("u", "a/2", 1, "second", 2), brow("d", "a/3", 2, "", 0),
				brow("u", "a/4", 3, "c", 3), brow("d", "a/5", 3, "", 0), brow("d", "a/6", 4, "", 0), brow("u", "a/7", 4, "again", 4)},
			upserts: []int{1, 6}, deletes: []int64{1, 2, 3, 4}, maxSeq: []string{"a=7"}, merged: -1},
		{name: "a key change deletes the old key", keyed: true,
			rows:    []row{brow("u", "a/1", 3, "c", 3), brow("k3", "a/2", 30, "moved", 3)},
			upserts: []int{1}, deletes: []int64{3, 30}, maxSeq: []string{"a=2"}, merged: -1},
		{name: "keyed trims covered rows per shard", keyed: true, wm: map[string]string{"a": "2", "b": "9"},
			rows:    []row{brow("u", "a/2", 1, "old", 1), brow("u", "b/3", 1, "older", 1), brow("u", "a/3", 2, "new", 2)},
			upserts: []int{2}, deletes: []int64{2}, maxSeq: []string{"a=3"}, trimmed: 2, merged: -1},
		{name: "partial image completed from an earlier image", keyed: true,
			rows:    []row{brow("u", "a/1", 1, "a", 7), brow("p", "a/2", 1, "b", 0)},
			upserts: []int{1}, deletes: []int64{1}, maxSeq: []string{"a=2"}, fromBuffer: 1, merged: 1, mergedQty: 7},
		{name: "partial image of a key the batch does not have is looked up", keyed: true,
			rows:    []row{brow("p", "a/1", 1, "b", 0)},
			upserts: []int{0}, deletes: []int64{1}, maxSeq: []string{"a=1"}, lookups: []int{0}, merged: -1},
		{name: "partial image after a delete of its key keeps nothing", keyed: true,
			rows:    []row{brow("d", "a/1", 1, "", 0), brow("p", "a/2", 1, "b", 0)},
			upserts: []int{1}, deletes: []int64{1}, maxSeq: []string{"a=2"}, missing: 1, merged: -1},
		{name: "partial image after a key change completes from the changed row", keyed: true,
			rows:    []row{brow("k5", "a/1", 6, "x", 1), brow("p", "a/2", 6, "y", 0)},
			upserts: []int{1}, deletes: []int64{5, 6}, maxSeq: []string{"a=2"}, fromBuffer: 1, merged: 1, mergedQty: 1},
	}
	for _, c := range cases {
		for _, kp := range keyPaths {
			t.Run(c.name+"/"+kp.name, func(t *testing.T) {
				t.Parallel()
				b := filled(c.rows)
				got := b.plan(keyedAs(bufLayout(c.keyed, c.wm), kp.typ), all)
				if !slices.Equal(got.upserts, c.upserts) {
					t.Errorf("upserts %v, want %v", got.upserts, c.upserts)
				}
				var dels []int64
				for _, k := range got.deletes {
					dels = append(dels, k[0].I)
				}
				if !slices.Equal(dels, c.deletes) {
					t.Errorf("deletes %v, want %v", dels, c.deletes)
				}
				var seqs []string
				for _, s := range slices.Sorted(maps.Keys(got.maxSeq)) {
					seqs = append(seqs, s+"="+got.maxSeq[s])
				}
				if !slices.Equal(seqs, c.maxSeq) {
					t.Errorf("maxSeq %v, want %v", seqs, c.maxSeq)
				}
				if got.trimmed != c.trimmed {
					t.Errorf("trimmed %d, want %d", got.trimmed, c.trimmed)
				}
				var lks []int
				for _, lk := range got.lookups {
					lks = append(lks, lk.row)
				}
				if got.fromBuffer != c.fromBuffer || !slices.Equal(lks, c.lookups) || got.missing != c.missing {
					t.Errorf("partial: from buffer %d, lookups %v, missing %d; want %d, %v, %d",
						got.fromBuffer, lks, got.missing, c.fromBuffer, c.lookups, c.missing)
				}
				if c.merged >= 0 {
					r := b.rows.at(c.merged)
					if r.vals[2] != (dms.Datum{I: int64(c.mergedQty)}) || len(r.absent) != 0 || r.absent == nil {
						t.Errorf("merged row: qty %+v absent %v, want qty %d and an empty absent list", r.vals[2], r.absent, c.mergedQty)
					}
				}
				if got.empty() != (len(c.upserts) == 0 && len(c.deletes) == 0) {
					t.Errorf("empty() = %v", got.empty())
				}
			})
		}
	}
}

// A lookup of a key change's partial image uses the old key's stored row.
func TestBufferPlanLookupKey(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	b.add(brow("k5", "a/1", 6, "x", 1), 10)
	b.rows.at(0).absent = []int32{2}
	got := b.plan(bufLayout(true, nil), all)
	if len(got.lookups) != 1 || got.lookups[0].key[0].I != 5 {
		t.Fatalf("lookups %+v, want one of key 5", got.lookups)
	}
}

type ackCount map[string]int

type namedAcker struct {
	name string
	got  ackCount
}

func (a *namedAcker) Done(n int) { a.got[a.name] += n }

// Acknowledgements wait for release, counted per acker whatever their order; the buffer knows
// what it holds per shard, and release empties it.
func TestBufferAcksAndRelease(t *testing.T) {
	t.Parallel()
	got := ackCount{}
	x, y := &namedAcker{"x", got}, &namedAcker{"y", got}
	b := newBuffer()
	if b.pending() {
		t.Fatal("a new buffer is pending")
	}
	t0 := time.Unix(100, 0)
	clock := t0
	b.now = func() time.Time { clock = clock.Add(time.Second); return clock.Add(-time.Second) }
	for i, a := range []change.Acker{x, x, y, x, nil, y, y} {
		r := brow("u", fmt.Sprintf("a/%d", i+1), i, "x", 0)
		r.ack = a
		b.add(r, 100)
	}
	if !b.pending() || !b.first.Equal(t0) {
		t.Fatalf("pending %v, first %v; want pending since %v", b.pending(), b.first, t0)
	}
	b.add(brow("u", "a/9", 1, "x", 0), 100)
	b.add(brow("r", "b/9", 2, "y", 0), 100)
	if !b.holds("a", "9") || !b.holds("a", "4") || b.holds("a", "10") || b.holds("b", "1") {
		t.Fatalf("holds: high %v (a replayed row must not count)", b.high)
	}
	if b.bytes != 9*(100+64) || len(got) != 0 {
		t.Fatalf("bytes %d, acknowledged %v before release", b.bytes, got)
	}
	bt := b.plan(bufLayout(true, nil), all)
	b.release(&bt)
	if got["x"] != 3 || got["y"] != 3 {
		t.Fatalf("acknowledged %v, want x=3 y=3", got)
	}
	if b.pending() || b.rows.len() != 0 || b.bytes != 0 || !b.first.IsZero() || len(b.high) != 0 {
		t.Fatalf("buffer not empty after release: %+v", b)
	}
	b.release(&batch{}) // a later commit that took nothing
	if got["x"] != 3 || got["y"] != 3 {
		t.Fatalf("a second release acknowledged again: %v", got)
	}
}

// A batch landed when the watermarks cover every shard it advances; a batch of replayed rows
// only never counts as landed.
func TestBatchLandedIn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		maxSeq, wm map[string]string
		want       bool
	}{
		{map[string]string{"a": "5"}, map[string]string{"a": "5"}, true},
		{map[string]string{"a": "5"}, map[string]string{"a": "6"}, true},
		{map[string]string{"a": "5"}, map[string]string{"a": "4"}, false},
		{map[string]string{"a": "5", "b": "2"}, map[string]string{"a": "9"}, false},
		{map[string]string{}, map[string]string{"a": "9"}, false},
	} {
		b := batch{maxSeq: c.maxSeq}
		if got := b.landedIn(c.wm); got != c.want {
			t.Errorf("maxSeq %v, watermarks %v: landed %v, want %v", c.maxSeq, c.wm, got, c.want)
		}
	}
}

// at sets a row's arrival (unix ms) and returns it.
func at(r row, ms int64) row { r.at = ms; return r }

// The guard's plan takes, per shard, the prefix of rows arrived at or before the bound that
// precede the cut, and decides the last change per key in (load, arrival, source position)
// order; ordering shard keeps buffer order.
func TestBufferPlanBound(t *testing.T) {
	t.Parallel()
	ctl := &held{ev: &change.Event{Op: change.OpControl, Pos: change.Position{Shard: "c", Seq: "2"}}, at: 150, ctl: true}
	load := func(r row) row { r.src.load, r.kind = true, kindLoad; return r }
	keyChange := func(r row) row { r.okh = 1; return r } // moves a key away (no other worker's move pending)
	commitTS := func(r row, ts string) row { r.src.CommitTS = ts; return r }
	txRec := func(r row, tx, rec string) row { r.src.TxID, r.src.TxRecord = tx, rec; return r }
	cases := []struct {
		name    string
		lim     limit
		rows    []row
		take    []int // in plan order
		upserts []int
		maxSeq  []string
	}{
		{name: "cross-shard order by arrival", lim: limit{bound: unbounded, ordered: true},
			rows: []row{at(brow("u", "b/1", 1, "new", 2), 200), at(brow("u", "a/1", 1, "old", 1), 100)},
			take: []int{1, 0}, upserts: []int{0}, maxSeq: []string{"a=1", "b=1"}},
		{name: "ordering shard keeps buffer order", lim: all,
			rows: []row{at(brow("u", "b/1", 1, "new", 2), 200), at(brow("u", "a/1", 1, "old", 1), 100)},
			take: []int{0, 1}, upserts: []int{1}, maxSeq: []string{"a=1", "b=1"}},
		{name: "a load is older than any CDC change of its key", lim: limit{bound: unbounded, ordered: true},
			rows: []row{at(brow("u", "a/1", 1, "cdc", 1), 100), at(load(brow("u", "b/1", 1, "load", 0)), 300)},
			take: []int{1, 0}, upserts: []int{0}, maxSeq: []string{"a=1", "b=1"}},
		{name: "same arrival: the source position decides", lim: limit{bound: unbounded, ordered: true},
			rows: []row{at(commitTS(brow("u", "b/1", 1, "later", 1), "2025-01-01T00:00:02.000000Z"), 100),
				at(commitTS(brow("u", "a/1", 1, "earlier", 0), "2025-01-01T00:00:01.000000Z"), 100)},
			take: []int{1, 0}, upserts: []int{0}, maxSeq: []string{"a=1", "b=1"}},
		{name: "within a shard the sequence decides, not the source position", lim: limit{bound: unbounded, ordered: true},
			rows: []row{at(commitTS(brow("u", "a/1", 1, "first", 1), "2025-01-01T00:00:02.000000Z"), 100),
				at(commitTS(brow("u", "a/2", 1, "second", 0), "2025-01-01T00:00:01.000000Z"), 100)},
			take: []int{0, 1}, upserts: []int{1}, maxSeq: []string{"a=2"}},
		{name: "same transaction: the record id decides", lim: limit{bound: unbounded, ordered: true},
			rows: []row{at(txRec(brow("u", "b/1", 1, "second", 1), "9", "10"), 100), at(txRec(brow("u", "a/1", 1, "first", 0), "9", "9"), 100)},
			take: []int{1, 0}, upserts: []int{0}, maxSeq: []string{"a=1", "b=1"}},
		{name: "a prefix per shard within the bound", lim: limit{bound: 200, ordered: true},
			rows: []row{at(brow("u", "a/1", 1, "x", 0), 100), at(brow("u", "a/2", 2, "y", 0), 300),
				at(brow("u", "a/3", 3, "z", 0), 150), at(brow("u", "b/1", 4, "w", 0), 50)},
			take: []int{3, 0}, upserts: []int{3, 0}, maxSeq: []string{"a=1", "b=1"}},
		{name: "cut at a held control record", lim: limit{bound: 1000, ordered: true, cut: ctl},
			rows: []row{at(brow("u", "a/1", 1, "x", 0), 100), at(brow("u", "b/1", 2, "y", 0), 150),
				at(brow("u", "c/1", 3, "z", 0), 150), at(brow("u", "a/2", 4, "w", 0), 160)},
			take: []int{0, 2}, upserts: []int{0, 2}, maxSeq: []string{"a=1", "c=1"}},
		{name: "zero bound: nothing commits", lim: limit{bound: -1, ordered: true},
			rows: []row{at(brow("u", "a/1", 1, "x", 0), 0)}},
		{name: "the load gate holds CDC changes at and after it, not loads", lim: limit{bound: 1000, loadGate: 200, ordered: true},
			rows: []row{at(brow("u", "a/1", 1, "x", 0), 150), at(brow("u", "a/2", 2, "y", 0), 200),
				at(load(brow("u", "b/1", 3, "l", 0)), 250), at(brow("u", "c/1", 4, "z", 0), 199)},
			take: []int{2, 0, 3}, upserts: []int{2, 0, 3}, maxSeq: []string{"a=1", "b=1", "c=1"}},
		{name: "the control gate holds every data record at and after it", lim: limit{bound: 1000, ctlGate: 200, ordered: true},
			rows: []row{at(load(brow("u", "a/1", 1, "l", 0)), 200), at(brow("u", "b/1", 2, "y", 0), 199),
				at(brow("u", "b/2", 3, "z", 0), 300)},
			take: []int{1}, upserts: []int{1}, maxSeq: []string{"b=1"}},
		{name: "the change gate holds no data record: key changes wait for no other worker", lim: limit{bound: 1000, chGate: 200, ordered: true},
			rows: []row{at(keyChange(brow("u", "a/1", 1, "k", 0)), 200), at(keyChange(brow("u", "a/2", 2, "k2", 0)), 201),
				at(brow("u", "b/1", 3, "z", 0), 300)},
			take: []int{0, 1, 2}, upserts: []int{0, 1, 2}, maxSeq: []string{"a=2", "b=1"}},
		{name: "a zero arrival is within any bound", lim: limit{bound: 5, ordered: true},
			rows: []row{at(brow("u", "a/1", 1, "x", 0), 0), at(brow("u", "a/2", 2, "y", 0), 6)},
			take: []int{0}, upserts: []int{0}, maxSeq: []string{"a=1"}},
	}
	for _, c := range cases {
		for _, kp := range keyPaths {
			t.Run(c.name+"/"+kp.name, func(t *testing.T) {
				t.Parallel()
				b := filled(c.rows)
				got := b.plan(keyedAs(bufLayout(true, nil), kp.typ), c.lim)
				if !slices.Equal(got.take, c.take) || !slices.Equal(got.upserts, c.upserts) {
					t.Errorf("take %v upserts %v, want %v and %v", got.take, got.upserts, c.take, c.upserts)
				}
				var seqs []string
				for _, s := range slices.Sorted(maps.Keys(got.maxSeq)) {
					seqs = append(seqs, s+"="+got.maxSeq[s])
				}
				if !slices.Equal(seqs, c.maxSeq) {
					t.Errorf("maxSeq %v, want %v", seqs, c.maxSeq)
				}
				if b.within(c.lim) != (len(c.take) > 0) {
					t.Errorf("within = %v with take %v", b.within(c.lim), c.take)
				}
			})
		}
	}
}

// Rows past the bound stay buffered with their acknowledgements; a re-delivery waits for the
// rows of its shard at or before it; arrivals never go back within a shard.
func TestBufferPartialRelease(t *testing.T) {
	t.Parallel()
	got := ackCount{}
	x, y, d := &namedAcker{"x", got}, &namedAcker{"y", got}, &namedAcker{"dup", got}
	b := newBuffer()
	ev := func(shard string, ms int64) *change.Event {
		return &change.Event{Pos: change.Position{Shard: shard}, Arrival: time.UnixMilli(ms)}
	}
	if a1, a2, a3 := b.arrival(ev("a", 100)), b.arrival(ev("a", 300)), b.arrival(ev("a", 150)); a1 != 100 || a2 != 300 || a3 != 300 {
		t.Fatalf("arrivals %d %d %d, want 100 300 300", a1, a2, a3)
	}
	for _, r := range []struct {
		pos string
		ms  int64
		ak  change.Acker
	}{{"a/1", 100, x}, {"a/2", 300, y}, {"b/1", 120, x}, {"b/5", 400, y}} {
		rw := at(brow("u", r.pos, b.rows.len(), "v", 0), r.ms)
		rw.ack = r.ak
		b.add(rw, 10)
	}
	b.attach("a", "2", d) // a re-delivery of a/2: waits for a/2
	b.attach("b", "3", d) // of b/3 (dead-lettered, say): waits for b/1 only
	bt := b.plan(bufLayout(true, nil), limit{bound: 200, ordered: true})
	b.release(&bt)
	if got["x"] != 2 || got["y"] != 0 || got["dup"] != 1 {
		t.Fatalf("acknowledged %v after the first commit, want x=2 dup=1", got)
	}
	if b.rows.len() != 2 || b.rows.at(0).seq != "2" || b.rows.at(1).seq != "5" || !b.pending() || b.first.IsZero() {
		t.Fatalf("%d rows, pending %v: want a/2 and b/5 still buffered", b.rows.len(), b.pending())
	}
	if b.high["a"] != "2" || b.bytes != 2*(10+64) {
		t.Fatalf("high %v bytes %d", b.high, b.bytes)
	}
	bt = b.plan(bufLayout(true, nil), limit{bound: 200, ordered: true})
	if len(bt.take) != 0 {
		t.Fatalf("took %v again at the same bound", bt.take)
	}
	bt = b.plan(bufLayout(true, nil), limit{bound: 1000, ordered: true})
	b.release(&bt)
	if got["x"] != 2 || got["y"] != 2 || got["dup"] != 2 || b.pending() {
		t.Fatalf("acknowledged %v, pending %v after the bound moved; want x=2 y=2 dup=2, nothing pending", got, b.pending())
	}
}

// Held events stay sorted by arrival, within a shard by sequence, control records first at
// the same arrival; due returns the first only once the bound reached it.
func TestBufferHeld(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	ev := func(op change.Op, shard, seq string) *change.Event {
		return &change.Event{Op: op, Pos: change.Position{Shard: shard, Seq: seq}, Raw: []byte("r")}
	}
	holdEv(&b, ev(change.OpInsert, "a", "1"), 200)
	holdEv(&b, ev(change.OpInsert, "a", "2"), 200)
	holdEv(&b, ev(change.OpControl, "c", "7"), 200)
	holdEv(&b, ev(change.OpInsert, "b", "4"), 100)
	var order []string
	for _, h := range b.held {
		order = append(order, h.ev.Pos.Shard+"/"+h.ev.Pos.Seq)
	}
	if want := []string{"b/4", "c/7", "a/1", "a/2"}; !slices.Equal(order, want) {
		t.Fatalf("held order %v, want %v", order, want)
	}
	if b.due(limit{bound: 99}) != -1 || b.due(limit{bound: 100}) != 0 || !b.holds("a", "2") || b.bytes != 4*(1+64) {
		t.Fatalf("due/holds/bytes wrong: high %v bytes %d", b.high, b.bytes)
	}
	// The control gate holds the first held data record (b/4 at 100), and so the control record
	// after it.
	if got := b.due(limit{bound: 1000, ctlGate: 100}); got != -1 {
		t.Fatalf("due %d with the first held data record gated, want -1 (the control record waits for it)", got)
	}
	if got := b.due(limit{bound: 1000, ctlGate: 101}); got != 0 {
		t.Fatalf("due %d, want 0", got)
	}
	c := newBuffer()
	holdEv(&c, ev(change.OpControl, "c", "1"), 100)
	if c.due(limit{bound: 1000, ctlGate: 50, loadGate: 50, chGate: 50}) != 0 {
		t.Fatal("a gate held a control record")
	}
	// ... but a control record waits for the buffered rows that arrived before it and that a gate
	// holds back (not for those of its own millisecond: control records go first at a tie).
	if c.due(limit{bound: 1000, waitFrom: 99}) != -1 || c.due(limit{bound: 1000, waitFrom: 100}) != 0 {
		t.Fatal("a control record did not wait for the gated records before it")
	}
	// A gated held data record holds back only its own shard's later held events: the next
	// shard's are due.
	d := newBuffer()
	holdEv(&d, ev(change.OpInsert, "a", "1"), 100)
	holdEv(&d, ev(change.OpInsert, "a", "2"), 110)
	holdEv(&d, ev(change.OpLoad, "b", "1"), 120)
	if got := d.due(limit{bound: 1000, loadGate: 90}); got != 2 {
		t.Fatalf("due %d with shard a's CDC gated, want 2 (shard b's load)", got)
	}
	if h := d.pop(2); h.ev.Pos.Shard != "b" || len(d.held) != 2 {
		t.Fatalf("popped %+v, %d left", h.ev.Pos, len(d.held))
	}
	// A flush's walk resumes after the held-back events and takes the rest of the other shard in
	// order, never a held-back shard's event, and stops at a control record behind them.
	e := newBuffer()
	holdEv(&e, ev(change.OpInsert, "a", "1"), 100)
	holdEv(&e, ev(change.OpLoad, "b", "1"), 110)
	holdEv(&e, ev(change.OpInsert, "a", "2"), 120)
	holdEv(&e, ev(change.OpLoad, "b", "2"), 130)
	holdEv(&e, ev(change.OpControl, "c", "1"), 140)
	var sc dueScan
	var took []string
	gated := limit{bound: 1000, loadGate: 90}
	for i := e.dueFrom(gated, &sc); i >= 0; i = e.dueFrom(gated, &sc) {
		h := e.pop(i)
		took = append(took, h.ev.Pos.Shard+"/"+h.ev.Pos.Seq)
	}
	if want := []string{"b/1", "b/2"}; !slices.Equal(took, want) || len(e.held) != 3 {
		t.Fatalf("walk took %v (%d left), want %v and shard a's two records and the control record left", took, len(e.held), want)
	}
	for range 4 {
		b.pop(0)
	}
	if b.pending() || b.bytes != 0 {
		t.Fatalf("pending after popping everything (bytes %d)", b.bytes)
	}
}

// gatedFrom is the earliest row within the bound that a gate holds back, and a commit is complete
// only up to just before it.
func TestGatedFromCapsCompleteThrough(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	for i, at := range []int64{100, 150, 250, 2000} {
		r := brow("u", fmt.Sprintf("a/%d", i+1), i+1, "x", 0)
		r.at = at
		b.rows.push(r)
	}
	lim := limit{bound: 1000, loadGate: 140, through: time.UnixMilli(1000).UTC()}
	if got := b.gatedFrom(lim); got != 150 {
		t.Fatalf("gatedFrom %d, want 150 (the first CDC row at or after the load gate, within the bound)", got)
	}
	lim.waitFrom = 150
	if got := lim.completeThrough(); !got.Equal(time.UnixMilli(149).UTC()) {
		t.Fatalf("complete through %v, want just before the held-back row", got)
	}
	if got := b.gatedFrom(limit{bound: 1000}); got != 0 {
		t.Fatalf("gatedFrom %d without gates, want 0", got)
	}
}

// A keyless table with the DMS record identity (here the name column stands for it) keeps one
// copy per identity, the last, with one delete per identity; rows without one are all kept.
func TestBufferPlanKeylessIdentity(t *testing.T) {
	t.Parallel()
	l := bufLayout(false, map[string]string{"a": "1"})
	l.hasID, l.idIdx, l.idID = true, 1, 2
	noID := brow("u", "a/5", 9, "", 0)
	noID.vals[1] = dms.Datum{Null: true}
	b := newBuffer()
	for _, r := range []row{brow("u", "a/1", 1, "x", 0), brow("u", "a/2", 1, "x", 0), brow("u", "a/3", 2, "y", 0),
		brow("u", "a/4", 1, "x", 0), brow("r", "b/1", 1, "x", 0), noID, noID} {
		b.add(r, 10)
	}
	got := b.plan(l, all)
	if want := []int{4, 2, 5, 6}; !slices.Equal(got.upserts, want) {
		t.Errorf("upserts %v, want %v", got.upserts, want)
	}
	var dels []string
	for _, k := range got.deletes {
		dels = append(dels, k[0].S)
	}
	if want := []string{"x", "y"}; !slices.Equal(dels, want) || got.trimmed != 1 {
		t.Errorf("deletes %v (want %v), trimmed %d (want 1)", dels, want, got.trimmed)
	}
}

// holdEv holds e in b with the kind its operation and images give (gateKindOf).
func holdEv(b *buffer, e *change.Event, at int64) { b.hold(e, at, gateKindOf(e)) }

// A reload supersedes changes built strictly before its create-table. DMS's metadata.timestamp
// (six fractional digits and Z) compares as text, across a day and within a microsecond; other
// forms are compared as times, and one that does not parse supersedes nothing.
func TestBuiltBefore(t *testing.T) {
	t.Parallel()
	const start = "2025-01-02T00:00:00.000000Z"
	for _, tc := range []struct {
		built, start string
		want         bool
	}{
		{"2025-01-01T23:59:59.999999Z", start, true},
		{"2024-12-31T00:00:00.000000Z", start, true},
		{start, start, false},
		{"2025-01-02T00:00:00.000001Z", start, false},
		{"2025-01-02T00:00:00Z", "2025-01-02T00:00:00.500000Z", true},   // text would say no
		{"2025-01-02T00:00:00.0000001Z", start, false},                  // text would say yes
		{"2025-01-02T01:00:00.000000+02:00", start, true},               // 23:00 UTC
		{"2025-01-02T00:00:00.000000Z", "2025-01-02T00:00:00.5Z", true}, // a create-table of another form
		{"yesterday", start, false},
	} {
		if got := builtBefore(tc.built, tc.start); got != tc.want {
			t.Errorf("builtBefore(%q, %q) = %v, want %v", tc.built, tc.start, got, tc.want)
		}
	}
}
