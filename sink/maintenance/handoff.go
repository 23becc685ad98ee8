package maintenance

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// HandoffWait is how long a maintenance commit waits for the writer to commit (and run it right
// after) before running by itself: two flush intervals, at most 10s.
func HandoffWait(flushInterval time.Duration) time.Duration {
	return min(2*flushInterval, 10*time.Second)
}

// followUpWait is the default of committer.followUpWait: how long the writer, having run a maintenance commit that another follows at
// once (commitJob.followUp: the two commits of a conversion), waits in AfterCommit for that
// second commit, so that it too runs between two of its commits instead of a flush interval
// later.
const followUpWait = 250 * time.Millisecond

// stageFunc stages one maintenance change in txn on head; attempt counts from 0.
type stageFunc func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error

// directFunc stages a maintenance change on head and commits it with props itself (for what a
// transaction on main cannot stage: the positional branch); sent tells whether a commit request
// was sent.
type directFunc func(ctx context.Context, head *table.Table, props iceberg.Properties) (tbl *table.Table, sent bool, err error)

// commitJob is one maintenance commit attempt: stage on a table, add props (lease renewal
// included), commit.
type commitJob struct {
	step    string
	props   iceberg.Properties
	stage   stageFunc
	direct  directFunc // instead of stage
	attempt int
	done    chan jobResult // buffered: the executor never blocks on it
	// followUp: the maintainer commits another job as soon as this one has landed, and the
	// writer that ran it waits for that one (followUpWait).
	followUp bool
}

type jobResult struct {
	tbl  *table.Table // the committed table; nil when nothing was committed
	head *table.Table // the table the job was staged on
	sent bool         // a commit request was sent (false: staging failed)
	err  error
}

// committer commits a table's maintenance changes: each attempt is a job staged on the newest
// table, which the table's writer runs between two of its commits when it is committing (the
// hand-off slot) and the maintenance goroutine runs itself otherwise, through commit.Run. The
// slot, the hand-off wait and the time of the writer's last commit are atomic: the writer's
// goroutine reads them; the rest is set before Run.
type committer struct {
	*maintained
	lease *leaseHolder // renewed in every commit
	// onDemand is a run of RunTable (dms2iceberg maintain): no writer hands it a table, and an
	// operator waits for it, so a lost race is re-staged at once and does not use up its
	// retries, as for a table writer; background maintenance yields to the writers instead.
	onDemand bool
	// A job waits in slot for the writer's next commit, at most handoffWait (zero: no hand-off,
	// as for RunTable).
	handoffWait  atomic.Int64 // nanoseconds
	slot         atomic.Pointer[commitJob]
	filled       chan struct{}                  // signalled (buffered 1) when a job is put in slot
	followUpWait time.Duration                  // followUpWait unless a test sets it
	writerCommit atomic.Int64                   // unix nanoseconds of the writer's last commit
	beforeCommit func(step string, attempt int) // for tests: called before each commit
}

func newCommitter(t *maintained, lease *leaseHolder, handoffWait time.Duration) *committer {
	c := &committer{maintained: t, lease: lease, filled: make(chan struct{}, 1), followUpWait: followUpWait}
	c.handoffWait.Store(int64(handoffWait))
	return c
}

// runWaiting runs, on the writer's goroutine, the maintenance commit waiting in the slot for the
// writer's commit of tbl, if any, on tbl, and passes each result to adopt (AfterCommit). It
// returns the newest table.
func (c *committer) runWaiting(ctx context.Context, tbl *table.Table, adopt func(*table.Table) error) *table.Table {
	c.writerCommit.Store(time.Now().UnixNano())
	for job := c.slot.Swap(nil); job != nil; {
		res := c.execute(ctx, job, tbl)
		if res.tbl != nil {
			if err := adopt(res.tbl); err == nil {
				tbl = res.tbl
			}
		}
		job.done <- res
		if !job.followUp || res.tbl == nil {
			break
		}
		job = c.awaitFollowUp(ctx)
	}
	return tbl
}

// awaitFollowUp waits at most c.followUpWait for the next job in the slot and takes it (nil: none
// came, or ctx ended).
func (c *committer) awaitFollowUp(ctx context.Context) *commitJob {
	timer := time.NewTimer(c.followUpWait)
	defer timer.Stop()
	for {
		if job := c.slot.Swap(nil); job != nil {
			return job
		}
		select {
		case <-c.filled: // a job was put in the slot (or an earlier signal was left over)
		case <-timer.C:
			return c.slot.Swap(nil)
		case <-ctx.Done():
			return nil
		}
	}
}

// execute stages job on head (loaded from the catalog when nil) and commits it. It touches no
// mutable maintainer state, so the writer may run it.
func (c *committer) execute(ctx context.Context, job *commitJob, head *table.Table) jobResult {
	ctx, cancel := bounded(ctx, c.cfg)
	defer cancel()
	if head == nil {
		var err error
		if head, err = c.cat.LoadTable(ctx, c.ident); err != nil {
			return jobResult{err: err, sent: true} // retryable, like a lost commit
		}
	}
	if err := tableprop.CheckStateVersion(c.name, head.Properties()); err != nil {
		return jobResult{head: head, err: err} // not sent: permanent
	}
	props := maps.Clone(job.props)
	if props == nil {
		props = iceberg.Properties{}
	}
	tableprop.Stamp(props, head.Properties())
	if job.direct != nil {
		if c.beforeCommit != nil {
			c.beforeCommit(job.step, job.attempt)
		}
		tbl, sent, err := job.direct(ctx, head, props)
		if tbl != nil {
			return jobResult{tbl: tbl, head: head, sent: true}
		}
		return jobResult{head: head, sent: sent, err: err}
	}
	txn := head.NewTransaction()
	if err := job.stage(ctx, txn, head, job.attempt); err != nil {
		return jobResult{head: head, err: err}
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return jobResult{head: head, err: fmt.Errorf("stage properties: %w", err)}
		}
	}
	if c.beforeCommit != nil {
		c.beforeCommit(job.step, job.attempt)
	}
	tbl, err := txn.Commit(ctx)
	if tbl != nil {
		if err != nil {
			c.log.Warn("cleanup after a maintenance commit failed", zap.String("step", job.step), zap.Error(err))
		}
		return jobResult{tbl: tbl, head: head, sent: true}
	}
	return jobResult{head: head, sent: true, err: err}
}

