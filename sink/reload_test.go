package sink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// createTable submits a create-table control record of items built at ts.
func (h *harness) createTable(shard string, seq int, def, ts string) {
	h.t.Helper()
	ev := ctlEvent(shard, seq, "items", "create-table", def)
	ev.Meta.Timestamp = ts
	h.event(ev)
}

// row submits a data record of items: id and name.
func (h *harness) row(shard string, seq int, op change.Op, id int, name string) {
	h.t.Helper()
	cols := []change.Column{col("id", fmt.Sprint(id))}
	if op != change.OpDelete {
		cols = append(cols, col("name", "'"+name+"'"))
	}
	h.data(shard, seq, "items", op, cols, nil)
}

// replaceSnapshots returns the snapshots of tbl whose summary marks a reload's replace.
func replaceSnapshots(tbl *table.Table) []table.Snapshot {
	var out []table.Snapshot
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary != nil && s.Summary.Properties[tableprop.SummaryReload] == tableprop.SummaryReloadReplace {
			out = append(out, s)
		}
	}
	return out
}

const (
	tsFirst  = "2025-01-01T00:00:00.000000Z"
	tsReload = "2025-01-02T00:00:00.000000Z"
)

// A reload (a newer create-table, then load rows, then CDC) replaces the table's content in one
// snapshot at its first CDC change: rows deleted at the source during the outage (never re-sent)
// disappear, re-sent rows keep their reloaded values, CDC after it applies on top. Until then
// the table keeps every row it had. A replay of every record after a restart changes nothing.
// With sink.reload upsert the deleted rows stay (the behaviour before reloads were handled).
// Keyed and keyless tables alike (a keyless table's reload would otherwise duplicate every row).
func TestReloadReplacesTableContent(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{true, false} {
		for _, mode := range []string{ReloadReplace, ReloadUpsert} {
			name := map[bool]string{true: "keyed", false: "keyless"}[keyed] + "/" + mode
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				def := "id:INT4 name:WSTRING"
				if keyed {
					def = "id*:INT4 name:WSTRING"
				}
				dir := t.TempDir()
				var during []string
				run := func(first bool) *harness {
					h := newHarness(t, dir, withMaintenance(nil), withConfig(func(c *Config) { c.Reload = mode; c.ReloadQuietPeriod = 0 }))
					h.createTable("c", 1, def, tsFirst)
					for i := 1; i <= 4; i++ {
						h.row("a", i, change.OpInsert, i, "v1")
					}
					h.flush()
					// The outage: 2 and 4 are deleted at the source without records, 1 changes.
					h.createTable("c", 2, def, tsReload)
					h.row("a", 10, change.OpLoad, 1, "v2")
					h.row("b", 1, change.OpLoad, 3, "v1")
					h.flush()
					if first {
						during, _ = scanRows(t, h.cat, "items")
					}
					h.row("b", 2, change.OpLoad, 5, "v1") // inserted at the source during the outage
					// The cached changes, then ongoing CDC.
					h.row("a", 11, change.OpInsert, 6, "v1")
					if keyed {
						h.row("a", 12, change.OpUpdate, 3, "v3")
					}
					h.flush()
					return h
				}
				h := run(true)
				rows, tbl := scanRows(t, h.cat, "items")
				want := []string{"id=1,name=v2", "id=3,name=v1", "id=5,name=v1", "id=6,name=v1"}
				if keyed {
					want[1] = "id=3,name=v3"
				}
				switch {
				case mode == ReloadUpsert && keyed:
					want = append(want, "id=2,name=v1", "id=4,name=v1")
				case mode == ReloadUpsert:
					want = append(want, "id=1,name=v1", "id=2,name=v1", "id=3,name=v1", "id=4,name=v1")
				}
				eq(t, rows, want...)
				replaces := replaceSnapshots(tbl)
				if mode == ReloadUpsert {
					if len(replaces) != 0 {
						t.Fatalf("sink.reload upsert made %d replacing snapshots", len(replaces))
					}
					return
				}
				if len(replaces) != 1 {
					t.Fatalf("%d replacing snapshots, want exactly 1", len(replaces))
				}
				if s := replaces[0].Summary.Properties; s[tableprop.SummaryReloadRows] != "3" || s[tableprop.SummaryReloadStarted] != tsReload {
					t.Fatalf("replacing snapshot summary %v, want 3 load rows started at %s", s, tsReload)
				}
				// While the reload ran, every row the table had stayed readable.
				wantDuring := []string{"id=1,name=v2", "id=2,name=v1", "id=3,name=v1", "id=4,name=v1"}
				if !keyed {
					wantDuring = append(wantDuring, "id=1,name=v1", "id=3,name=v1")
				}
				eq(t, during, wantDuring...)
				for _, k := range tableprop.ReloadProps {
					if v, ok := tbl.Properties()[k]; ok {
						t.Fatalf("property %s=%q left after the reload ended", k, v)
					}
				}
				if got := h.ack.n.Load(); got != int64(len(h.dlq.dls))+int64(map[bool]int{true: 11, false: 10}[keyed]) {
					t.Fatalf("acknowledged %d", got)
				}
				h.close()

				// Every record again (a new worker replaying from an old checkpoint): skipped.
				h = run(false)
				rows2, tbl2 := scanRows(t, h.cat, "items")
				eq(t, rows2, want...)
				if n := len(tbl2.Metadata().Snapshots()); n != len(tbl.Metadata().Snapshots()) {
					t.Fatalf("the replay made %d new snapshots", n-len(tbl.Metadata().Snapshots()))
				}
				h.close()
			})
		}
	}
}

