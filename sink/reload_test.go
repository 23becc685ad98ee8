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
// readers see the table as it was before the reload. A replay of every record after a restart changes nothing.
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
				// While the reload ran, readers of main saw the table as it was before it (the load
				// rows went to the reload branch), and the branch is gone after the publish.
				eq(t, during, "id=1,name=v1", "id=2,name=v1", "id=3,name=v1", "id=4,name=v1")
				if b := reloadHead(tbl); b != nil {
					t.Fatalf("reload branch left after the reload ended (snapshot %d)", b.SnapshotID)
				}
				for _, k := range tableprop.ReloadProps {
					if v, ok := tbl.Properties()[k]; ok {
						t.Fatalf("property %s=%q left after the reload ended", k, v)
					}
				}
				if got := h.ack.N.Load(); got != int64(len(h.dlq.Letters()))+int64(map[bool]int{true: 11, false: 10}[keyed]) {
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

// A create-table orders as any control record, reload or not: at the same arrival on another
// shard it goes first, whatever the build times (a change built before it is superseded by the
// reload instead: TestReloadChangeInTheCreateTablesPutRecordsCall). Reordering by build time
// made a change wait for another worker's load row while that load row waited for the
// create-table held behind the change: two processes waiting for each other.
func TestCreateTableOrdersAsAnyControlRecord(t *testing.T) {
	t.Parallel()
	b := newBuffer()
	b.reloadOrder = true
	upd := &change.Event{Op: change.OpUpdate, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000400Z"}, Pos: change.Position{Shard: "a", Seq: "1"}}
	holdEv(&b, upd, 100)
	ct := ctlEvent("c", 5, "items", "create-table", "id*:INT4")
	ct.Meta.Timestamp = "2025-01-02T00:00:00.000500Z"
	holdEv(&b, ct, 100)
	ld := &change.Event{Op: change.OpLoad, Meta: change.Metadata{Timestamp: "2025-01-02T00:00:00.000600Z"}, Pos: change.Position{Shard: "b", Seq: "1"}}
	holdEv(&b, ld, 100)
	if len(b.held) != 3 || b.held[0].ev != ct {
		t.Fatalf("held order: %+v, want the create-table first", b.held)
	}
	if h := &b.held[0]; h.after(&row{shard: "a", seq: "2", at: 100, built: "2025-01-02T00:00:00.000400Z"}) {
		t.Fatalf("a change of another shard at the create-table's arrival goes before it")
	}
}

// Under the ordering guard, a CDC change on another shard that shares its arrival millisecond
// with a reload's create-table (one PutRecords call) but was built before it is ordered after the
// create-table and superseded by the reload, so the row it updated is gone when the load does not
// re-send it (a row deleted at the source during the outage).
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

// twoWriters starts two sinks on one catalog and warehouse (two processes' writers of one
// table), reloads replacing at their first CDC change.
func twoWriters(t *testing.T) (a, b *harness) {
	dir := t.TempDir()
	opts := []harnessOption{withMaintenance(nil), withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 })}
	return newHarness(t, dir, opts...), newHarness(t, dir, opts...)
}

// A writer that loaded the table before a reload started (another process, which has not seen
// the mark yet) and then commits load rows must not put them on main behind the reload's back:
// the reload's start moves main (an empty snapshot), so that commit loses its race, and the
// writer reloads, stages on the reload branch and counts its load rows. Without the fence its
// rows land on main uncounted (a reload whose load rows all came from such writers would be
// cancelled instead of replacing), and once the branch exists only Iceberg's sequence-number
// check stops them from landing on a main that the publish discards.
func TestReloadFencesAWriterThatStagedOnMain(t *testing.T) {
	t.Parallel()
	a, b := twoWriters(t)
	def := "id*:INT4 name:WSTRING"
	a.createTable("c", 1, def, tsFirst)
	a.row("a", 1, change.OpInsert, 1, "v1")
	a.row("a", 2, change.OpInsert, 2, "v1")
	a.flush()
	b.row("b", 1, change.OpInsert, 3, "v1") // b loads the table before the reload
	b.flush()

	a.createTable("c", 2, def, tsReload) // the reload starts; 2 was deleted at the source
	a.flush()
	b.row("b", 2, change.OpLoad, 3, "v2") // b's view predates the start
	b.flush()
	a.row("a", 10, change.OpLoad, 1, "v2")
	a.flush()
	if rows, _ := scanRows(t, a.cat, "items"); len(rows) != 3 || rows[0] != "id=1,name=v1" {
		t.Fatalf("main during the reload: %v, want the table before it", rows)
	}
	a.row("a", 11, change.OpInsert, 6, "v1") // the first change after the load
	a.flush()

	rows, tbl := scanRows(t, a.cat, "items")
	eq(t, rows, "id=1,name=v2", "id=3,name=v2", "id=6,name=v1")
	if n := len(replaceSnapshots(tbl)); n != 1 {
		t.Fatalf("%d replacing snapshots, want 1", n)
	}
	if s := replaceSnapshots(tbl)[0].Summary.Properties; s[tableprop.SummaryReloadRows] != "2" {
		t.Fatalf("replacing snapshot summary %v, want the 2 load rows of both writers", s)
	}
	a.close()
	b.close()
}

