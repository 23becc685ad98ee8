package checkpoint

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

func TestCommittedAdvancesOnlyOverFinishedPrefix(t *testing.T) {
	t.Parallel()
	s := NewShard("shardId-0", "5")
	d1 := s.Begin("10", 2)
	d2 := s.Begin("20", 1)
	d3 := s.Begin("30", 1)

	d2.Done(1)
	if got := s.Committed(); got != "5" {
		t.Fatalf("after later delivery finished: committed %q, want 5", got)
	}
	d1.Done(1)
	if got := s.Committed(); got != "5" {
		t.Fatalf("after partial ack: committed %q, want 5", got)
	}
	d1.Done(1)
	if got := s.Committed(); got != "20" {
		t.Fatalf("after prefix finished: committed %q, want 20", got)
	}
	if s.Pending() != 1 {
		t.Fatalf("pending %d, want 1", s.Pending())
	}
	d3.Done(1)
	if got := s.Committed(); got != "30" {
		t.Fatalf("committed %q, want 30", got)
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyDeliveryFinishesAtOnce(t *testing.T) {
	t.Parallel()
	s := NewShard("s", "")
	s.Begin("7", 0)
	if got := s.Committed(); got != "7" {
		t.Fatalf("committed %q, want 7", got)
	}
}

func TestSequenceNumbersCompareNumerically(t *testing.T) {
	t.Parallel()
	s := NewShard("s", "99")
	s.Begin("100", 0)
	if got := s.Committed(); got != "100" {
		t.Fatalf("committed %q, want 100 (numeric, not lexical, order)", got)
	}
}

func TestOverAckPanics(t *testing.T) {
	t.Parallel()
	s := NewShard("s", "")
	d := s.Begin("1", 1)
	d.Done(1)
	defer func() {
		if recover() == nil {
			t.Fatal("expected panic on over-acknowledgement")
		}
	}()
	d.Done(1)
}

func TestWaitIdleConcurrentAcks(t *testing.T) {
	t.Parallel()
	s := NewShard("s", "")
	const deliveries, events = 50, 20
	ds := make([]*Delivery, deliveries)
	for i := range ds {
		ds[i] = s.Begin(strconv.Itoa(1000+i), events)
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		for range events {
			wg.Go(func() { d.Done(1) })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v (pending %d)", err, s.Pending())
	}
	wg.Wait()
	if got := s.Committed(); got != strconv.Itoa(1000+deliveries-1) {
		t.Fatalf("committed %q after all acks", got)
	}
}

func TestCovered(t *testing.T) {
	t.Parallel()
	if !Covered("123", "122") || !Covered("123", "123") || Covered("123", "124") || Covered("", "1") {
		t.Fatal("Covered misjudged")
	}
}

// A delivery whose events were only partly handed on (shutdown in the middle of a Submit loop)
// never finishes: Abandon lets the deliveries before it drain and be committed, and keeps the
// committed sequence number below it whatever is acknowledged later.
func TestAbandonedDeliveryIsNeverCommittedAndDoesNotBlockTheDrain(t *testing.T) {
	t.Parallel()
	s := NewShard("s", "5")
	d1 := s.Begin("10", 1)
	d2 := s.Begin("20", 3) // only 2 of its 3 events were handed on
	s.Abandon(d2)
	if s.Pending() != 1 {
		t.Fatalf("pending %d after Abandon, want 1 (the delivery before the abandoned one)", s.Pending())
	}
	d2.Done(2) // the handed-on events commit later
	if got := s.Committed(); got != "5" {
		t.Fatalf("committed %q, want 5", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go d1.Done(1)
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if got := s.Committed(); got != "10" {
		t.Fatalf("committed %q, want 10 (the prefix before the abandoned delivery)", got)
	}
	d3 := s.Begin("30", 0) // nothing is registered after Abandon
	d3.Done(0)
	if got := s.Committed(); got != "10" || s.Pending() != 0 {
		t.Fatalf("after a delivery registered past the abandoned one: committed %q pending %d, want 10 and 0", got, s.Pending())
	}
}

// Oldest is the first arrival of the oldest unfinished delivery: it moves only when the prefix
// finishes, is unset when nothing is pending, and an abandoned delivery leaves it.
func TestOldestIsTheFirstArrivalOfTheOldestOpenDelivery(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	s := NewShard("shardId-0", "")
	if _, ok := s.Oldest(); ok {
		t.Fatal("pending before any delivery")
	}
	d1 := s.BeginAt("10", at(100), 2)
	d2 := s.BeginAt("20", at(200), 1)
	d3 := s.BeginAt("30", at(300), 1)
	want := func(ms int64, when string) {
		t.Helper()
		got, ok := s.Oldest()
		if !ok || !got.Equal(at(ms)) {
			t.Fatalf("%s: oldest %v (pending %v), want %v", when, got, ok, at(ms))
		}
	}
	want(100, "three open")
	d2.Done(1)
	want(100, "a later delivery finished")
	d1.Done(2)
	want(300, "the prefix finished")
	s.BeginAt("35", at(350), 0) // finished at once (all dead-lettered): not pending
	want(300, "after an empty delivery")
	d4 := s.BeginAt("40", at(400), 1)
	s.Abandon(d3)
	if got, ok := s.Oldest(); ok {
		t.Fatalf("oldest %v after abandoning the open deliveries", got)
	}
	d3.Done(1)
	d4.Done(1)
	if _, ok := s.Oldest(); ok {
		t.Fatal("pending after everything finished")
	}
}

// PendingTables is, per table and kind, the oldest unacknowledged event: acknowledging other
// events, or events out of order, moves it exactly; ties of arrival go by source position; an
// abandoned delivery leaves it.
func TestPendingTablesFollowTheUnacknowledgedEvents(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	s := NewShard("shardId-0", "")
	d1 := s.BeginTracked("10", at(100), []Tracked{{Schema: "s", Table: "a", Kind: KindChange, At: at(100)}, {Schema: "s", Table: "a", Kind: KindLoad, At: at(110)},
		{Schema: "s", Table: "b", Kind: KindControl, At: at(105)}, {Schema: "s", Table: "a", Kind: KindLoad, At: at(120)}})
	d2 := s.BeginTracked("20", at(200), []Tracked{{Schema: "s", Table: "b", Kind: KindLoad, At: at(200)}, {Schema: "s", Table: "a", Kind: KindKeyChange, At: at(210)}})
	want := func(table string, k Kind, ms int64, when string) {
		t.Helper()
		g := s.PendingTables()[table].Kinds[k]
		switch {
		case ms < 0 && !g.At.IsZero():
			t.Fatalf("%s: %s kind %d pending from %v, want none", when, table, k, g.At)
		case ms >= 0 && !g.At.Equal(at(ms)):
			t.Fatalf("%s: %s kind %d pending from %v, want %v", when, table, k, g.At, at(ms))
		}
	}
	want("s.a", KindLoad, 110, "all open")
	want("s.b", KindLoad, 200, "all open")
	want("s.b", KindControl, 105, "all open")
	want("s.a", KindControl, -1, "all open")
	want("s.a", KindChange, 100, "all open")
	want("s.a", KindKeyChange, 210, "all open")
	d1.Event(0).Done(1)
	want("s.a", KindChange, -1, "after the only CDC change")
	want("s.a", KindLoad, 110, "after another kind")
	d1.Event(1).Done(1)
	want("s.a", KindLoad, 120, "after the first load row: the next one of the same delivery")
	d1.Event(2).Done(1)
	want("s.b", KindControl, -1, "after the control record")
	d2.Event(0).Done(1) // a later delivery's load row first
	want("s.b", KindLoad, -1, "a later delivery's load row acknowledged")
	want("s.a", KindLoad, 120, "a later delivery's load row acknowledged")
	d1.Event(3).Done(1)
	want("s.a", KindLoad, -1, "every load row acknowledged")
	if got := s.Committed(); got != "10" {
		t.Fatalf("committed %q after the first delivery, want 10", got)
	}
	d3 := s.BeginTracked("30", at(300), []Tracked{{Schema: "s", Table: "b", Kind: KindControl, At: at(300)}})
	want("s.b", KindControl, 300, "a later control record")
	s.Abandon(d2)
	want("s.a", KindKeyChange, -1, "after abandoning")
	want("s.b", KindControl, -1, "after abandoning")
	d2.Event(1).Done(1)
	d3.Event(0).Done(1)
	if p := s.PendingTables(); p != nil {
		t.Fatalf("pending %v after everything finished", p)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second acknowledgement of one event did not panic")
		}
	}()
	d3.Event(0).Done(1)
}

// At equal arrivals the source position decides which event is the oldest.
func TestPendingTablesBreakTiesBySourcePosition(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(500)
	s := NewShard("shardId-0", "")
	later := change.SourcePos{CommitTS: "2025-06-01T00:00:02.000000Z"}
	earlier := change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z"}
	d := s.BeginTracked("10", at, []Tracked{{Schema: "s", Table: "a", Kind: KindChange, At: at, Pos: later}, {Schema: "s", Table: "a", Kind: KindChange, At: at, Pos: earlier}})
	if g := s.PendingTables()["s.a"].Kinds[KindChange]; !g.At.Equal(at) || g.Pos != earlier {
		t.Fatalf("oldest %+v, want %v %+v", g, at, earlier)
	}
	d.Event(1).Done(1)
	if g := s.PendingTables()["s.a"].Kinds[KindChange]; g.Pos != later {
		t.Fatalf("after the earlier one: %+v, want %+v", g.Pos, later)
	}
	d.Event(0).Done(1)
}

// The stored form keeps every table's gates; past MaxPendingTables the tables with the newest
// gates merge into AnyTable, which applies to every table.
func TestPendingTablesEncoding(t *testing.T) {
	t.Parallel()
	pos := change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z", TxID: "7", TxRecord: "2", Position: "mysql-bin.000024:9812:0"}
	p := PendingTables{"s.a": GatesOf(map[Kind]Gate{KindLoad: {At: time.UnixMilli(100).UTC()}, KindKeyChange: {At: time.UnixMilli(200).UTC(), Pos: pos}})}
	got, err := decodePendingTables(p.encode())
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip %v (%v), want %v", got, err, p)
	}
	if PendingTables(nil).encode() != "" {
		t.Fatal("nothing pending is not the empty string")
	}
	big := PendingTables{}
	for i := range MaxPendingTables + 10 {
		big[fmt.Sprintf("s.t%03d", i)] = GatesOf(map[Kind]Gate{KindChange: {At: time.UnixMilli(int64(1000 + i)).UTC()}})
	}
	got, err = decodePendingTables(big.encode())
	if err != nil || len(got) != MaxPendingTables {
		t.Fatalf("capped to %d tables (%v), want %d", len(got), err, MaxPendingTables)
	}
	if g := got.For(fmt.Sprintf("s.t%03d", MaxPendingTables+5)); !g.Kinds[KindChange].At.Equal(time.UnixMilli(int64(1000 + MaxPendingTables - 1)).UTC()) {
		t.Fatalf("a merged table's gate %v, want the oldest merged one", g.Kinds[KindChange].At)
	}
	if g := got.For("s.t000"); !g.Kinds[KindChange].At.Equal(time.UnixMilli(1000).UTC()) {
		t.Fatalf("a kept table's gate %v", g.Kinds[KindChange].At)
	}
}

// A load row not routed by its key is published as such and as a load row, so that writers
// that know only the load gate wait for it too; and it round-trips through the stored form.
func TestStrayLoadRowsArePublishedUnderBothKinds(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	s := NewShard("shardId-0", "")
	d := s.BeginTracked("10", at(100), []Tracked{{Schema: "s", Table: "a", Kind: KindLoad, At: at(120)},
		{Schema: "s", Table: "a", Kind: KindLoadNotByKey, At: at(110)}, {Schema: "s", Table: "b", Kind: KindLoad, At: at(130)}})
	p := s.PendingTables()
	if g := p["s.a"]; !g.Kinds[KindLoad].At.Equal(at(110)) || !g.Kinds[KindLoadNotByKey].At.Equal(at(110)) {
		t.Fatalf("s.a: load %v, not by key %v; want both 110", g.Kinds[KindLoad].At, g.Kinds[KindLoadNotByKey].At)
	}
	if g := p["s.b"]; !g.Kinds[KindLoadNotByKey].At.IsZero() {
		t.Fatalf("s.b: a load row routed by key published as stray: %v", g.Kinds[KindLoadNotByKey].At)
	}
	got, err := decodePendingTables(p.encode())
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip %v (%v), want %v", got, err, p)
	}
	d.Event(1).Done(1)
	if g := s.PendingTables()["s.a"]; !g.Kinds[KindLoad].At.Equal(at(120)) || !g.Kinds[KindLoadNotByKey].At.IsZero() {
		t.Fatalf("after the stray row: load %v, not by key %v", g.Kinds[KindLoad].At, g.Kinds[KindLoadNotByKey].At)
	}
	d.Event(0).Done(1)
	d.Event(2).Done(1)
}
