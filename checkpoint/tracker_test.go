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
