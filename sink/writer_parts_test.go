package sink

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Unit tests of the parts of a table writer (writer.go), each on its own, without a catalog.

// partsWriter is a writer of shop.t built without a sink: no catalog, no bound unless env has
// one.
func partsWriter(set *settings, env writerEnv) *writer {
	if env.metrics == nil {
		env.metrics = NopMetrics{}
	}
	if env.defs == nil {
		env.defs = newTableDefs()
	}
	if env.onCommit == nil {
		env.onCommit = func(CommitInfo) {}
	}
	env.stream = "s"
	return newWriter(env, "shop.t", table.Identifier{"ns", "t"}, set, 4, zap.NewNop())
}

// propsTable is a table of (id INT) with the properties props and no snapshot, built without a
// catalog.
func propsTable(t *testing.T, props iceberg.Properties) *table.Table {
	t.Helper()
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int32, Required: true})
	meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///tmp/shop/t", props)
	if err != nil {
		t.Fatal(err)
	}
	return table.New(table.Identifier{"ns", "t"}, meta, "file:///tmp/shop/t/metadata/v1.metadata.json", nil, nil)
}

// The planner's limit follows the commit bound when guarded, and a flush held back by the
// bound waits until the bound moves.
func TestPlannerBound(t *testing.T) {
	w := partsWriter(&settings{arrival: true, flushRows: 2, flushBytes: 1 << 30}, writerEnv{})
	if lim := w.pl.limitNow(); lim.bound != unbounded || !lim.ordered || !lim.through.IsZero() {
		t.Fatalf("without a bound provider: %+v, want unbounded and ordered", lim)
	}
	var at atomic.Pointer[time.Time]
	zero := time.Time{}
	at.Store(&zero)
	w = partsWriter(&settings{arrival: true, flushRows: 2, flushBytes: 1 << 30},
		writerEnv{bound: func() Bound { return Bound{At: *at.Load()} }})
	if lim := w.pl.limitNow(); lim.bound != -1 {
		t.Fatalf("zero bound: %d, want -1 (nothing commits)", lim.bound)
	}
	t1 := time.UnixMilli(1_000_000)
	at.Store(&t1)
	lim := w.pl.limitNow()
	if lim.bound != t1.UnixMilli() || !lim.through.Equal(t1) {
		t.Fatalf("bound %d through %v, want %d", lim.bound, lim.through, t1.UnixMilli())
	}
	if w.pl.waiting() || !w.pl.boundMoved() {
		t.Fatal("a new planner waits for nothing")
	}
	w.pl.buf.add(row{shard: "a", seq: "1", vals: []dms.Datum{{I: 1}}}, 10)
	w.pl.buf.add(row{shard: "a", seq: "2", vals: []dms.Datum{{I: 2}}}, 10)
	if !w.pl.full() {
		t.Fatal("two rows at flush_rows 2: want full")
	}
	w.pl.stick(lim, true)
	if !w.pl.waiting() || w.pl.boundMoved() || w.pl.full() {
		t.Fatal("held back at the current bound: want waiting, not moved, not full")
	}
	t2 := t1.Add(time.Second)
	at.Store(&t2)
	if !w.pl.boundMoved() || !w.pl.full() {
		t.Fatal("the bound moved: want moved and full")
	}
	w.pl.unstick()
	if w.pl.waiting() {
		t.Fatal("unstick: want not waiting")
	}
}

// The planner resolves an event's columns, reports those the table lacks and admits the
// event as a row of its buffer.
func TestPlannerAdmit(t *testing.T) {
	w := partsWriter(&settings{arrival: true, exclude: map[string]bool{}}, writerEnv{})
	w.st.lay = bufLayout(true, nil)
	ev := &change.Event{Op: change.OpInsert, Pos: change.Position{Shard: "a", Seq: "1"},
		Columns: cols(col("id", "1"), col("name", "'x'"), col("extra", "2"))}
	unknown := w.pl.resolve(ev)
	if len(unknown) != 1 || unknown[0].Name != "extra" {
		t.Fatalf("unknown columns %v, want [extra]", unknown)
	}
	if reason := w.pl.admit(ev, 5); reason != "" {
		t.Fatalf("admit: %s", reason)
	}
	if w.pl.buf.rows.len() != 1 || w.pl.buf.rows.at(0).at != 5 {
		t.Fatalf("buffer holds %d rows, want one that arrived at 5", w.pl.buf.rows.len())
	}
	w.pl.publish()
	if w.pl.gauge.rows.Load() != 1 {
		t.Fatalf("gauge rows %d, want 1", w.pl.gauge.rows.Load())
	}
}