// A crash in the middle of a reload: the second worker replays from the start (the checkpoint
// may be anywhere before what was committed) and goes on; the table ends as if nothing happened,
// with one replacing snapshot. The create-table is covered by its watermark, so the replay does
// not move the reload's start over the load rows already committed.
func TestReloadSurvivesRestartMidReload(t *testing.T) {
	t.Parallel()
	def := "id*:INT4 name:WSTRING"
	dir := t.TempDir()
	prefix := func(h *harness) {
		h.createTable("c", 1, def, tsFirst)
		for i := 1; i <= 4; i++ {
			h.row("a", i, change.OpInsert, i, "v1")
		}
		h.flush()
		h.createTable("c", 2, def, tsReload)
		h.row("a", 10, change.OpLoad, 1, "v2")
		h.flush()
		h.row("b", 1, change.OpLoad, 3, "v1")
	}
	h := newHarness(t, dir, withMaintenance(nil), withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 }))
	prefix(h)
	h.flush()
	if m, ok := readReload(loadTable(t, h, "shop", "items").Properties()); !ok || m.rows != 2 {
		t.Fatalf("reload in progress %+v %v, want 2 load rows", m, ok)
	}
	h.stop() // the worker dies
	if err := <-h.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	h.done <- nil

	h = newHarness(t, dir, withMaintenance(nil), withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 }))
	prefix(h) // replayed
	h.row("b", 2, change.OpLoad, 5, "v1")
	h.row("a", 11, change.OpUpdate, 3, "v3")
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=v2", "id=3,name=v3", "id=5,name=v1")
	if n := len(replaceSnapshots(tbl)); n != 1 {
		t.Fatalf("%d replacing snapshots, want 1", n)
	}
	h.close()
}

// A create-table that no load row follows (a task resumed without full load) starts a reload
// that its table's first CDC change cancels: nothing is removed. A re-sent copy of the first
// create-table (same timestamp) starts none.
func TestReloadWithoutLoadRowsIsCancelled(t *testing.T) {
	t.Parallel()
	def := "id*:INT4 name:WSTRING"
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 }))
	h.createTable("c", 1, def, tsFirst)
	h.row("a", 1, change.OpInsert, 1, "v1")
	h.row("a", 2, change.OpInsert, 2, "v1")
	h.flush()
	h.createTable("c", 2, def, tsFirst) // re-sent: no reload
	h.flush()
	if _, ok := readReload(loadTable(t, h, "shop", "items").Properties()); ok {
		t.Fatal("a re-sent create-table started a reload")
	}
	h.createTable("c", 3, def, tsReload)
	h.flush()
	if _, ok := readReload(loadTable(t, h, "shop", "items").Properties()); !ok {
		t.Fatal("a newer create-table of a table with data started no reload")
	}
	h.row("a", 3, change.OpInsert, 3, "v1")
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=v1", "id=2,name=v1", "id=3,name=v1")
	if _, ok := readReload(tbl.Properties()); ok {
		t.Fatal("the reload is still in progress after a CDC change")
	}
	if n := len(replaceSnapshots(tbl)); n != 0 {
		t.Fatalf("%d replacing snapshots, want none", n)
	}
}

