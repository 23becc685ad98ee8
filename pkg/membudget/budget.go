// Package membudget owns the process-wide byte budget of records read and not yet finished
// (docs/design.md §8): the shard readers admit each delivery's bytes before handing it to the
// sink and block while the budget is spent; the bytes come back when each event is finished
// (committed and acknowledged, dead-lettered, or acknowledged as a replay, duplicate or
// filtered record). What is counted is the raw size of the Kinesis records (their data), a proxy
// for what the process holds for them: the event decoded from it, its queue slot and its
// buffered row, until the event is acknowledged.
//
// Admission rule: a delivery is admitted when it fits in what is left of the budget, when the
// reading account holds nothing (the per-reader minimum: a single delivery larger than the
// whole budget passes, and the budget is exceeded by at most one delivery per reader), or while
// the account is exempt (Account.SetExempt: the consumer exempts the shard that holds the
// ordering guard's watermark back, whose reading is what lets everything else commit; see
// design.md §8).
//
// Concurrency: a Budget and its Accounts are safe for concurrent use; Acquire blocks the calling
// reader, Release (usually through an Ack, from a table writer's goroutine) never blocks.
package membudget

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// DefaultLimit is the default budget: 128 MiB of raw records (with 64 KiB records the process
// peaks at several times this: docs/benchmarks.md "Many tables").
const DefaultLimit = 128 << 20

// pressureEvery is how often a blocked reader asks for relief again while it waits.
const pressureEvery = 250 * time.Millisecond

// Budget is the process-wide byte budget.
type Budget struct {
	limit int64

	mu   sync.Mutex
	held int64
	// wake is closed (and cleared) by the next release while readers wait; nil when none wait.
	wake chan struct{}

	// heldNow mirrors held for lock-free reads; blocked sums the time readers waited (ns);
	// waits counts the admissions that had to wait.
	heldNow, blocked, waits atomic.Int64
	// pressure is told, with the bytes missing, when a reader has to wait (OnPressure).
	pressure atomic.Pointer[func(need int64)]
}

// New returns a budget of limit bytes (limit > 0).
func New(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Budget{limit: limit}
}

// OnPressure sets the function told, without blocking the reader for long, that a reader waits
// for need more bytes: the sink flushes its biggest buffers early (sink.WithMemoryBudget). It is
// called again every pressureEvery while the reader still waits.
func (b *Budget) OnPressure(f func(need int64)) { b.pressure.Store(&f) }

// Limit is the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Held is the number of bytes admitted and not yet released.
func (b *Budget) Held() int64 { return b.heldNow.Load() }

// Blocked is the total time readers have waited for the budget.
func (b *Budget) Blocked() time.Duration { return time.Duration(b.blocked.Load()) }

// Waits counts the admissions that had to wait.
func (b *Budget) Waits() int64 { return b.waits.Load() }

// Account is one reader's share (one shard processor): what it admitted and not yet released.
// A nil *Account admits everything at once (no budget).
type Account struct {
	b    *Budget
	held int64 // guarded by b.mu
	// exempt, when set, admits everything while it returns true; changed wakes a waiting
	// Acquire to ask it again (SetExempt).
	exempt  func() bool
	changed func() <-chan struct{}
}

// SetExempt makes the account admit everything while exempt returns true (asked whenever the
// account would wait); changed (may be nil) returns a channel closed when exempt may have
// changed. Call it before the account is used.
func (a *Account) SetExempt(exempt func() bool, changed func() <-chan struct{}) {
	if a != nil {
		a.exempt, a.changed = exempt, changed
	}
}

// Account returns a new account of the budget.
func (b *Budget) Account() *Account {
	if b == nil {
		return nil
	}
	return &Account{b: b}
}

// Held is what the account holds.
func (a *Account) Held() int64 {
	if a == nil {
		return 0
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	return a.held
}

// Acquire admits n bytes: at once when they fit in the budget or the account holds nothing,
// else once releases make them fit. It returns ctx's error, admitting nothing, when ctx ends
// first.
func (a *Account) Acquire(ctx context.Context, n int64) error {
	if a == nil || n <= 0 {
		return nil
	}
	b := a.b
	var start time.Time
	var next time.Time
	for {
		var moved <-chan struct{}
		if a.changed != nil {
			moved = a.changed() // before asking exempt: a change after it closes this
		}
		free := a.exempt != nil && a.exempt()
		b.mu.Lock()
		if free || a.held == 0 || b.held+n <= b.limit {
			a.held += n
			b.held += n
			b.heldNow.Store(b.held)
			b.mu.Unlock()
			if !start.IsZero() {
				b.blocked.Add(int64(time.Since(start)))
			}
			return nil
		}
		need := b.held + n - b.limit
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		wake := b.wake
		b.mu.Unlock()
		now := time.Now()
		if start.IsZero() {
			start = now
			b.waits.Add(1)
		}
		if !now.Before(next) {
			next = now.Add(pressureEvery)
			if f := b.pressure.Load(); f != nil {
				(*f)(need)
			}
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-wake:
		case <-moved:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			b.blocked.Add(int64(time.Since(start)))
			return ctx.Err()
		}
		t.Stop()
	}
}

// Release gives n bytes the account admitted back, waking the readers that wait.
func (a *Account) Release(n int64) {
	if a == nil || n <= 0 {
		return
	}
	b := a.b
	b.mu.Lock()
	a.held -= n
	b.held -= n
	if a.held < 0 || b.held < 0 {
		b.mu.Unlock()
		panic("membudget: released more than was admitted")
	}
	b.heldNow.Store(b.held)
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}

// Ack is the acknowledgement of one event that holds N bytes of an account: Done acknowledges
// the event (Inner) and releases the bytes. Readers keep one slice of them per delivery.
type Ack struct {
	Inner   change.Acker
	Account *Account
	N       int64
}

var (
	_ change.Acker          = (*Ack)(nil)
	_ change.KeyChangeNoter = (*Ack)(nil)
)

// MovesKey passes what the table writer tells of a key change on to the inner acknowledger
// when it tracks it (change.KeyChangeNoter).
func (k *Ack) MovesKey(h uint64) {
	if n, ok := k.Inner.(change.KeyChangeNoter); ok {
		n.MovesKey(h)
	}
}

// MovesNoKey passes on that an update keeps its key (change.KeyChangeNoter).
func (k *Ack) MovesNoKey() {
	if n, ok := k.Inner.(change.KeyChangeNoter); ok {
		n.MovesNoKey()
	}
}

// Done acknowledges the event (n is 1: one acknowledgement per event) and releases its bytes.
func (k *Ack) Done(n int) {
	if k.Inner != nil {
		k.Inner.Done(n)
	}
	k.Account.Release(k.N)
}
