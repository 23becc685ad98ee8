package membudget

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// acquired runs Acquire on its own goroutine and returns a channel that receives its result.
func acquired(ctx context.Context, a *Account, n int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- a.Acquire(ctx, n) }()
	return ch
}

// A reader blocks while the budget is spent and resumes when another reader's bytes are
// released; the pressure callback is told what is missing.
func TestAcquireBlocksAtTheLimitAndResumes(t *testing.T) {
	t.Parallel()
	b := New(100)
	pressed := make(chan int64, 16)
	b.OnPressure(func(need int64) {
		select {
		case pressed <- need:
		default:
		}
	})
	one, two := b.Account(), b.Account()
	if err := one.Acquire(t.Context(), 80); err != nil {
		t.Fatal(err)
	}
	if err := two.Acquire(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	done := acquired(t.Context(), two, 30) // 80+10+30 > 100, and two holds 10: it waits
	if need := <-pressed; need != 20 {
		t.Fatalf("pressure asked for %d bytes, want 20", need)
	}
	select {
	case err := <-done:
		t.Fatalf("admitted past the budget (err %v); held %d", err, b.Held())
	default:
	}
	one.Release(80)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := b.Held(); got != 40 {
		t.Fatalf("held %d, want 40", got)
	}
	if b.Waits() != 1 {
		t.Fatalf("waits %d, want 1", b.Waits())
	}
}

// A reader that holds nothing is always admitted (the per-reader minimum), even with the
// budget spent by others and even for more than the whole budget.
func TestEmptyAccountIsAlwaysAdmitted(t *testing.T) {
	t.Parallel()
	b := New(100)
	other, a := b.Account(), b.Account()
	if err := other.Acquire(t.Context(), 100); err != nil {
		t.Fatal(err)
	}
	if err := a.Acquire(t.Context(), 1000); err != nil { // bigger than the budget, nothing held
		t.Fatal(err)
	}
	if got := b.Held(); got != 1100 {
		t.Fatalf("held %d, want 1100", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := acquired(ctx, a, 1) // a holds bytes now: it waits like anyone
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait returned %v", err)
	}
	if got := a.Held(); got != 1000 {
		t.Fatalf("a cancelled wait admitted bytes: account holds %d", got)
	}
	a.Release(1000)
	other.Release(100)
	if b.Held() != 0 {
		t.Fatalf("held %d after every release", b.Held())
	}
}

// An Ack acknowledges its event and releases its bytes once.
func TestAckReleases(t *testing.T) {
	t.Parallel()
	b := New(10)
	a := b.Account()
	if err := a.Acquire(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	var inner countAck
	k := &Ack{Inner: &inner, Account: a, N: 7}
	k.Done(1)
	if inner != 1 || b.Held() != 0 {
		t.Fatalf("inner acknowledged %d times, held %d", inner, b.Held())
	}
	var none *Account // no budget: everything passes
	if err := none.Acquire(t.Context(), 1<<40); err != nil {
		t.Fatal(err)
	}
	(&Ack{Inner: &inner}).Done(1)
}

type countAck int

func (c *countAck) Done(n int) { *c += countAck(n) }

// An exempt account is admitted past the budget; a waiting one is admitted as soon as it
// becomes exempt.
func TestExemptAccountIsAdmitted(t *testing.T) {
	t.Parallel()
	b := New(10)
	a := b.Account()
	var mu sync.Mutex
	exempt := false
	ch := make(chan struct{})
	a.SetExempt(func() bool { mu.Lock(); defer mu.Unlock(); return exempt },
		func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return ch })
	if err := a.Acquire(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	done := acquired(t.Context(), a, 5)
	select {
	case err := <-done:
		t.Fatalf("admitted past the budget while not exempt (err %v)", err)
	default:
	}
	mu.Lock()
	exempt = true
	close(ch)
	ch = make(chan struct{})
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.Held() != 15 {
		t.Fatalf("held %d, want 15", b.Held())
	}
}

type noterAck struct{ moved, noKey int }

func (a *noterAck) Done(int)        {}
func (a *noterAck) MovesKey(uint64) { a.moved++ }
func (a *noterAck) MovesNoKey()     { a.noKey++ }

// The accounting wrapper passes what the table writer tells of a key change on to the tracker's
// acknowledger: without it, every possible key change stays a move of an unknown key.
func TestAckPassesKeyChangesOn(t *testing.T) {
	inner := &noterAck{}
	var a change.Acker = &Ack{Inner: inner}
	n, ok := a.(change.KeyChangeNoter)
	if !ok {
		t.Fatal("the wrapper is not a KeyChangeNoter")
	}
	n.MovesKey(5)
	n.MovesNoKey()
	if inner.moved != 1 || inner.noKey != 1 {
		t.Fatalf("passed on %d moves and %d no-moves, want 1 and 1", inner.moved, inner.noKey)
	}
	(&Ack{Inner: nil}).MovesKey(1) // no inner acknowledger: nothing to tell
}