// bounded derives the context of one maintenance commit attempt: cfg.CommitTimeout bounds it, so
// that a catalog or store that never answers cannot hold the writer that runs the job, nor the
// maintainer, past it.
func bounded(ctx context.Context, cfg Config) (context.Context, context.CancelFunc) {
	if cfg.CommitTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, cfg.CommitTimeout)
}

// runJob runs a commit job between two commits of the table's writer when the writer is
// committing (it then never conflicts with the writer and the writer continues from the result),
// and here, on the newest table, when the writer is quiet or does not take the job in time.
func (c *committer) runJob(ctx context.Context, job *commitJob) jobResult {
	wait := time.Duration(c.handoffWait.Load())
	active := time.Since(time.Unix(0, c.writerCommit.Load())) < wait
	if wait <= 0 || !active {
		return c.execute(ctx, job, nil)
	}
	c.slot.Store(job)
	select {
	case c.filled <- struct{}{}:
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case res := <-job.done:
		return res
	case <-timer.C:
	case <-ctx.Done():
	}
	if !c.slot.CompareAndSwap(job, nil) {
		return <-job.done // the writer took it
	}
	if ctx.Err() != nil {
		return jobResult{err: ctx.Err()}
	}
	return c.execute(ctx, job, nil)
}

// committed is how a maintenance commit ended.
type committed struct {
	tbl  *table.Table // the committed table
	head *table.Table // the table the last attempt was staged on
	sent int          // commit requests sent
}

// commit stages a maintenance change on the newest table, renews the lease in the same
// transaction and commits through commit.Run, restaging after losing to another commit and
// yielding to the writers between attempts. Each attempt is a job the writer may run (runJob),
// which brings its own head: the loop reloads nothing. stage may return errNothingToDo,
// errAlreadyCommitted or errSuperseded; commit then returns that error at once, as it does any
// staging error and a lost lease.
func (c *committer) commit(ctx context.Context, step string, props iceberg.Properties, stage stageFunc) (committed, error) {
	return c.commitJob(ctx, step, props, commitJob{stage: stage})
}

// commitDirect is commit for a change that direct stages and commits itself.
func (c *committer) commitDirect(ctx context.Context, step string, direct directFunc) (committed, error) {
	return c.commitJob(ctx, step, nil, commitJob{direct: direct})
}

// commitThenMore is commit for a change that another commit follows as soon as it has landed
// (the first of a conversion's two): the writer that runs it waits briefly for the next one
// (commitJob.followUp).
func (c *committer) commitThenMore(ctx context.Context, step string, props iceberg.Properties, stage stageFunc) (committed, error) {
	return c.commitJob(ctx, step, props, commitJob{stage: stage, followUp: true})
}

// commitJob commits the change of kind (its stage or direct, and followUp) as commit does.
func (c *committer) commitJob(ctx context.Context, step string, props iceberg.Properties, kind commitJob) (committed, error) {
	var out committed
	// Each attempt is a job that brings its own table; on demand the loop reloads too, so that it
	// recognises a lost race (the table moved) and re-stages it soon without counting it.
	reload := func(context.Context) (*table.Table, error) { return nil, nil }
	if c.onDemand {
		reload = func(ctx context.Context) (*table.Table, error) { return c.cat.LoadTable(ctx, c.ident) }
	}
	res, err := commit.Run(ctx, c.cat, c.ident, nil, commit.Policy{Retries: c.cfg.CommitRetries, Yield: !c.onDemand}, commit.Op{
		Name: step,
		Stage: func(ctx context.Context, _ *table.Table, attempt int) (*table.Table, error) {
			now := time.Now()
			if !c.lease.ignore && !c.lease.holds(now) {
				return nil, commit.Permanent(errLeaseLost)
			}
			p := maps.Clone(props)
			if p == nil {
				p = iceberg.Properties{}
			}
			until := now.Add(c.cfg.LeaseDuration)
			if !c.lease.ignore {
				maps.Copy(p, c.lease.props(until))
			}
			r := c.runJob(ctx, &commitJob{step: step, props: p, stage: kind.stage, direct: kind.direct, attempt: attempt,
				done: make(chan jobResult, 1), followUp: kind.followUp})
			out.head = r.head
			if r.sent {
				out.sent++
			}
			if r.err == nil {
				if !c.lease.ignore {
					c.lease.set(until)
				}
				return r.tbl, nil
			}
			if !r.sent {
				return nil, commit.Permanent(r.err)
			}
			return nil, r.err
		},
		Reload: reload,
		Failed: func(attempt int, err, _ error) {
			c.log.Info("maintenance commit lost to another commit; restaging on the newest table",
				zap.String("step", step), zap.Int("attempt", attempt+1), zap.Error(err))
		},
	})
	out.tbl = res.Table
	return out, err
}
