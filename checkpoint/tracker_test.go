package checkpoint

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
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

// OldestKind counts a delivery with the first arrival of a kind while an event of that kind is
// unacknowledged: acknowledging the delivery's other events, or finished later deliveries,
// change nothing; an abandoned delivery leaves it.
func TestOldestKindFollowsTheUnacknowledgedEventsOfTheKind(t *testing.T) {
	t.Parallel()
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	s := NewShard("shardId-0", "")
	var k1, k2 Kinds
	k1[KindLoad].N, k1[KindLoad].First = 1, at(110)
	k1[KindControl].N, k1[KindControl].First = 1, at(105)
	d1 := s.BeginKinds("10", at(100), 3, k1) // one CDC change, one load row, one control record
	k2[KindLoad].N, k2[KindLoad].First = 2, at(200)
	d2 := s.BeginKinds("20", at(200), 2, k2)
	want := func(k Kind, ms int64, when string) {
		t.Helper()
		got, ok := s.OldestKind(k)
		switch {
		case ms < 0 && ok:
			t.Fatalf("%s: kind %d pending from %v, want none", when, k, got)
		case ms >= 0 && (!ok || !got.Equal(at(ms))):
			t.Fatalf("%s: kind %d pending from %v (%v), want %v", when, k, got, ok, at(ms))
		}
	}
	want(KindLoad, 110, "all open")
	want(KindControl, 105, "all open")
	d1.Done(1) // the CDC change
	want(KindLoad, 110, "after the delivery's other event")
	d1.Of(KindLoad).Done(1)
	want(KindLoad, 200, "after the first delivery's load row")
	want(KindControl, 105, "after the first delivery's load row")
	d1.Of(KindControl).Done(1)
	want(KindControl, -1, "after the control record")
	if got := s.Committed(); got != "10" {
		t.Fatalf("committed %q after the first delivery, want 10", got)
	}
	d2.Of(KindLoad).Done(1)
	want(KindLoad, 200, "one of two load rows acknowledged")
	d3 := s.BeginKinds("30", at(300), 1, Kinds{KindControl: {N: 1, First: at(300)}})
	want(KindControl, 300, "a later control record")
	s.Abandon(d2)
	want(KindLoad, -1, "after abandoning")
	want(KindControl, -1, "after abandoning")
	d2.Of(KindLoad).Done(1)
	d3.Of(KindControl).Done(1)
}
