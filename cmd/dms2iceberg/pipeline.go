package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// pipelineSink is the sink stage: it runs until Close (or its context ends) and must keep
// committing while the intake drains.
type pipelineSink interface {
	Run(ctx context.Context) error
	Close(ctx context.Context) error
}

// pipelineIntake is the intake stage (the consumer): it runs until its context ends and returns
// only after its shard processors have flushed, committed and checkpointed.
type pipelineIntake interface {
	Run(ctx context.Context) error
}

// companion runs beside the pipeline and stops after it (the operations server, the post-commit
// hook).
type companion struct {
	run func(ctx context.Context) error
	// drain, when set, closes the companion's intake once the pipeline has stopped; its context
	// then ends at the shutdown deadline, so that it can finish what is queued in the time the
	// stages left. Without drain the context ends as soon as the pipeline has stopped.
	drain func()
}

// pipeline owns the start and the two-phase stop of the service (serve):
//
//  1. Intake stops when ctx ends (a signal) or the sink fails: the consumer stops reading and
//     every shard processor flushes, waits for its commits and writes its last checkpoint. The
//     sink keeps running meanwhile: its context does not end with ctx.
//  2. Once the consumer has returned, the sink commits what is left and its writers exit by
//     the shutdown deadline; past it, the sink's context is cancelled.
//
// Then the companions stop. The first signal calls onStopping; every stage failure onFailed.
//
// One deadline bounds the whole stop: shutdownTimeout from its start (the signal, a failed
// sink, or a consumer that returned by itself; deadline). The consumer's processors drain by it
// (consumer.WithShutdownDeadline), the sink's Close gets what is left of it, and a draining
// companion's context ends at it. Only the consumer's worker wait (consumer.ShutdownSlack) and
// the ops server's connection close run past it, by at most consumer.ShutdownSlack.
type pipeline struct {
	sink            pipelineSink
	intake          pipelineIntake
	companions      []companion
	shutdownTimeout time.Duration
	onStopping      func()
	onFailed        func(error)

	stopOnce sync.Once
	stopBy   time.Time
}

// deadline is the shutdown deadline: shutdownTimeout from the first call, which the start of
// the stop makes. Every stage of the stop shares it.
func (p *pipeline) deadline() time.Time {
	p.stopOnce.Do(func() { p.stopBy = time.Now().Add(p.shutdownTimeout) })
	return p.stopBy
}

// run starts the stages and the companions and returns when all have stopped, with the first
// stage failure (nil after a clean stop).
func (p *pipeline) run(ctx context.Context) error {
	stopWatch := context.AfterFunc(ctx, p.onStopping)
	defer stopWatch()
	var g errgroup.Group
	stops := make([]func(), 0, len(p.companions))
	for _, c := range p.companions {
		cctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stops = append(stops, func() {
			if c.drain == nil {
				cancel()
				return
			}
			c.drain()
			left := time.Until(p.deadline())
			if left <= 0 {
				cancel()
				return
			}
			time.AfterFunc(left, cancel)
		})
		g.Go(func() error { return c.run(cctx) })
	}
	g.Go(func() error {
		defer func() {
			for _, stop := range stops {
				stop()
			}
		}()
		return p.runStages(ctx)
	})
	return g.Wait()
}

// runStages runs the sink and the intake through the two phases of the stop.
func (p *pipeline) runStages(ctx context.Context) error {
	sinkCtx, abortSink := context.WithCancel(context.WithoutCancel(ctx))
	defer abortSink()
	// Intake ends only through stop, which starts the shutdown deadline first: by the time the
	// consumer sees its context end, the deadline is fixed.
	intakeCtx, stopIntake := context.WithCancel(context.WithoutCancel(ctx))
	defer stopIntake()
	stop := func() { p.deadline(); stopIntake() }
	defer context.AfterFunc(ctx, stop)()
	var g errgroup.Group
	g.Go(func() error {
		err := p.sink.Run(sinkCtx)
		stop() // a failed writer stops intake
		if err != nil && !errors.Is(err, context.Canceled) {
			p.onFailed(err)
			return fmt.Errorf("sink: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		err := p.intake.Run(intakeCtx) // phase 1
		p.closeSink(abortSink)         // phase 2
		if err != nil {
			p.onFailed(err)
			return fmt.Errorf("consumer: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// closeSink lets the sink commit what is left by the shutdown deadline, then aborts it.
func (p *pipeline) closeSink(abortSink context.CancelFunc) {
	closeCtx, cancel := context.WithDeadline(context.Background(), p.deadline())
	defer cancel()
	_ = p.sink.Close(closeCtx)
	if closeCtx.Err() != nil {
		abortSink()
	}
}
