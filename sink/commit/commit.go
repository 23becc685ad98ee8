package commit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Loader loads the newest version of a table; catalog.Catalog satisfies it.
type Loader interface {
	LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error)
}

// Policy says how often and how long a commit is tried.
type Policy struct {
	// Retries bounds the failed attempts after the first; a lost race (another commit moved the
	// table) counts only when Yield is set, and nothing counts while Closing says true.
	Retries int
	// Closing reports whether the committer is in the final flush of a graceful stop: it then
	// keeps trying until its context ends (shutdown_timeout bounds it), with shorter waits,
	// since giving up would only leave the records for the next owner to read again. Nil: never.
	Closing func() bool
	// Yield makes every wait the long, capped backoff, for commits that should give way to the
	// table writers (maintenance).
	Yield bool
	// AttemptTimeout bounds each attempt (Stage) and each reload after one; 0: only ctx bounds
	// them. iceberg-go's REST client and the AWS SDK set no request timeout of their own, so a
	// catalog or store that accepts a request and never answers would hold the committer until
	// ctx ends. An attempt past the timeout is a failed attempt whose outcome is unknown: the
	// reload and Reloaded tell whether it landed, as after any other error.
	AttemptTimeout time.Duration
}

// bounded returns ctx bounded by the policy's attempt timeout.
func (p Policy) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.AttemptTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.AttemptTimeout)
}

// Op is one kind of commit.
type Op struct {
	// Name is used in errors: "commit shop.orders", "add columns to shop.orders".
	Name string
	// Stage stages the change on tbl (the newest table the loop has) and commits it. It returns
	// the committed table, or nil and nil when there is nothing left to commit (the table
	// already holds everything). An error marked with ErrPermanent (Permanent) is not retried.
	Stage func(ctx context.Context, tbl *table.Table, attempt int) (*table.Table, error)
	// Reload loads the table after a failed attempt; nil uses the Loader given to Run.
	Reload func(ctx context.Context) (*table.Table, error)
	// Reloaded is told of every table reloaded after a failed attempt, before the next one: the
	// caller adopts it and re-checks what the table already holds (watermarks, control
	// staleness). It returns done when the reloaded table already holds the whole change (a
	// commit whose outcome was unknown did land, or another worker committed the same records);
	// the loop then ends without error. An error from it ends the loop.
	Reloaded func(tbl *table.Table) (done bool, err error)
	// Failed is told of every failed attempt (metrics, logs); reloadErr is the error of the
	// reload that followed it, if any. Optional.
	Failed func(attempt int, err, reloadErr error)
	// Resolved is told, once each, how the attempts whose outcome was unknown (UnknownOutcome)
	// were resolved: when a reload tells (OutcomeLanded or OutcomeAnotherWriter when Reloaded
	// says the table holds the change, OutcomeNotLanded when it does not), or when a later
	// attempt commits (OutcomeNotLanded: it was staged on the same head, so it would have lost
	// the race). Unknown outcomes still unresolved when the loop ends with an error are not
	// reported. Only meaningful with Reloaded, and only for Stage functions that mark the error
	// of their commit request with Sent. Optional.
	Resolved func(Outcome)
	// Mine tells, after an unknown outcome, whether the change fresh already holds was committed
	// by this loop (an attempt that landed while its answer was lost) rather than by another
	// writer; since is the table the first unresolved attempt was staged on. See CommittedBy.
	// Nil: every such change counts as this loop's.
	Mine func(since, fresh *table.Table) bool
}

// Outcome is how an attempt whose outcome was unknown was resolved (Op.Resolved).
type Outcome string

// The outcomes of Op.Resolved.
const (
	// OutcomeLanded: the attempt took effect; the loop ends without another.
	OutcomeLanded Outcome = "landed"
	// OutcomeNotLanded: it did not; the loop tries again.
	OutcomeNotLanded Outcome = "not_landed"
	// OutcomeAnotherWriter: the table holds the change, committed by another writer (another
	// worker that read the same records); the loop ends.
	OutcomeAnotherWriter Outcome = "another_writer"
)

// UnknownOutcome reports whether a failed attempt's outcome is unknown: its commit request was
// sent (ErrSent) and failed without a definite answer — a lost or reset response, a timeout, a
// 5xx. A definite refusal is not: a lost race (table.ErrCommitFailed, a failed requirement, as
// the SQL and Glue catalogs report it), a permanent error, a cancelled context.
func UnknownOutcome(err error) bool {
	if err == nil || !errors.Is(err, ErrSent) || errors.Is(err, ErrPermanent) || errors.Is(err, context.Canceled) ||
		errors.Is(err, table.ErrCommitFailed) {
		return false
	}
	return !strings.Contains(strings.ToLower(err.Error()), "requirement failed")
}