// Without CDC after the load rows, the quiet period ends the reload.
func TestReloadEndsAfterQuietPeriod(t *testing.T) {
	t.Parallel()
	def := "id*:INT4 name:WSTRING"
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 300 * time.Millisecond }))
	h.createTable("c", 1, def, tsFirst)
	h.row("a", 1, change.OpInsert, 1, "v1")
	h.row("a", 2, change.OpInsert, 2, "v1")
	h.flush()
	h.createTable("c", 2, def, tsReload)
	h.row("b", 1, change.OpLoad, 2, "v2")
	h.flush()
	WaitUntil(t, func() bool {
		tbl, err := h.cat.LoadTable(context.Background(), table.Identifier{"shop", "items"})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := readReload(tbl.Properties())
		return !ok
	})
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=2,name=v2")
	if n := len(replaceSnapshots(tbl)); n != 1 {
		t.Fatalf("%d replacing snapshots, want 1", n)
	}
}

// A CDC change on another shard built before a create-table and arriving up to
// createTableWindow after it (one PutRecords call) goes before it (else it would commit above
// the reload's start and survive its replace); a load row, a change built after it, or one
// arriving later goes after it.
func TestCreateTableOrderWithinOnePutRecordsCall(t *testing.T) {
	t.Parallel()
	ct := held{ev: ctlEvent("c", 5, "items", "create-table", "id*:INT4"), at: 100, ctl: true, reload: true}
	ct.ev.Meta.Timestamp = "2025-01-02T00:00:00.000500Z"
	trunc := held{ev: ctlEvent("c", 6, "items", "truncate", ""), at: 100, ctl: true, reload: true}
	mk := func(load bool, built string, at ...int64) *row {
		r := &row{shard: "a", seq: "1", at: 100, src: srcPos{load: load}, built: built}
		if len(at) > 0 {
			r.at = at[0]
		}
		return r
	}
	older, newer := "2025-01-02T00:00:00.000400Z", "2025-01-02T00:00:00.000600Z"
	for _, c := range []struct {
		name string
		h    *held
		r    *row
		want bool // the row precedes the held record
	}{
		{"change built before", &ct, mk(false, older), true},
		{"change built after", &ct, mk(false, newer), false},
		{"load built before", &ct, mk(true, older), false},
		{"no timestamp", &ct, mk(false, ""), false},
		{"truncate", &trunc, mk(false, older), false},
		{"change built before, arrived within the window", &ct, mk(false, older, 100+createTableWindow), true},
		{"change built before, arrived after the window", &ct, mk(false, older, 101+createTableWindow), false},
		{"change arrived earlier", &trunc, mk(false, newer, 99), true},
	} {
		if got := c.h.after(c.r); got != c.want {
			t.Errorf("%s: after = %v, want %v", c.name, got, c.want)
		}
		// The same for a data record held behind it.
		op := change.OpUpdate
		if c.r.src.load {
			op = change.OpLoad
		}
		d := held{ev: &change.Event{Op: op, Meta: change.Metadata{Timestamp: c.r.built}, Pos: change.Position{Shard: "a", Seq: "1"}}, at: c.r.at}
		if got := heldBefore(&d, c.h) || heldBeforeLater(&d, c.h); got != c.want {
			t.Errorf("%s: heldBefore(data, control) = %v, want %v", c.name, got, c.want)
		}
		// With sink.reload upsert a create-table orders as any control record.
		plain := *c.h
		plain.reload = false
		if got, want := plain.after(c.r), c.r.at < plain.at; got != want {
			t.Errorf("%s, reload upsert: after = %v, want %v", c.name, got, want)
		}
	}
}

