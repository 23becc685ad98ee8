package consumer

import (
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Unit tests of the pure W computation (watermark.go): one table row per shard-state rule.

// t0 lies before any real clock reading, so that a real listing time never caps a test's tip.
var t0 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

const ms = time.Millisecond

// rowOf is a lease row owned by owner with ReadHorizon at sec(h) (h < 0: none) and PendingFrom at
// sec(p) (p < 0: none).
func rowOf(owner string, h, p int) checkpoint.LeaseRow {
	r := checkpoint.LeaseRow{Exists: true, Owner: owner, Epoch: 1}
	if h >= 0 {
		r.ReadHorizon = sec(h)
	}
	if p >= 0 {
		r.PendingFrom = sec(p)
	}
	return r
}

func ended(h int) checkpoint.LeaseRow {
	r := rowOf("", h, -1)
	r.Checkpoint = checkpoint.ShardEnd
	return r
}

func TestWatermarkRules(t *testing.T) {
	t.Parallel()
	open := func(parents ...string) shardInfo { return shardInfo{parents: parents} }
	closed := func(parents ...string) shardInfo { return shardInfo{parents: parents, closed: true} }
	for _, c := range []struct {
		name   string
		shards map[string]shardInfo
		rows   map[string]checkpoint.LeaseRow
		own    map[string]ownShard
		memo   map[string]time.Time
		w      time.Time // zero: unknown
		bound  time.Time
		holder string
	}{
		{name: "minimum of the open shards' published horizons",
			shards: map[string]shardInfo{"a": open(), "b": open(), "c": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w2", 20, -1), "b": rowOf("w2", 10, -1), "c": rowOf("w3", 30, -1)},
			w:      sec(10), bound: sec(10), holder: "b"},
		{name: "an owned shard counts with its horizon from memory, not its row",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf(me, 5, -1), "b": rowOf("w2", 20, -1)},
			own:    map[string]ownShard{"a": {horizon: sec(25)}},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "a closed shard not yet at SHARD_END counts",
			shards: map[string]shardInfo{"a": closed(), "b": open("a")},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w2", 7, -1), "b": rowOf("w2", 20, -1)},
			w:      sec(7), bound: sec(7), holder: "a"},
		{name: "a shard at SHARD_END does not count, nor does its pending",
			shards: map[string]shardInfo{"a": closed(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": func() checkpoint.LeaseRow { r := ended(1); r.PendingFrom = sec(0); return r }(), "b": rowOf("w2", 20, -1)},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "a shard gone from ListShards does not count",
			shards: map[string]shardInfo{"b": open()},
			rows:   map[string]checkpoint.LeaseRow{"gone": rowOf("w2", 1, 0), "b": rowOf("w2", 20, -1)},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "an unknown horizon with no memo leaves W unknown: nothing commits",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w2", 20, -1)},
			holder: "b"},
		{name: "an owned shard that has handed nothing on yet is unknown too",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf(me, -1, -1), "b": rowOf("w2", 20, -1)},
			own:    map[string]ownShard{"a": {}},
			holder: "a"},
		{name: "an unknown horizon holds W at the shard's memo (lease just taken)",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w3", -1, -1), "b": rowOf("w2", 20, -1)},
			memo:   map[string]time.Time{"a": sec(9)},
			w:      sec(9), bound: sec(9), holder: "a"},
		{name: "a dead worker's row keeps its horizon and pending",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("dead", 15, 12), "b": rowOf("w2", 20, -1)},
			w:      sec(15), bound: sec(15), holder: "a"},
		{name: "an unstarted child of finished parents counts with their lowest final horizon",
			shards: map[string]shardInfo{"p1": closed(), "p2": closed(), "c": open("p1", "p2"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p1": ended(14), "p2": ended(12), "b": rowOf("w2", 20, -1)},
			w:      sec(12), bound: sec(12), holder: "c"},
		{name: "an unstarted child of an unfinished parent is covered by it",
			shards: map[string]shardInfo{"p": closed(), "c": open("p"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p": rowOf("w2", 25, -1), "b": rowOf("w2", 20, -1)},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "a child waiting in its owner for an unfinished parent is covered by it",
			shards: map[string]shardInfo{"p": closed(), "c": open("p"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p": rowOf("w2", 25, -1), "c": rowOf(me, -1, -1), "b": rowOf("w2", 20, -1)},
			own:    map[string]ownShard{"c": {}},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "a finished parent without a final horizon leaves its unstarted child unknown",
			shards: map[string]shardInfo{"p": closed(), "c": open("p"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p": ended(-1), "b": rowOf("w2", 20, -1)},
			holder: "c"},
		{name: "a merge child is covered by its unfinished parent whatever its other parent says",
			// Seen in a 200-cycle chaos run: the merged child waited in its owner for the
			// unfinished parent, which waited for W, which the child held as unknown because its
			// other parent had ended without a final horizon.
			shards: map[string]shardInfo{"p1": closed(), "p2": closed(), "c": open("p1", "p2"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p1": ended(-1), "p2": rowOf("w2", 25, -1), "c": rowOf(me, -1, -1), "b": rowOf("w2", 20, -1)},
			own:    map[string]ownShard{"c": {}},
			w:      sec(20), bound: sec(20), holder: "b"},
		{name: "an unstarted child whose parents left the stream is unknown",
			shards: map[string]shardInfo{"c": open("gone"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"b": rowOf("w2", 20, -1)},
			holder: "c"},
		{name: "a started child counts with its own horizon",
			shards: map[string]shardInfo{"p": closed(), "c": open("p"), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"p": ended(5), "c": rowOf("w2", 18, -1), "b": rowOf("w2", 20, -1)},
			w:      sec(18), bound: sec(18), holder: "c"},
		{name: "another process's oldest pending change does not lower the bound",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w2", 20, 8), "b": rowOf("w2", 10, -1)},
			w:      sec(10), bound: sec(10), holder: "b"},
		{name: "this process's own pending changes do not lower its bound",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf(me, 20, 3), "b": rowOf("w2", 10, -1)},
			own:    map[string]ownShard{"a": {horizon: sec(20), pending: sec(3)}},
			w:      sec(10), bound: sec(10), holder: "b"},
		{name: "a pending change newer than W leaves the bound at W",
			shards: map[string]shardInfo{"a": open(), "b": open()},
			rows:   map[string]checkpoint.LeaseRow{"a": rowOf("w2", 20, 15), "b": rowOf("w2", 10, -1)},
			w:      sec(10), bound: sec(10), holder: "b"},
		{name: "no shard at all: unknown",
			shards: map[string]shardInfo{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			memo := c.memo
			if memo == nil {
				memo = map[string]time.Time{}
			}
			if c.own == nil {
				c.own = map[string]ownShard{}
			}
			res := wmCompute(wmInput{shards: c.shards, rows: c.rows, own: c.own, memo: memo})
			if !res.W.Equal(c.w) || !res.Bound.Equal(c.bound) || res.Holder != c.holder {
				t.Fatalf("W %v bound %v holder %q; want W %v bound %v holder %q", res.W, res.Bound, res.Holder, c.w, c.bound, c.holder)
			}
			if res.W.IsZero() != res.Bound.IsZero() || (!res.W.IsZero() && res.Bound.After(res.W)) {
				t.Fatalf("bound %v above W %v", res.Bound, res.W)
			}
		})
	}
}

// The memo: a shard's last known safe point (below its pending changes) holds W once its lease
// is taken and its row's horizon removed; the new owner's horizon replaces it; a shard gone from
// the stream leaves the memo.
func TestWatermarkMemoHoldsATakenShard(t *testing.T) {
	t.Parallel()
	shards := map[string]shardInfo{"a": {}, "b": {}}
	memo := map[string]time.Time{}
	step := func(rows map[string]checkpoint.LeaseRow, own map[string]ownShard) wmResult {
		return wmCompute(wmInput{shards: shards, rows: rows, own: own, memo: memo})
	}
	res := step(map[string]checkpoint.LeaseRow{"a": rowOf("w2", 30, 12), "b": rowOf("w2", 40, -1)}, nil)
	if !res.W.Equal(sec(30)) || !res.Bound.Equal(sec(30)) {
		t.Fatalf("known: W %v bound %v", res.W, res.Bound)
	}
	// w2 dies, w3 takes a: the row's horizon and pending are removed.
	res = step(map[string]checkpoint.LeaseRow{"a": rowOf("w3", -1, -1), "b": rowOf("w2", 40, -1)}, nil)
	if want := sec(12).Add(-ms); !res.W.Equal(want) || !res.Bound.Equal(want) || res.Holder != "a" {
		t.Fatalf("taken: W %v bound %v holder %q, want both held at %v by a", res.W, res.Bound, res.Holder, want)
	}
	// This process takes a itself and has handed nothing on yet: the same hold, its own pending
	// does not count, but the memo does.
	res = step(map[string]checkpoint.LeaseRow{"a": rowOf(me, -1, -1), "b": rowOf("w2", 40, -1)}, map[string]ownShard{"a": {}})
	if want := sec(12).Add(-ms); !res.W.Equal(want) || !res.Bound.Equal(want) {
		t.Fatalf("taken by us: W %v bound %v, want %v", res.W, res.Bound, want)
	}
	// The new owner publishes (it read again from the checkpoint): its values replace the memo.
	res = step(map[string]checkpoint.LeaseRow{"a": rowOf("w3", 13, 12), "b": rowOf("w2", 40, -1)}, nil)
	if !res.W.Equal(sec(13)) || !res.Bound.Equal(sec(13)) {
		t.Fatalf("republished: W %v bound %v", res.W, res.Bound)
	}
	delete(shards, "a")
	step(map[string]checkpoint.LeaseRow{"b": rowOf("w2", 40, -1)}, nil)
	if _, ok := memo["a"]; ok || len(memo) != 1 {
		t.Fatalf("memo %v after a left the stream", memo)
	}
}

func TestOwnHorizon(t *testing.T) {
	t.Parallel()
	margin := 2 * time.Second
	for _, c := range []struct {
		name                              string
		prev, last, tip, listedOpen, want time.Time
	}{
		{name: "nothing handed on: unknown"},
		{name: "last record's arrival minus 1ms (the next may share its millisecond)", last: sec(10), want: sec(10).Add(-ms)},
		{name: "at the tip of a shard listed open: read time minus the margin", last: sec(10), tip: sec(60), listedOpen: sec(61), want: sec(58)},
		{name: "the tip rule never claims past the last listing that saw the shard open", last: sec(10), tip: sec(60), listedOpen: sec(30), want: sec(28)},
		{name: "a shard not known open (closed, or unlisted) gets no tip rule", last: sec(10), tip: sec(60), want: sec(10).Add(-ms)},
		{name: "an empty shard at its tip", tip: sec(60), listedOpen: sec(60), want: sec(58)},
		{name: "never goes back", prev: sec(50), last: sec(10), tip: sec(40), listedOpen: sec(40), want: sec(50)},
	} {
		if got := ownHorizon(c.prev, c.last, c.tip, c.listedOpen, margin); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The gates merge, table by table, the pending records of the counted shards other processes
// own: this process's own pending rows, a shard at SHARD_END and a shard gone from the stream do
// not gate; at equal arrivals the older source position names a gate.
func TestWatermarkGates(t *testing.T) {
	t.Parallel()
	early := change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z"}
	late := change.SourcePos{CommitTS: "2025-06-01T00:00:02.000000Z"}
	gates := func(r checkpoint.LeaseRow, p checkpoint.PendingTables) checkpoint.LeaseRow { r.Pending = p; return r }
	g := func(at int, pos change.SourcePos) checkpoint.Gate { return checkpoint.Gate{At: sec(at), Pos: pos} }
	shards := map[string]shardInfo{"a": {}, "b": {}, "c": {}, "d": {closed: true}}
	rows := map[string]checkpoint.LeaseRow{
		"a": gates(rowOf("w2", 30, 5), checkpoint.PendingTables{"s.x": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: g(8, early), checkpoint.KindKeyChange: g(5, late)})}),
		"b": gates(rowOf("w3", 40, 6), checkpoint.PendingTables{"s.x": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: g(7, early), checkpoint.KindKeyChange: g(5, early)}),
			"s.y": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindControl: g(6, early)})}),
		"c":    gates(rowOf(me, 50, 1), checkpoint.PendingTables{"s.x": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: g(2, early)})}), // own: ordered in this process's buffers
		"d":    gates(ended(20), checkpoint.PendingTables{"s.x": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: g(1, early)})}),
		"gone": gates(rowOf("w2", 1, 1), checkpoint.PendingTables{"s.x": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: g(1, early)})}),
	}
	own := map[string]ownShard{"c": {horizon: sec(50), pending: sec(1)}}
	res := wmCompute(wmInput{shards: shards, rows: rows, own: own, memo: map[string]time.Time{}})
	x, y := res.Gates.For("s.x"), res.Gates.For("s.y")
	if !res.W.Equal(sec(30)) || x.Kinds[checkpoint.KindLoad] != g(7, early) || x.Kinds[checkpoint.KindKeyChange] != g(5, early) ||
		!x.Kinds[checkpoint.KindControl].At.IsZero() || y.Kinds[checkpoint.KindControl] != g(6, early) || !y.Kinds[checkpoint.KindLoad].At.IsZero() {
		t.Fatalf("W %v gates %v", res.W, res.Gates)
	}
	res = wmCompute(wmInput{shards: map[string]shardInfo{"c": {}}, rows: map[string]checkpoint.LeaseRow{"c": rows["c"]}, own: own, memo: map[string]time.Time{}})
	if res.Gates != nil {
		t.Fatalf("only own shards: gates %v, want none", res.Gates)
	}
}
