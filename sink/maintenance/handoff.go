package maintenance

import (
	"context"
	"fmt"
	"maps"
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

// followUpWait is the default of Maintainer.followUpWait: how long the writer, having run a maintenance commit that another follows at
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

// AfterCommit is called by the table's writer, on its goroutine, after each of its commits, with
// the committed table. It runs the maintenance commit waiting for the writer, if any, on that
// table (so the two never conflict) and passes the result to adopt; then it hands the newest
// table to the maintainer and wakes it. Without a waiting commit it does not block.
func (m *Maintainer) AfterCommit(ctx context.Context, tbl *table.Table, adopt func(*table.Table) error) {
	if m == nil || tbl == nil {
		return
	}
	m.writerCommit.Store(time.Now().UnixNano())
	for job := m.slot.Swap(nil); job != nil; {
		res := m.execute(ctx, job, tbl)
		if res.tbl != nil {
			if err := adopt(res.tbl); err == nil {
				tbl = res.tbl
			}
		}
		job.done <- res
		if !job.followUp || res.tbl == nil {
			break
		}
		job = m.awaitFollowUp(ctx)
	}
	m.latest.Store(tbl)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// awaitFollowUp waits at most m.followUpWait for the next job in the slot and takes it (nil: none
// came, or ctx ended).
func (m *Maintainer) awaitFollowUp(ctx context.Context) *commitJob {
	timer := time.NewTimer(m.followUpWait)
	defer timer.Stop()
	for {
		if job := m.slot.Swap(nil); job != nil {
			return job
		}
		select {
		case <-m.filled: // a job was put in the slot (or an earlier signal was left over)
		case <-timer.C:
			return m.slot.Swap(nil)
		case <-ctx.Done():
			return nil
		}
	}
}

// execute stages job on head (loaded from the catalog when nil) and commits it. It touches no
// mutable maintainer state, so the writer may run it.
func (m *Maintainer) execute(ctx context.Context, job *commitJob, head *table.Table) jobResult {
	ctx, cancel := m.bounded(ctx)
	defer cancel()
	if head == nil {
		var err error
		if head, err = m.cat.LoadTable(ctx, m.ident); err != nil {
			return jobResult{err: err, sent: true} // retryable, like a lost commit
		}
	}
	if err := tableprop.CheckStateVersion(m.name, head.Properties()); err != nil {
		return jobResult{head: head, err: err} // not sent: permanent
	}
	props := maps.Clone(job.props)
	if props == nil {
		props = iceberg.Properties{}
	}
	tableprop.Stamp(props, head.Properties())
	if job.direct != nil {
		if m.beforeCommit != nil {
			m.beforeCommit(job.step, job.attempt)
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
	if m.beforeCommit != nil {
		m.beforeCommit(job.step, job.attempt)
	}
	tbl, err := txn.Commit(ctx)
	if tbl != nil {
		if err != nil {
			m.log.Warn("cleanup after a maintenance commit failed", zap.String("step", job.step), zap.Error(err))
		}
		return jobResult{tbl: tbl, head: head, sent: true}
	}
	return jobResult{head: head, sent: true, err: err}
}

// bounded derives the context of one maintenance commit attempt: cfg.CommitTimeout bounds it, so
// that a catalog or store that never answers cannot hold the writer that runs the job, nor the
// maintainer, past it.
func (m *Maintainer) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.cfg.CommitTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, m.cfg.CommitTimeout)
}

// runJob runs a commit job between two commits of the table's writer when the writer is
// committing (it then never conflicts with the writer and the writer continues from the result),
// and here, on the newest table, when the writer is quiet or does not take the job in time.
func (m *Maintainer) runJob(ctx context.Context, job *commitJob) jobResult {
	wait := time.Duration(m.handoffWait.Load())
	active := time.Since(time.Unix(0, m.writerCommit.Load())) < wait
	if wait <= 0 || !active {
		return m.execute(ctx, job, nil)
	}
	m.slot.Store(job)
	select {
	case m.filled <- struct{}{}:
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
	if !m.slot.CompareAndSwap(job, nil) {
		return <-job.done // the writer took it
	}
	if ctx.Err() != nil {
		return jobResult{err: ctx.Err()}
	}
	return m.execute(ctx, job, nil)
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
func (m *Maintainer) commit(ctx context.Context, step string, props iceberg.Properties, stage stageFunc) (committed, error) {
	return m.commitJob(ctx, step, props, commitJob{stage: stage})
}

// commitDirect is commit for a change that direct stages and commits itself.
func (m *Maintainer) commitDirect(ctx context.Context, step string, direct directFunc) (committed, error) {
	return m.commitJob(ctx, step, nil, commitJob{direct: direct})
}

// commitThenMore is commit for a change that another commit follows as soon as it has landed
// (the first of a conversion's two): the writer that runs it waits briefly for the next one
// (commitJob.followUp).
func (m *Maintainer) commitThenMore(ctx context.Context, step string, props iceberg.Properties, stage stageFunc) (committed, error) {
	return m.commitJob(ctx, step, props, commitJob{stage: stage, followUp: true})
}

// commitJob commits the change of kind (its stage or direct, and followUp) as commit does.
func (m *Maintainer) commitJob(ctx context.Context, step string, props iceberg.Properties, kind commitJob) (committed, error) {
	var out committed
	// Each attempt is a job that brings its own table; on demand the loop reloads too, so that it
	// recognises a lost race (the table moved) and re-stages it soon without counting it.
	reload := func(context.Context) (*table.Table, error) { return nil, nil }
	if m.onDemand {
		reload = func(ctx context.Context) (*table.Table, error) { return m.cat.LoadTable(ctx, m.ident) }
	}
	res, err := commit.Run(ctx, m.cat, m.ident, nil, commit.Policy{Retries: m.cfg.CommitRetries, Yield: !m.onDemand}, commit.Op{
		Name: step,
		Stage: func(ctx context.Context, _ *table.Table, attempt int) (*table.Table, error) {
			now := time.Now()
			if !m.ignoreLease && !m.holds(now) {
				return nil, commit.Permanent(errLeaseLost)
			}
			p := maps.Clone(props)
			if p == nil {
				p = iceberg.Properties{}
			}
			until := now.Add(m.cfg.LeaseDuration)
			if !m.ignoreLease {
				maps.Copy(p, m.leaseProps(until))
			}
			r := m.runJob(ctx, &commitJob{step: step, props: p, stage: kind.stage, direct: kind.direct, attempt: attempt,
				done: make(chan jobResult, 1), followUp: kind.followUp})
			out.head = r.head
			if r.sent {
				out.sent++
			}
			if r.err == nil {
				if !m.ignoreLease {
					m.setLease(until)
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
			m.log.Info("maintenance commit lost to another commit; restaging on the newest table",
				zap.String("step", step), zap.Int("attempt", attempt+1), zap.Error(err))
		},
	})
	out.tbl = res.Table
	return out, err
}