// The reload tracker reads the reload in progress from the table, plans what a batch's commit
// does about it, and ends it after the quiet period.
func TestReloadTracker(t *testing.T) {
	w := partsWriter(&settings{arrival: true, reloadReplace: true, reloadQuiet: time.Hour}, writerEnv{})
	rt := w.rt
	if _, ok := rt.reloading(); ok {
		t.Fatal("no table: want no reload")
	}
	if rt.reloadFor(&batch{cdc: 1}) != nil {
		t.Fatal("no reload: want no reload stage")
	}
	w.st.tbl, w.st.lay = propsTable(t, iceberg.Properties{tableprop.ReloadBefore: "5", tableprop.ReloadRows: "3",
		tableprop.ReloadStarted: "2026-01-02T03:04:05Z"}), bufLayout(true, nil)
	m, ok := rt.reloading()
	if !ok || m.before != 5 || m.rows != 3 || m.started != "2026-01-02T03:04:05Z" {
		t.Fatalf("reload %+v %v", m, ok)
	}
	if rs := rt.reloadFor(&batch{loads: 2}); rs == nil || rs.end || rs.loads != 2 {
		t.Fatalf("load rows only: %+v, want a stage that counts them", rs)
	}
	if rs := rt.reloadFor(&batch{cdc: 1}); rs == nil || !rs.end || !rs.replace {
		t.Fatalf("a CDC change after load rows: %+v, want the end with a replace", rs)
	}
	props := iceberg.Properties{}
	if _, err := rt.stageReload(context.Background(), nil, &reloadStage{mark: m, loads: 2}, props); err != nil {
		t.Fatal(err)
	}
	if props[tableprop.ReloadRows] != "5" {
		t.Fatalf("rows staged %q, want 5", props[tableprop.ReloadRows])
	}
	if _, ok := rt.quietEnd(false); ok || !rt.loaded.IsZero() {
		t.Fatal("not idle: want no end, and the quiet period not started")
	}
	if _, ok := rt.quietEnd(true); ok || rt.loaded.IsZero() {
		t.Fatal("first idle look: want the quiet period started, no end")
	}
	rt.loaded = time.Now().Add(-2 * time.Hour)
	if _, ok := rt.quietEnd(true); !ok {
		t.Fatal("quiet for longer than the period: want the end")
	}
}

// The control applier's guards: a control record's watermark advances only its shard's, a
// settled record (covered, or older than the last applied) is not applied again, and a
// truncate is ordered by position only.
func TestControlGuards(t *testing.T) {
	w := partsWriter(&settings{arrival: true}, writerEnv{})
	ca := w.ca
	w.st.tbl = propsTable(t, iceberg.Properties{tableprop.ControlTimestamp: "2026-01-02T00:00:00Z"})
	w.st.lay = bufLayout(true, map[string]string{"a": "5"})
	ev := func(seq, ts, op string, replay bool) *change.Event {
		return &change.Event{Op: change.OpControl, Replay: replay, Pos: change.Position{Shard: "a", Seq: seq},
			Meta: change.Metadata{Timestamp: ts}, Control: &change.Control{Op: op}}
	}
	wm := tableprop.Watermark("s", "a")
	for _, c := range []struct {
		ev   *change.Event
		want string
	}{{ev("7", "", "add-column", false), "7"}, {ev("3", "", "add-column", false), ""}, {ev("7", "", "add-column", true), ""}} {
		props := iceberg.Properties{}
		ca.controlWatermark(props, c.ev)
		if props[wm] != c.want {
			t.Errorf("seq %s replay %v: watermark %q, want %q", c.ev.Pos.Seq, c.ev.Replay, props[wm], c.want)
		}
	}
	if !ca.controlSettled(ev("4", "2026-01-03T00:00:00Z", "add-column", false)) {
		t.Error("covered by the watermark: want settled")
	}
	if !ca.controlSettled(ev("9", "2026-01-01T00:00:00Z", "add-column", false)) {
		t.Error("older than the last control record applied: want settled")
	}
	if ca.controlSettled(ev("9", "2026-01-01T00:00:00Z", "truncate-table", false)) {
		t.Error("a truncate is ordered by position only: want not settled")
	}
	if ca.controlSettled(ev("9", "2026-01-03T00:00:00Z", "add-column", false)) {
		t.Error("newer and not covered: want not settled")
	}
	props := iceberg.Properties{}
	ca.throughProp(props)
	if len(props) != 0 {
		t.Fatalf("outside a flush: %v, want nothing", props)
	}
	lim := limit{bound: 1, through: time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)}
	w.pl.lim = &lim
	ca.throughProp(props)
	if props[tableprop.CompleteThrough] == "" {
		t.Fatal("within a flush: want the complete-through of its limit")
	}
}

// The committer completes a partial image from the stored row into its scratch, and its policy
// follows the final flush of a graceful stop.
func TestCommitterParts(t *testing.T) {
	w := partsWriter(&settings{}, writerEnv{retries: 3})
	cm := w.cm
	r := &row{vals: []dms.Datum{{I: 1}, {S: "new"}, {Null: true}}, absent: []int32{2}}
	got := cm.completed(r, []dms.Datum{{I: 1}, {S: "old"}, {I: 42}})
	if got[1].S != "new" || got[2].I != 42 {
		t.Fatalf("completed %+v, want the image's name and the stored qty", got)
	}
	if cm.completed(r, nil)[2] != (dms.Datum{Null: true}) {
		t.Fatal("no stored row: want the image's own values")
	}
	p := cm.policy()
	if p.Retries != 3 || p.Closing() {
		t.Fatalf("policy %+v closing %v", p, p.Closing())
	}
	cm.closing = true
	if !p.Closing() {
		t.Fatal("closing: want the policy to see it")
	}
	if err := cm.refreshIfContended(context.Background()); err != nil {
		t.Fatalf("never contended: %v", err)
	}
}