// A CDC change built before the reload's create-table that reaches the table only after the
// reload started (on another worker's shard: the gates order arrivals, not build times) is
// superseded: the load rows, read from the source after it was captured, reflect it. Written
// on the reload branch it would bring back a row deleted at the source during the outage, and
// as the reload's first change it would cancel the reload before its load rows came. Its
// watermark still advances, so a replay skips it. One that comes before any load row is
// written provisionally and removed by the replace (TestReloadWithoutLoadRowsYetKeepsChangesBuiltBeforeIt);
// one that comes after load rows is not written (the delete of 3 here).
func TestReloadSupersedesChangesBuiltBeforeItsCreateTable(t *testing.T) {
	t.Parallel()
	a, b := twoWriters(t)
	def := "id*:INT4 name:WSTRING"
	rowAt := func(h *harness, shard string, seq int, op change.Op, id int, name, ts string) {
		t.Helper()
		cols := []change.Column{col("id", fmt.Sprint(id))}
		if op != change.OpDelete {
			cols = append(cols, col("name", "'"+name+"'"))
		}
		h.event(&change.Event{Table: "items", Op: op, Columns: cols,
			Meta: change.Metadata{RecordType: "data", Operation: op.String(), Timestamp: ts},
			Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}})
	}
	a.createTable("c", 1, def, tsFirst)
	for i := 1; i <= 3; i++ {
		rowAt(a, "a", i, change.OpInsert, i, "v1", tsFirst)
	}
	a.flush()

	a.createTable("c", 2, def, tsReload) // 2 is deleted at the source during the outage
	a.flush()
	// Built a second before the create-table, read by b after the reload started.
	rowAt(b, "b", 1, change.OpUpdate, 2, "stale", "2025-01-01T23:59:59.000000Z")
	b.flush()
	rowAt(a, "a", 10, change.OpLoad, 1, "v2", "2025-01-02T00:00:01.000000Z")
	rowAt(a, "a", 11, change.OpLoad, 3, "v2", "2025-01-02T00:00:01.000000Z")
	a.flush()
	rowAt(b, "b", 2, change.OpDelete, 3, "", "2025-01-01T23:59:58.000000Z")
	b.flush()
	rowAt(a, "a", 12, change.OpInsert, 4, "v1", "2025-01-02T00:00:05.000000Z") // the first change after the load
	a.flush()

	rows, tbl := scanRows(t, a.cat, "items")
	eq(t, rows, "id=1,name=v2", "id=3,name=v2", "id=4,name=v1")
	if n := len(replaceSnapshots(tbl)); n != 1 {
		t.Fatalf("%d replacing snapshots, want 1", n)
	}
	if wm := tbl.Properties()[tableprop.Watermark("st", "b")]; wm != "2" {
		t.Fatalf("watermark of shard b %q, want 2 (the superseded changes taken)", wm)
	}
	a.close()
	b.close()
}

