package consumer

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// The shard processors under the process-wide byte budget (pkg/membudget). Nothing is timed:
// tests wait on the budget's counters and the sink's channel, and a generous deadline only
// tells a deadlock from progress.

// eventually polls cond until it holds, failing after a minute (a deadlock detector).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("deadlocked: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A delivery larger than the whole budget passes when the processor holds nothing; the next one
// waits until the sink acknowledges what the processor holds, then goes on; a dead-lettered
// record gives its bytes back at once.
func TestBudgetBlocksTheReaderAndResumes(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	l := int64(len(goodRecord))
	e.c.budget = membudget.New(l + l/2)
	p := e.start("shardId-0", "")
	deliver(p, "1", "2") // 2 records: more than the budget, admitted since nothing is held
	for _, want := range []string{"1", "2"} {
		if got := <-e.sink.submitted; got != want {
			t.Fatalf("submitted %s, want %s", got, want)
		}
	}
	if got := e.c.budget.Held(); got != 2*l {
		t.Fatalf("budget holds %d, want %d", got, 2*l)
	}
	done := make(chan struct{})
	go func() { defer close(done); deliver(p, "3") }()
	eventually(t, "the reader to wait for the budget", func() bool { return e.c.budget.Waits() == 1 })
	if got := e.sink.seqs(); len(got) != 2 {
		t.Fatalf("handed on %v while waiting for the budget", got)
	}
	e.sink.ack(t, "1", "2")
	if got := <-e.sink.submitted; got != "3" {
		t.Fatalf("submitted %s, want 3", got)
	}
	<-done
	e.sink.ack(t, "3")
	if got := e.c.budget.Held(); got != 0 {
		t.Fatalf("budget holds %d after every acknowledgement", got)
	}
	deliverRaw(p, "4", badRecord)
	if got := e.c.budget.Held(); got != 0 {
		t.Fatalf("budget holds %d after a dead-lettered record", got)
	}
	e.wantCheckpoint("shardId-0", "4", "after the dead letter")
}

// A processor waiting for the budget stops waiting when its context ends (shutdown): nothing
// of the delivery is handed on and the processor halts.
func TestBudgetWaitEndsAtShutdown(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.c.budget = membudget.New(1)
	p := e.start("shardId-0", "")
	deliver(p, "1")
	<-e.sink.submitted
	done := make(chan struct{})
	go func() { defer close(done); deliver(p, "2") }()
	eventually(t, "the reader to wait for the budget", func() bool { return e.c.budget.Waits() == 1 })
	e.cancel()
	<-done
	if !p.halted {
		t.Fatal("the processor did not halt after a delivery it could not hand on")
	}
	if got := e.sink.seqs(); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("handed on %v", got)
	}
}

// boundSink commits like a guarded sink: it holds every event and acknowledges, after each
// recomputation of the commit bound, those that arrived at or before it.
type boundSink struct {
	c    *Consumer
	mu   sync.Mutex
	held []*change.Event
}

func (s *boundSink) Submit(_ context.Context, ev *change.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = append(s.held, ev)
	return nil
}

func (s *boundSink) Flush(context.Context) error { return nil }

func (s *boundSink) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.c.BoundsChanged():
		}
		bound := s.c.CommitBound()
		s.mu.Lock()
		kept := s.held[:0]
		var due []*change.Event
		for _, ev := range s.held {
			if !bound.IsZero() && !ev.Arrival.After(bound) {
				due = append(due, ev)
				continue
			}
			kept = append(kept, ev)
		}
		s.held = kept
		s.mu.Unlock()
		for _, ev := range due {
			ev.Ack.Done(1)
		}
	}
}

// pendingBefore counts the held events that arrived before at.
func (s *boundSink) pendingBefore(at time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ev := range s.held {
		if ev.Arrival.Before(at) {
			n++
		}
	}
	return n
}

// With the ordering guard a shard's records commit only once every shard's horizon has passed
// them. Shard a fills the budget with records of t=10..12 s; shard b, whose horizon holds the
// watermark back, must read on (t=1..20 s) for anything to commit: it is the holder, so it is
// admitted past the budget. Without that exemption b would wait for bytes only its own reading
// can free, and nothing would ever commit.
func TestBudgetWithOrderingGuardDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.c.clock = func() time.Time { return t0 }
	e.c.cfg.MaxReadAhead = time.Hour
	e.c.cfg.HorizonInterval = time.Millisecond
	l := int64(len(goodRecord))
	e.c.budget = membudget.New(3 * l)
	bs := &boundSink{c: e.c}
	e.c.sink = bs
	a := e.start("shardId-a", "")
	b := e.start("shardId-b", "")
	loopCtx, stopLoop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.c.runHorizons(loopCtx) })
	wg.Go(func() { bs.run(loopCtx) })
	defer func() { stopLoop(); wg.Wait() }()
	for i := 10; i <= 12; i++ {
		deliverAt(a, 5000, t0, rec{strconv.Itoa(1000 + i), sec(i)})
	}
	if got := e.c.budget.Held(); got != 3*l {
		t.Fatalf("budget holds %d, want it full (%d)", got, 3*l)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 1; i <= 20; i++ {
			deliverAt(b, 5000, t0, rec{strconv.Itoa(1000 + i), sec(i)})
		}
	}()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute): // a deadlock, not a timing assertion
		e.cancel()
		<-finished
		t.Fatalf("shard b could not read on: the budget deadlocked the ordering guard (held %d of %d)", e.c.budget.Held(), 3*l)
	}
	// W is now a's horizon, just before its last record (t=12 s): everything before it commits.
	eventually(t, "the records before t=12 s to commit", func() bool { return bs.pendingBefore(sec(12)) == 0 })
}

// deliverRaw hands the processor one delivery of one record with the given data.
func deliverRaw(p *processor, seq string, data []byte) {
	p.ProcessRecords(&kcl.ProcessRecordsInput{Records: []ktypes.Record{{SequenceNumber: aws.String(seq), Data: data}}})
}
