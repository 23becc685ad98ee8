package maintenance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

func TestLeaseAllowsOneMaintainer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(10)
	ctx := context.Background()
	cfgA, cfgB := testConfig(), testConfig()
	cfgA.Owner, cfgB.Owner = "a", "b"
	a, b := testMaintainer(t, h.cat, cfgA), testMaintainer(t, h.cat, cfgB)

	stale := loadUsers(t, h.cat) // what b read before a acquired
	if !a.Lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("a could not acquire a free lease")
	}
	if b.Lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b acquired a lease a holds")
	}
	// b decided on a version that showed the lease free; a's acquisition landed in between. b's
	// commit succeeds (property changes are not checked by the catalog) but its validation finds
	// a's live lease in the versions it skipped, so b backs off.
	ok, err := b.AcquireOn(ctx, stale, time.Now())
	if err != nil || ok {
		t.Fatalf("racing acquisition: ok=%v err=%v; want it refused", ok, err)
	}
	if !a.Holds(time.Now()) {
		t.Fatal("a lost its lease to a refused acquisition")
	}
	// The table now shows b's stray record; neither b nor a third worker treats it as free.
	if b.Lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b took its own refused record for a lease")
	}
	// a keeps maintaining and its commits rewrite the record.
	m.batch(1, 10)
	if _, err := a.Maintain(ctx, maintenance.CompactOnly); err != nil {
		t.Fatal(err)
	}
	if owner, _ := maintenance.ReadLease(loadUsers(t, h.cat).Properties()); owner != a.Owner() {
		t.Fatalf("lease owner %q after a's maintenance, want %q", owner, a.Owner())
	}
	// a dies: its lease ends (simulated by an expired record); b takes over.
	a.SetLease(time.Time{})
	txn := loadUsers(t, h.cat).NewTransaction()
	if err := txn.SetProperties(a.LeaseProps(time.Now().Add(-time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.Lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("b could not take over an expired lease")
	}
	if a.Lease(ctx, loadUsers(t, h.cat)) {
		t.Fatal("a acquired b's lease")
	}
	// A run of a maintainer that lost its lease stops before committing anything.
	a.SetLease(time.Time{})
	if _, err := a.Maintain(ctx, maintenance.ExpireAndManifests); err != nil && !errors.Is(err, maintenance.ErrLeaseLost) {
		t.Fatal(err)
	}
	if _, err := maintenance.RunTable(ctx, h.cat, usersIdent, cfgA, maintenance.RunOptions{SkipOrphans: true}); !errors.Is(err, maintenance.ErrLeaseHeld) {
		t.Fatalf("RunTable while b holds the lease: %v, want ErrLeaseHeld", err)
	}
	h.close()
}

// A run longer than the lease keeps the lease: it is renewed in the background, so a big
// compaction is not abandoned at its commit.
// Not parallel: it measures renewals against a 3 s lease, which other tests on the same cores
// would slow.
func TestLeaseRenewedDuringLongRun(t *testing.T) {
	dir := t.TempDir()
	h, m := seeded(t, dir, 50, 1)
	cfg := testConfig()
	// The run outlasts 2.5 leases, so it only succeeds if the lease is renewed meanwhile. The lease
	// is long against one renewal commit (which took up to 1.7 s on a loaded 2-core machine), so
	// the test measures renewal, not the machine's speed.
	cfg.LeaseDuration = 3 * time.Second
	mt := testMaintainer(t, h.cat, cfg)
	mt.AfterRewrite(func() { time.Sleep(7500 * time.Millisecond) })
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil || !rep.Compacted {
		t.Fatalf("long compaction: %v, %+v", err, rep)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}
