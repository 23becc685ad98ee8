package main

import (
	"context"
	"errors"
	"fmt"
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
	// then ends shutdownTimeout later, so that it can finish what is queued. Without drain the
	// context ends as soon as the pipeline has stopped.
	drain func()
}

// pipeline owns the start and the two-phase stop of the service (serve):
//
//  1. Intake stops when ctx ends (a signal) or the sink fails: the consumer stops reading and
//     every shard processor flushes, waits for its commits and writes its last checkpoint. The
//     sink keeps running meanwhile: its context does not end with ctx.
//  2. Once the consumer has returned, the sink commits what is left and its writers exit,
//     within shutdownTimeout; past it, the sink's context is cancelled.
//
// Then the companions stop. The first signal calls onStopping; every stage failure onFailed.
type pipeline struct {
	sink            pipelineSink
	intake          pipelineIntake
	companions      []companion
	shutdownTimeout time.Duration
	onStopping      func()
	onFailed        func(error)
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
			time.AfterFunc(p.shutdownTimeout, cancel)
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
	intakeCtx, stopIntake := context.WithCancel(ctx)
	defer stopIntake()
	var g errgroup.Group
	g.Go(func() error {
		err := p.sink.Run(sinkCtx)
		stopIntake() // a failed writer stops intake
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

// closeSink lets the sink commit what is left within the shutdown timeout, then aborts it.
func (p *pipeline) closeSink(abortSink context.CancelFunc) {
	closeCtx, cancel := context.WithTimeout(context.Background(), p.shutdownTimeout)
	defer cancel()
	_ = p.sink.Close(closeCtx)
	if closeCtx.Err() != nil {
		abortSink()
	}
}
