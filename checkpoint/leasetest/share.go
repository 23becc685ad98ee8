package leasetest

import (
	"errors"
	"testing"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// The lease-balancing part of the contract (checkpoint/share.go).

func notAcquired(t *testing.T, s Store, shard, owner string) {
	t.Helper()
	if err := s.GetLease(status(shard, "", ""), owner); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("%s's GetLease of %s = %v, want ErrLeaseNotAcquired", owner, shard, err)
	}
}

// reservedToTaker: a lease its owner reserved for C and released is taken by C only, and C's
// acquisition removes the reservation.
func reservedToTaker(t *testing.T, tbl Table, shard string) {
	a, b, c := tbl.Worker(t, "A"), tbl.Worker(t, "B"), tbl.Worker(t, "C")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := a.Reserve(t.Context(), shard, e, "C", until); err != nil {
		t.Fatal(err)
	}
	if r := row(t, a, shard); r.HandoffTo != "C" || !r.HandoffUntil.Equal(until) || r.Owner != "A" || r.Epoch != e {
		t.Fatalf("row after the reservation: %+v", r)
	}
	mustCheckpoint(t, a, shard, e, "200") // the owner still checkpoints while it drains
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatal(err)
	}
	notAcquired(t, b, shard, "B")
	ec := take(t, c, shard, "C")
	if ec != e+1 {
		t.Fatalf("C's epoch %d, want %d", ec, e+1)
	}
	if r := row(t, c, shard); r.HandoffTo != "" || !r.HandoffUntil.IsZero() || r.Owner != "C" || r.Checkpoint != "200" {
		t.Fatalf("row after C took the reserved lease: %+v, want the reservation removed and the checkpoint kept", r)
	}
	refused(t, a, shard, e, "300", checkpoint.ErrFenced)
}

// onlyOwnerReserves: a reservation is written only by the owner under its epoch, never on a
// finished shard.
func onlyOwnerReserves(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	until := time.Now().Add(time.Hour)
	if err := a.Reserve(t.Context(), shard, 1, "B", until); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("a reservation without a lease: %v", err)
	}
	e := take(t, a, shard, "A")
	if err := b.Reserve(t.Context(), shard, e, "B", until); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("B reserved A's lease: %v", err)
	}
	if err := a.Reserve(t.Context(), shard, e+1, "B", until); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("A reserved under another epoch: %v", err)
	}
	mustCheckpoint(t, a, shard, e, checkpoint.ShardEnd)
	if err := a.Reserve(t.Context(), shard, e, "B", until); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("A reserved a finished shard: %v", err)
	}
	if r := row(t, a, shard); r.HandoffTo != "" {
		t.Fatalf("row after refused reservations: %+v", r)
	}
}

// expiredReservation: once its deadline passed, a reservation no longer keeps others out.
func expiredReservation(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	if err := a.Reserve(t.Context(), shard, e, "C", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatal(err)
	}
	if got := take(t, b, shard, "B"); got != e+1 {
		t.Fatalf("B's epoch %d, want %d", got, e+1)
	}
}

// releasedRenewal: a renewal of a lease the balance releases fails on purpose (the KCL then ends
// the consumer and releases); the row is left alone until the release, which counts a hand-off.
func releasedRenewal(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	bal := checkpoint.NewBalance("A", time.Hour)
	a.WithBalance(bal)
	sh := status(shard, "", "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	e := a.Epoch(shard)
	before := row(t, a, shard)
	bal.Release(shard)
	if err := a.GetLease(sh, "A"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("renewal of a released lease = %v, want ErrLeaseNotAcquired", err)
	}
	if r := row(t, a, shard); r.Owner != "A" || r.Epoch != e || r.LeaseTimeoutText != before.LeaseTimeoutText {
		t.Fatalf("row after the refused renewal: %+v, want it unchanged", r)
	}
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatal(err)
	}
	if r := row(t, a, shard); r.Owner != "" || bal.Handoffs() != 1 || bal.Releasing(shard) {
		t.Fatalf("after the release: row %+v, hand-offs %d, releasing %v", r, bal.Handoffs(), bal.Releasing(shard))
	}
	// A release asked for a lease whose consumer had already ended (the KCL released it
	// without a renewal) does not make a later lease of the shard fail its renewals.
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	bal.Release(shard)
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatal(err)
	}
	bal.Release(shard) // asked once more, too late
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatalf("a new acquisition after a late release request: %v", err)
	}
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatalf("the renewal of the new lease: %v", err)
	}
}

// presence: a worker's presence row is in the scan (as a presence row, never as a shard) until
// withdrawn.
func presence(t *testing.T, tbl Table, shard string) {
	w := "worker-" + shard
	a := tbl.Worker(t, w)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := a.Announce(t.Context(), until); err != nil {
		t.Fatal(err)
	}
	found := func() (checkpoint.LeaseRow, bool) {
		rows, err := a.Rows(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Worker == w {
				return r, true
			}
		}
		return checkpoint.LeaseRow{}, false
	}
	r, ok := found()
	if !ok || r.Shard != "" || !r.WorkerUntil.Equal(until) || r.Owner != "" {
		t.Fatalf("presence row %+v (found %v), want worker %s until %v and no shard", r, ok, w, until)
	}
	if err := a.Withdraw(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, ok := found(); ok {
		t.Fatalf("presence row after the withdrawal: %+v", r)
	}
}

// aboveShare: with two open shards and two live workers, a worker holding one refuses the other
// (the share), and takes it once the other worker is gone.
func aboveShare(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	bal := checkpoint.NewBalance("A", time.Hour)
	a.WithBalance(bal)
	s1, s2 := shard+"-1", shard+"-2"
	now := time.Now()
	other := checkpoint.LeaseRow{Exists: true, Worker: "B", WorkerUntil: now.Add(time.Hour)}
	bal.Observe(checkpoint.Snapshot{Now: now, Open: []string{s1, s2}, Rows: []checkpoint.LeaseRow{other}})
	take(t, a, s1, "A")
	notAcquired(t, a, s2, "A")
	if bal.Refusals() != 1 {
		t.Fatalf("refusals %d, want 1", bal.Refusals())
	}
	if r := row(t, a, s2); r.Exists {
		t.Fatalf("a refused acquisition wrote the row %+v", r)
	}
	bal.Observe(checkpoint.Snapshot{Now: time.Now(), Open: []string{s1, s2}})
	take(t, a, s2, "A")
}