// The schema applier tries a failed catalog call again (ErrCatalogCall) and nothing else; a
// table that cannot be created (ErrUncreatable) keeps its own message.
func TestSchemaApplierRetry(t *testing.T) {
	w := partsWriter(&settings{}, writerEnv{retries: 1})
	ctx := context.Background()
	n := 0
	err := w.sa.retryCatalog(ctx, func() error {
		n++
		return mark(ErrCatalogCall, errors.New("connection reset"))
	})
	if n != 2 || !errors.Is(err, ErrCatalogCall) || !strings.Contains(err.Error(), "connection reset (giving up after 2 attempts)") {
		t.Fatalf("%d calls, %v: want 2 and ErrCatalogCall", n, err)
	}
	for _, e := range []error{errors.New("other"), mark(ErrUncreatable, errors.New("float key"))} {
		n = 0
		if err := w.sa.retryCatalog(ctx, func() error { n++; return e }); n != 1 || !errors.Is(err, e) {
			t.Fatalf("%v: %d calls, %v; want one call", e, n, err)
		}
	}
	bad := mark(ErrUncreatable, errors.New("schema for shop.t: float key"))
	if bad.Error() != "schema for shop.t: float key" || !errors.Is(bad, ErrUncreatable) || errors.Is(bad, ErrCatalogCall) {
		t.Fatalf("%v", bad)
	}
	w.st.lay = bufLayout(false, nil)
	w.set.identity = true
	ins := &change.Event{Op: change.OpInsert, Meta: change.Metadata{CommitTimestamp: "2026-01-01", TransactionID: "1", TransactionRecordID: "1"}}
	if change.RecordIdentity(ins) == "" {
		t.Skip("the event carries no record identity")
	}
	w.sa.noteNoIdentity(ins)
	if !w.sa.identityNoted {
		t.Fatal("a keyless table without the identity column: want it noted")
	}
}

// fakeDLQ stores dead letters, synchronously or (async) later.
type fakeDLQ struct {
	got   []change.DeadLetter
	dones []func(error)
}

func (f *fakeDLQ) DeadLetter(_ context.Context, dl change.DeadLetter) error {
	f.got = append(f.got, dl)
	return nil
}

type asyncDLQ struct{ fakeDLQ }

func (f *asyncDLQ) DeadLetterAsync(_ context.Context, dl change.DeadLetter, done func(error)) error {
	f.got = append(f.got, dl)
	f.dones = append(f.dones, done)
	return nil
}

type countAck struct{ n int }

func (a *countAck) Done(n int) { a.n += n }

// The dead letters are acknowledged once durable, and a commit waits for the asynchronous ones.
func TestDeadLetters(t *testing.T) {
	ctx := context.Background()
	sync := &fakeDLQ{}
	w := partsWriter(&settings{}, writerEnv{dlq: sync})
	ack := &countAck{}
	ev := &change.Event{Op: change.OpInsert, Pos: change.Position{Shard: "a", Seq: "1"}, Ack: ack}
	if err := w.dq.deadLetter(ctx, ev, ClassConvert, "bad value"); err != nil {
		t.Fatal(err)
	}
	if len(sync.got) != 1 || sync.got[0].Class != ClassConvert || sync.got[0].Table != "shop.t" || ack.n != 1 {
		t.Fatalf("%+v, acks %d", sync.got, ack.n)
	}
	async := &asyncDLQ{}
	w = partsWriter(&settings{}, writerEnv{dlq: async})
	ack = &countAck{}
	ev.Ack = ack
	if err := w.dq.deadLetter(ctx, ev, ClassConvert, "bad value"); err != nil {
		t.Fatal(err)
	}
	if ack.n != 0 {
		t.Fatal("acknowledged before the dead letter is durable")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.dq.awaitDeadLetters(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await with a dead letter pending: %v, want to wait", err)
	}
	async.dones[0](nil)
	if err := w.dq.awaitDeadLetters(ctx); err != nil || ack.n != 1 {
		t.Fatalf("await: %v, acks %d", err, ack.n)
	}
}

// The table state publishes the writer's status, and a refused table's reason.
func TestTargetTableStatus(t *testing.T) {
	w := partsWriter(&settings{}, writerEnv{})
	w.st.pause("no key")
	if p := w.st.published(); p.Status != tableprop.StatusPaused || p.Reason != "no key" || p.Since.IsZero() || p.Source != "shop.t" {
		t.Fatalf("paused: %+v", p)
	}
	w.st.setStatus(tableprop.StatusActive, "")
	if p := w.st.published(); p.Status != tableprop.StatusActive {
		t.Fatalf("active: %+v", p)
	}
	w.st.refuse("crm.t")
	if p := w.st.published(); p.Status != StatusRefused || w.st.refused == "" || !strings.Contains(p.Reason, "crm.t") {
		t.Fatalf("refused: %+v (%q)", p, w.st.refused)
	}
}