// CommittedBy reports whether a snapshot committed after since (the table an attempt was staged
// on; nil: any) and an ancestor of the head of one of fresh's branches (main, or a reload's
// staging branch) carries token under tableprop.SummaryCommit: the commit that wrote token
// landed.
func CommittedBy(since, fresh *table.Table, token string) bool {
	if token == "" {
		return false
	}
	for name, ref := range fresh.Metadata().Refs() {
		if ref.SnapshotRefType != table.BranchRef {
			continue
		}
		stop := int64(-1)
		if since != nil {
			for n, r := range since.Metadata().Refs() {
				if n == name {
					stop = r.SnapshotID
				}
			}
		}
		for _, s := range table.AncestorsOf(ref.SnapshotID, fresh.Metadata().SnapshotByID) {
			if s.SnapshotID == stop {
				break
			}
			if s.Summary != nil && s.Summary.Properties[tableprop.SummaryCommit] == token {
				return true
			}
		}
	}
	return false
}

// NewToken returns a random commit token for CommittedBy.
func NewToken() string {
	return strconv.FormatUint(rand.Uint64(), 16)
}

// Result says how a Run ended.
type Result struct {
	// Table is the committed table, or nil when nothing was committed.
	Table *table.Table
	// Attempts counts the calls of Stage.
	Attempts int
	// Landed is true when the loop ended because Reloaded said the table already holds the change.
	Landed bool
}

// Run commits op on tbl (which may be nil when Stage loads its own), reloading and re-staging
// after each failure as Policy says. See the package comment.
func Run(ctx context.Context, cat Loader, ident table.Identifier, tbl *table.Table, p Policy, op Op) (Result, error) {
	l := &loop{ident: ident, p: p, op: op, reload: op.Reload, head: tbl}
	if l.reload == nil {
		l.reload = func(ctx context.Context) (*table.Table, error) { return cat.LoadTable(ctx, ident) }
	}
	for attempt := 0; ; attempt++ {
		if err := l.checkHead(); err != nil {
			return Result{Attempts: attempt}, err
		}
		committed, err := l.stage(ctx, attempt)
		if err == nil {
			l.resolve(OutcomeNotLanded)
			return Result{Table: committed, Attempts: attempt + 1}, nil
		}
		if ctx.Err() != nil {
			return Result{Attempts: attempt + 1}, ctx.Err()
		}
		if errors.Is(err, ErrPermanent) {
			return Result{Attempts: attempt + 1}, err
		}
		conflict, done, rerr := l.reloadAfter(ctx, attempt, err)
		if rerr != nil {
			return Result{Attempts: attempt + 1}, rerr
		}
		if done {
			return Result{Attempts: attempt + 1, Landed: true}, nil
		}
		if err := l.wait(ctx, attempt, conflict, err); err != nil {
			return Result{Attempts: attempt + 1}, err
		}
	}
}

// loop is the state of one Run between its attempts.
type loop struct {
	ident  table.Identifier
	p      Policy
	op     Op
	reload func(ctx context.Context) (*table.Table, error)
	// head is the newest table the loop has: the next attempt is staged on it.
	head *table.Table
	// failures counts the attempts that count against Retries.
	failures int
	// unknown counts the attempts whose outcome is unknown and not yet resolved (a reload after
	// them failed); since is the table the first of them was staged on.
	unknown int
	since   *table.Table
}

// checkHead refuses, with a permanent error, a head that a newer state version of dms2iceberg
// wrote: such a table is never committed to.
func (l *loop) checkHead() error {
	if l.head == nil {
		return nil
	}
	if err := tableprop.CheckStateVersion(strings.Join(l.ident, "."), l.head.Properties()); err != nil {
		return Permanent(fmt.Errorf("%s: %w", l.op.Name, err))
	}
	return nil
}

// stage makes one attempt on the head, bounded by the attempt timeout.
func (l *loop) stage(ctx context.Context, attempt int) (*table.Table, error) {
	if err := ReplayGuard(l.head); err != nil {
		return nil, err
	}
	actx, cancel := l.p.bounded(ctx)
	defer cancel()
	return l.op.Stage(actx, l.head, attempt)
}

// reloadAfter reloads the table after the failed attempt (err), adopts it as the head and tells
// the caller (Op.Failed, Op.Reloaded). conflict tells whether the attempt lost a race; done that
// the reloaded table already holds the change. A failed reload is no error: the next attempt is
// staged on the head the loop has. The error is Op.Reloaded's.
func (l *loop) reloadAfter(ctx context.Context, attempt int, err error) (conflict, done bool, _ error) {
	conflict = errors.Is(err, table.ErrCommitFailed)
	if UnknownOutcome(err) {
		if l.unknown == 0 {
			l.since = l.head
		}
		l.unknown++
	}
	rctx, cancel := l.p.bounded(ctx)
	fresh, rerr := l.reload(rctx)
	cancel()
	if l.op.Failed != nil {
		l.op.Failed(attempt, err, rerr)
	}
	if rerr != nil || fresh == nil {
		return conflict, false, nil
	}
	// The SQL and Glue catalogs report most lost races as a failed requirement ("branch main has
	// changed") without table.ErrCommitFailed: a table that moved since the attempt was staged is
	// the reliable sign.
	conflict = conflict || Moved(l.head, fresh)
	l.head = fresh
	if l.op.Reloaded == nil {
		return conflict, false, nil
	}
	done, cerr := l.op.Reloaded(fresh)
	if cerr != nil {
		return conflict, false, cerr
	}
	switch {
	case done && l.unknown > 0 && l.op.Mine != nil && !l.op.Mine(l.since, fresh):
		l.resolve(OutcomeAnotherWriter)
	case done:
		l.resolve(OutcomeLanded)
	default:
		l.resolve(OutcomeNotLanded)
	}
	return conflict, done, nil
}

