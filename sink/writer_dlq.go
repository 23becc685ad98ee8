package sink

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// deadLetters is where a table writer's records that cannot be applied go: it stores them
// through the sink's dead letterer and counts those not yet durable, which a commit waits for.
type deadLetters struct {
	*tableScope
	// wait counts dead letters handed to an AsyncDeadLetterer and not yet durable.
	wait dlWait
}

// deadLetter stores a record that cannot be applied, with its class (see ClassConvert ...) and
// reason, and acknowledges it once the dead letter is durable. With an AsyncDeadLetterer the
// writer does not wait: the acknowledgement follows the dead-letter commit, and the writer's
// next commit waits for it (awaitDeadLetters).
func (dq *deadLetters) deadLetter(ctx context.Context, ev *change.Event, class, reason string) error {
	op := ev.Meta.Operation
	if op == "" {
		op = ev.Op.String()
	}
	dl := change.DeadLetter{Stream: ev.Pos.Stream, Shard: ev.Pos.Shard, Seq: ev.Pos.Seq,
		Table: dq.src, Reason: reason, Raw: ev.Raw, Class: class, Op: op}
	dq.env.metrics.DeadLettered(dq.name)
	dq.env.metrics.DeadLetterClass(dq.name, class)
	dq.log.Warn("dead-lettered record", zap.String("shard", ev.Pos.Shard), zap.String("seq", ev.Pos.Seq),
		zap.String("class", class), zap.String("reason", reason))
	if a, ok := dq.env.dlq.(AsyncDeadLetterer); ok {
		dq.wait.add()
		acker := ev.Ack
		err := a.DeadLetterAsync(ctx, dl, func(err error) {
			if err == nil && acker != nil {
				acker.Done(1)
			}
			dq.wait.done(err)
		})
		if err != nil {
			dq.wait.done(err)
			return fmt.Errorf("dead-letter a record of %s: %w", dq.src, err)
		}
		return nil
	}
	if err := dq.env.dlq.DeadLetter(ctx, dl); err != nil {
		return fmt.Errorf("dead-letter a record of %s: %w", dq.src, err)
	}
	ack(ev)
	return nil
}

// dlWait counts a writer's pending asynchronous dead letters.
type dlWait struct {
	mu  *sync.Mutex
	n   *int
	err *error
	ch  chan struct{}
}

func newDLWait() dlWait {
	return dlWait{mu: new(sync.Mutex), n: new(int), err: new(error), ch: make(chan struct{}, 1)}
}

func (d dlWait) add() {
	d.mu.Lock()
	*d.n++
	d.mu.Unlock()
}

func (d dlWait) done(err error) {
	d.mu.Lock()
	*d.n--
	if err != nil && *d.err == nil {
		*d.err = err
	}
	d.mu.Unlock()
	select {
	case d.ch <- struct{}{}:
	default:
	}
}

func (d dlWait) pending() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return *d.n, *d.err
}

// awaitDeadLetters waits until every dead letter this writer handed over is durable, so that
// the next commit cannot move a watermark past a record whose dead letter might still be lost.
func (dq *deadLetters) awaitDeadLetters(ctx context.Context) error {
	for {
		n, err := dq.wait.pending()
		if err != nil {
			return fmt.Errorf("dead letters of %s: %w", dq.src, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-dq.wait.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