// rowBuilt submits a data record of items built at ts (metadata.timestamp).
func (h *harness) rowBuilt(shard string, seq int, op change.Op, id int, name, ts string) {
	h.t.Helper()
	cols := []change.Column{col("id", fmt.Sprint(id))}
	if op != change.OpDelete {
		cols = append(cols, col("name", "'"+name+"'"))
	}
	h.event(&change.Event{Table: "items", Op: op, Columns: cols,
		Meta: change.Metadata{RecordType: "data", Operation: op.String(), Timestamp: ts},
		Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}})
}

// A change built before a reload's create-table that arrives after it (on another worker's
// shard) while the reload has no load row yet is written provisionally: it does not end the
// reload, and the replace removes it when load rows follow (they reflect it), so a row deleted
// at the source stays deleted and a stale delete does not win over its key's load row. A
// create-table with no load rows after it (a task resumed without full load) is cancelled, and
// then no load row reflects the change: it stays applied. Before, it was dropped as superseded
// in both cases, and lost in the second. Also when the change that cancels the reload comes in
// the same batch.
func TestReloadWithoutLoadRowsYetKeepsChangesBuiltBeforeIt(t *testing.T) {
	t.Parallel()
	def := "id*:INT4 name:WSTRING"
	const before = "2025-01-01T23:59:59.000000Z"
	start := func(t *testing.T) (a, b *harness) {
		a, b = twoWriters(t)
		a.createTable("c", 1, def, tsFirst)
		for i := 1; i <= 3; i++ {
			a.rowBuilt("a", i, change.OpInsert, i, "v1", tsFirst)
		}
		a.flush()
		a.createTable("c", 2, def, tsReload)
		a.flush()
		b.rowBuilt("b", 1, change.OpUpdate, 2, "v2", before)
		b.rowBuilt("b", 2, change.OpDelete, 3, "", before)
		b.flush()
		return a, b
	}
	check := func(t *testing.T, h *harness, wm string, want ...string) *table.Table {
		t.Helper()
		rows, tbl := scanRows(t, h.cat, "items")
		if _, ok := readReload(tbl.Properties()); ok {
			t.Fatal("the reload is still in progress")
		}
		eq(t, rows, want...)
		if got := tbl.Properties()[tableprop.Watermark("st", "b")]; got != wm {
			t.Fatalf("watermark of shard b %q, want %s", got, wm)
		}
		return tbl
	}
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		a, b := start(t)
		a.rowBuilt("a", 10, change.OpInsert, 4, "v1", "2025-01-02T00:00:05.000000Z") // no load: cancelled
		a.flush()
		check(t, a, "2", "id=1,name=v1", "id=2,name=v2", "id=4,name=v1")
		a.close()
		b.close()
	})
	t.Run("cancelled in the same batch", func(t *testing.T) {
		t.Parallel()
		a, b := twoWriters(t)
		a.createTable("c", 1, def, tsFirst)
		for i := 1; i <= 3; i++ {
			a.rowBuilt("a", i, change.OpInsert, i, "v1", tsFirst)
		}
		a.flush()
		a.createTable("c", 2, def, tsReload)
		a.flush()
		b.rowBuilt("b", 1, change.OpUpdate, 2, "v2", before)
		b.rowBuilt("b", 2, change.OpDelete, 3, "", before)
		b.rowBuilt("b", 3, change.OpInsert, 4, "v1", "2025-01-02T00:00:05.000000Z")
		b.flush()
		check(t, b, "3", "id=1,name=v1", "id=2,name=v2", "id=4,name=v1")
		a.close()
		b.close()
	})
	t.Run("replaced", func(t *testing.T) {
		t.Parallel()
		a, b := start(t)
		// The load: 2 was deleted at the source meanwhile, 3 was deleted and inserted again.
		a.rowBuilt("a", 10, change.OpLoad, 1, "v1", "2025-01-02T00:00:01.000000Z")
		a.rowBuilt("a", 11, change.OpLoad, 3, "v3", "2025-01-02T00:00:01.000000Z")
		a.flush()
		a.rowBuilt("a", 12, change.OpInsert, 4, "v1", "2025-01-02T00:00:05.000000Z")
		a.flush()
		tbl := check(t, a, "2", "id=1,name=v1", "id=3,name=v3", "id=4,name=v1")
		if n := len(replaceSnapshots(tbl)); n != 1 {
			t.Fatalf("%d replacing snapshots, want 1", n)
		}
		a.close()
		b.close()
	})
}