// A create-table taken in after a CDC change of another shard that arrived a few milliseconds
// after it but was built before it stays behind that change among the held events.
func TestCreateTableHeldBehindChangeBuiltBefore(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	b.reloadOrder = true
	upd := &change.Event{Op: change.OpUpdate, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000400Z"}, Pos: change.Position{Shard: "a", Seq: "1"}}
	b.hold(upd, 105)
	ct := ctlEvent("c", 5, "items", "create-table", "id*:INT4")
	ct.Meta.Timestamp = "2025-01-02T00:00:00.000500Z"
	b.hold(ct, 100)
	if len(b.held) != 2 || b.held[0].ev != upd {
		t.Fatalf("held order: %+v, want the change first", b.held)
	}
	ld := &change.Event{Op: change.OpLoad, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000300Z"}, Pos: change.Position{Shard: "b", Seq: "1"}}
	b.hold(ld, 104)
	if len(b.held) != 3 || b.held[0].ev != upd || b.held[1].ev != ct || b.held[2].ev != ld {
		t.Fatalf("held order: %+v, want the change, the create-table, the load", b.held)
	}
}

// Under the ordering guard, a CDC change on another shard that shares its arrival millisecond
// with a reload's create-table (one PutRecords call) but was built before it commits below the
// reload's start, so the replace removes the row it updated when the load does not re-send it
// (a row deleted at the source during the outage).
func TestReloadChangeInTheCreateTablesPutRecordsCall(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	fb.ms.Store(1500)
	h := guardHarness(t, OrderingArrival, fb, withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 }))
	def := "id*:INT4 name:WSTRING"
	at := func(ev *change.Event, ms int64, built string) {
		ev.Arrival = time.UnixMilli(ms)
		ev.Meta.Timestamp = built
		h.event(ev)
	}
	data := func(shard string, seq int, op change.Op, id int, name string) *change.Event {
		return &change.Event{Table: "items", Op: op, Columns: []change.Column{col("id", fmt.Sprint(id)), col("name", "'"+name+"'")},
			Meta: change.Metadata{RecordType: "data", Operation: op.String()}, Pos: change.Position{Shard: shard, Seq: fmt.Sprint(seq)}}
	}
	at(ctlEvent("c", 1, "items", "create-table", def), 1000, "2025-01-01T00:00:00.000000Z")
	at(data("a", 1, change.OpInsert, 1, "v1"), 1100, "2025-01-01T00:00:01.000000Z")
	at(data("a", 2, change.OpInsert, 2, "v1"), 1100, "2025-01-01T00:00:01.100000Z")
	h.flush()
	// One PutRecords call: an update of 2 built before the reload's create-table, both at 2000;
	// 2 is deleted at the source during the outage, so the load does not re-send it.
	at(data("a", 3, change.OpUpdate, 2, "v2"), 2000, "2025-01-01T00:00:02.000000Z")
	at(ctlEvent("c", 2, "items", "create-table", def), 2000, "2025-01-01T00:00:03.000000Z")
	at(data("b", 1, change.OpLoad, 1, "v3"), 2000, "2025-01-01T00:00:03.100000Z")
	at(data("a", 4, change.OpInsert, 3, "v1"), 2100, "2025-01-01T00:00:04.000000Z")
	fb.ms.Store(4000)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=v3", "id=3,name=v1")
	if n := len(replaceSnapshots(tbl)); n != 1 {
		t.Fatalf("%d replacing snapshots, want 1", n)
	}
}

// A CDC change taken in after a create-table and a load row of other shards, all of one
// PutRecords call, goes before the create-table when it was built before it.
func TestChangeHeldBeforeCreateTablePastLoadRows(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	b.reloadOrder = true
	ct := ctlEvent("c", 5, "items", "create-table", "id*:INT4")
	ct.Meta.Timestamp = "2025-01-02T00:00:00.000500Z"
	b.hold(ct, 100)
	ld := &change.Event{Op: change.OpLoad, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000600Z"}, Pos: change.Position{Shard: "b", Seq: "1"}}
	b.hold(ld, 100)
	upd := &change.Event{Op: change.OpUpdate, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000400Z"}, Pos: change.Position{Shard: "a", Seq: "1"}}
	b.hold(upd, 100)
	if len(b.held) != 3 || b.held[0].ev != upd || b.held[1].ev != ct || b.held[2].ev != ld {
		t.Fatalf("held order: %+v, want the change, the create-table, the load", b.held)
	}
}
