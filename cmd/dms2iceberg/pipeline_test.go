package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// stageLog records what the fake stages saw, in order.
type stageLog struct {
	mu     sync.Mutex
	events []string
}

func (l *stageLog) add(e string) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }
func (l *stageLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

type fakeSink struct {
	log      *stageLog
	runErr   error         // returned by Run at once when set
	slow     bool          // Close blocks until its deadline
	closed   chan struct{} // closed by Close
	runCtx   chan context.Context
	closeMux sync.Once
	onClose  func(ctx context.Context) // called by Close first, when set
}

func newFakeSink(log *stageLog) *fakeSink {
	return &fakeSink{log: log, closed: make(chan struct{}), runCtx: make(chan context.Context, 1)}
}

func (s *fakeSink) Run(ctx context.Context) error {
	s.runCtx <- ctx
	if s.runErr != nil {
		s.log.add("sink failed")
		return s.runErr
	}
	select {
	case <-s.closed:
		s.log.add("sink stopped after close")
		return nil
	case <-ctx.Done():
		s.log.add("sink aborted")
		return ctx.Err()
	}
}

func (s *fakeSink) Close(ctx context.Context) error {
	s.log.add("sink close")
	if s.onClose != nil {
		s.onClose(ctx)
	}
	if s.slow {
		<-ctx.Done()
		return ctx.Err()
	}
	s.closeMux.Do(func() { close(s.closed) })
	return nil
}

type fakeIntake struct {
	log  *stageLog
	sink *fakeSink
	err  error
}

// Run waits for the end of intake, then checks that the sink still runs while it "drains".
func (c *fakeIntake) Run(ctx context.Context) error {
	sinkCtx := <-c.sink.runCtx
	<-ctx.Done()
	if sinkCtx.Err() != nil {
		c.log.add("sink context ended before the drain")
	}
	c.log.add("intake drained")
	return c.err
}

func testPipeline(log *stageLog, snk *fakeSink, in *fakeIntake) (*pipeline, *health) {
	hc := &health{}
	p := &pipeline{sink: snk, intake: in, shutdownTimeout: 50 * time.Millisecond,
		onStopping: func() { log.add("stopping"); hc.ShuttingDown() }, onFailed: hc.Failed}
	return p, hc
}

// A signal stops intake first (the sink still runs while processors drain), then the sink
// commits what is left; the companions stop after the pipeline, the draining one only once it
// has finished its queue (at the latest at the shutdown deadline).
func TestPipelineTwoPhaseStop(t *testing.T) {
	t.Parallel()
	log := &stageLog{}
	snk := newFakeSink(log)
	p, hc := testPipeline(log, snk, &fakeIntake{log: log, sink: snk})
	p.companions = []companion{
		{run: func(ctx context.Context) error { <-ctx.Done(); log.add("ops stopped"); return nil }},
		{run: func(ctx context.Context) error {
			<-ctx.Done() // the hook's context ends at the shutdown deadline
			if time.Now().Before(p.deadline()) {
				log.add("hook cancelled before the shutdown deadline")
			}
			log.add("hook stopped")
			return nil
		}, drain: func() { log.add("hook drain") }},
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.run(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("run = %v, want nil after a clean stop", err)
	}
	ev := log.get()
	order := []string{"intake drained", "sink close", "sink stopped after close", "hook drain", "hook stopped"}
	if i := indexes(ev, order); i == nil {
		t.Fatalf("events %q, want in order %q", ev, order)
	}
	if !slices.Contains(ev, "stopping") || indexes(ev, []string{"sink stopped after close", "ops stopped"}) == nil ||
		slices.Contains(ev, "sink context ended before the drain") || slices.Contains(ev, "hook cancelled before the shutdown deadline") {
		t.Fatalf("events %q", ev)
	}
	if hc.Ready() == nil {
		t.Fatal("ready after the signal")
	}
}

// A failed sink stops intake and fails the run; the failure reaches health.
func TestPipelineSinkFailureStopsIntake(t *testing.T) {
	t.Parallel()
	log := &stageLog{}
	snk := newFakeSink(log)
	snk.runErr = errors.New("writer: commit refused")
	p, hc := testPipeline(log, snk, &fakeIntake{log: log, sink: snk})
	err := p.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "sink: writer: commit refused") {
		t.Fatalf("run = %v", err)
	}
	if ev := log.get(); indexes(ev, []string{"sink failed", "intake drained", "sink close"}) == nil {
		t.Fatalf("events %q", ev)
	}
	if hc.Ready() == nil {
		t.Fatal("ready after a sink failure")
	}
}

// A consumer failure is returned after the sink was closed.
func TestPipelineConsumerFailure(t *testing.T) {
	t.Parallel()
	log := &stageLog{}
	snk := newFakeSink(log)
	p, _ := testPipeline(log, snk, &fakeIntake{log: log, sink: snk, err: errors.New("lease table gone")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.run(ctx)
	if err == nil || !strings.Contains(err.Error(), "consumer: lease table gone") {
		t.Fatalf("run = %v", err)
	}
	if ev := log.get(); indexes(ev, []string{"intake drained", "sink close", "sink stopped after close"}) == nil {
		t.Fatalf("events %q", ev)
	}
}

// A sink that cannot finish within shutdown_timeout is aborted; that is not a failure.
func TestPipelineCloseDeadlineAbortsTheSink(t *testing.T) {
	t.Parallel()
	log := &stageLog{}
	snk := newFakeSink(log)
	snk.slow = true
	p, _ := testPipeline(log, snk, &fakeIntake{log: log, sink: snk})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := p.run(ctx); err != nil {
		t.Fatalf("run = %v", err)
	}
	if d := time.Since(start); d < p.shutdownTimeout {
		t.Fatalf("stopped after %s, before the shutdown timeout", d)
	}
	if ev := log.get(); indexes(ev, []string{"intake drained", "sink close", "sink aborted"}) == nil {
		t.Fatalf("events %q", ev)
	}
}

// indexes returns the positions of want in ev if they appear in this order, else nil.
func indexes(ev, want []string) []int {
	var out []int
	from := 0
	for _, w := range want {
		i := slices.Index(ev[from:], w)
		if i < 0 {
			return nil
		}
		out = append(out, from+i)
		from += i + 1
	}
	return out
}

// slowIntake drains for the whole shutdown timeout after it saw the stop (a consumer whose
// processors use their full budget), noting when it saw it.
type slowIntake struct {
	timeout time.Duration
	seen    time.Time
}

func (c *slowIntake) Run(ctx context.Context) error {
	<-ctx.Done()
	c.seen = time.Now()
	time.Sleep(c.timeout)
	return nil
}

// One deadline bounds the whole stop: with every stage slow (the intake drains for the full
// timeout, the sink's Close and the draining hook would each wait for their whole context),
// the sink's Close gets only what is left of shutdownTimeout from the start of the stop (here
// nothing), and the hook, whose deadline has passed when the pipeline stops, is cancelled at
// once instead of shutdownTimeout later. The old code gave each stage the full timeout in turn
// (intake + 5 s, Close, hook: up to three times shutdown_timeout).
func TestPipelineStagesShareOneShutdownDeadline(t *testing.T) {
	t.Parallel()
	log := &stageLog{}
	snk := newFakeSink(log)
	snk.slow = true
	const timeout = 100 * time.Millisecond
	in := &slowIntake{timeout: timeout}
	p := &pipeline{sink: snk, intake: in, shutdownTimeout: timeout, onStopping: func() {}, onFailed: func(error) {}}
	var closeDeadline time.Time
	snk.onClose = func(ctx context.Context) { closeDeadline, _ = ctx.Deadline() }
	hookCtx := make(chan context.Context, 1)
	hookCancelledFirst := make(chan bool, 1)
	p.companions = []companion{
		{run: func(ctx context.Context) error { hookCtx <- ctx; <-ctx.Done(); return nil }, drain: func() {}},
		{run: func(ctx context.Context) error {
			<-ctx.Done() // the ops server stops after the hook's stop has run
			hookCancelledFirst <- (<-hookCtx).Err() != nil
			return nil
		}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.run(ctx); err != nil {
		t.Fatalf("run = %v", err)
	}
	if closeDeadline.IsZero() || closeDeadline.After(in.seen.Add(timeout)) {
		t.Errorf("sink Close deadline %v, want at most shutdownTimeout after the intake saw the stop (%v)", closeDeadline, in.seen.Add(timeout))
	}
	if !<-hookCancelledFirst {
		t.Error("the draining hook's context still ran after the shutdown deadline had passed")
	}
	if ev := log.get(); indexes(ev, []string{"sink close", "sink aborted"}) == nil {
		t.Fatalf("events %q", ev)
	}
}