// resolve tells Op.Resolved how the attempts whose outcome was unknown were resolved: the last
// of them as o, the earlier ones as not landed.
func (l *loop) resolve(o Outcome) {
	for ; l.unknown > 0; l.unknown-- {
		if l.op.Resolved != nil {
			// At most one of them landed: each later one was staged on the same head.
			if l.unknown > 1 {
				l.op.Resolved(OutcomeNotLanded)
			} else {
				l.op.Resolved(o)
			}
		}
	}
}

// wait counts the failed attempt (err) against Retries and waits before the next one, or gives
// up when the attempts ran out.
func (l *loop) wait(ctx context.Context, attempt int, conflict bool, err error) error {
	// A lost race proves the catalog works and another writer made progress: it counts against
	// Retries only for commits that yield (maintenance). A table writer keeps re-staging, since
	// giving up would stop the service while every other worker is fine.
	if !conflict || l.p.Yield {
		l.failures++
	}
	closing := l.p.Closing != nil && l.p.Closing()
	if l.failures > l.p.Retries && !closing {
		return fmt.Errorf("%s: giving up after %d attempts: %w", l.op.Name, attempt+1, err)
	}
	wait := RetryDelay(attempt, conflict, closing)
	if l.p.Yield {
		wait = Backoff(attempt)
	}
	return Sleep(ctx, wait)
}

// ReplayGuard refuses to commit on tbl (nil: not loaded yet) when its commit.retry.num-retries
// property is above 0. iceberg-go v0.7.0 reads that property from the table it commits on and,
// after a lost race, replays the staged updates on the newer table by itself: the watermark
// properties and the maintenance lease would be written over another writer's without the
// re-check that keeps ingestion exactly-once (design.md §3.1). Without the property iceberg-go
// does not retry and Spark and Glue keep their own default (4 retries), so dms2iceberg neither
// sets it nor accepts it; the error names the property so that an operator can remove it, and the
// commit is tried again after the usual wait.
func ReplayGuard(tbl *table.Table) error {
	if tbl == nil {
		return nil
	}
	v, ok := tbl.Properties()[table.CommitNumRetriesKey]
	if n, err := strconv.ParseUint(v, 10, 64); !ok || err == nil && n == 0 {
		return nil
	}
	return fmt.Errorf("table property %s=%q makes iceberg-go replay a commit that lost a race without dms2iceberg's exactly-once re-check: "+
		"remove the property (Spark and Glue then retry 4 times by default) or set it to 0", table.CommitNumRetriesKey, v)
}

// Moved reports whether fresh is a later version of the table than old: another commit landed
// since old was loaded.
func Moved(old, fresh *table.Table) bool {
	return old == nil || fresh.MetadataLocation() != old.MetadataLocation()
}

// Backoff is the capped, jittered exponential wait before attempt+1 of work that failed for
// reasons other than losing a race to another writer (catalog or storage trouble, unknown
// outcomes), and of maintenance commits, which yield to the writers: 25–50 ms growing to 10–20 s.
func Backoff(attempt int) time.Duration { return jitter(50*time.Millisecond, attempt, 20*time.Second) }

// RetryDelay is the wait before re-staging a commit that failed, conflict telling whether it
// lost a race to another commit.
//
// A conflict (another writer moved the table first) is retried soon: the loser only has to
// re-stage on the new head, and every longer wait lets more commits land before it, so under
// contention an exponential wait made single commits take tens of seconds (a graceful stop
// overran shutdown_timeout that way). Conflicts wait 10–20 ms growing to 0.5–1 s; other failures
// use Backoff. While the committer is closing, both are capped lower (250 ms and 2 s) so that the
// final commit keeps trying within shutdown_timeout.
func RetryDelay(attempt int, conflict, closing bool) time.Duration {
	switch {
	case conflict && closing:
		return jitter(20*time.Millisecond, attempt, 250*time.Millisecond)
	case conflict:
		return jitter(20*time.Millisecond, attempt, time.Second)
	case closing:
		return jitter(50*time.Millisecond, attempt, 2*time.Second)
	}
	return Backoff(attempt)
}

// jitter returns a random wait in [d/2, d] for d = base doubled attempt times, at most limit.
func jitter(base time.Duration, attempt int, limit time.Duration) time.Duration {
	d := base << min(attempt, 16)
	if d > limit || d <= 0 {
		d = limit
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
