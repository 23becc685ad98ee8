package maintenance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Unit tests of the maintainer's parts on their own; the tests in maintenance_test drive them
// through a Maintainer on real tables.

func testMaintained() *maintained {
	cfg := DefaultConfig()
	cfg.Owner = "w1"
	cfg.LeaseDuration = time.Minute
	cfg.MinInterval = time.Second
	return &maintained{name: "shop.users", cfg: cfg, log: zap.NewNop(), metrics: orNop(nil)}
}

// A lease is held until a tenth of its duration before it ends; a live lease of another owner
// is foreign, this holder's own or an ended one is not.
func TestLeaseHolderHoldsAndRecognisesForeignLeases(t *testing.T) {
	t.Parallel()
	l := newLeaseHolder(testMaintained())
	now := time.Now()
	if l.holds(now) || !l.until().IsZero() {
		t.Fatal("a new holder holds a lease")
	}
	l.set(now.Add(time.Minute))
	if !l.holds(now) || l.holds(now.Add(55*time.Second)) {
		t.Fatal("want the lease held until 6s (a tenth of it) before it ends")
	}
	props := func(owner string, until time.Time) iceberg.Properties {
		return iceberg.Properties{tableprop.MaintenanceOwner: owner, tableprop.MaintenanceUntil: formatTime(until)}
	}
	if l.foreign(props(l.owner, l.until()), now) {
		t.Error("the holder's own lease is foreign")
	}
	if !l.foreign(props("w2#00", now.Add(time.Minute)), now) || l.heldByOther != "w2#00" {
		t.Error("another worker's live lease is not foreign")
	}
	if l.foreign(props("w2#00", now.Add(-time.Second)), now) {
		t.Error("an ended lease is foreign")
	}
	l.set(time.Time{})
	if l.holds(now) {
		t.Error("a released lease is held")
	}
	if other := newLeaseHolder(testMaintained()); other.owner == l.owner {
		t.Error("two holders of one process share an owner token")
	}
}

// Deferred lists are due once their time has come, by the clock tests may move.
func TestDeferredDeletesDue(t *testing.T) {
	t.Parallel()
	d := &deferredDeletes{maintained: testMaintained()}
	now := time.Now()
	if d.due(now) {
		t.Fatal("no list is due")
	}
	d.lists = []deferredList{{path: "a", due: now.Add(time.Hour)}, {path: "b", due: now.Add(2 * time.Hour)}}
	if d.due(now) || !d.due(now.Add(time.Hour)) {
		t.Fatal("want the first list due at its time, not before")
	}
	d.clock = func() time.Time { return now.Add(3 * time.Hour) }
	if !d.due(d.now()) {
		t.Fatal("the moved clock does not make the lists due")
	}
}

// A failed compaction backs off: the minimum interval (at least 5s) doubling with each failure
// up to 64 times it, at most 10 minutes.
func TestCompactorBacksOffAfterFailures(t *testing.T) {
	t.Parallel()
	c := &compactor{maintained: testMaintained()}
	boom := errors.New("boom")
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
		before := time.Now()
		if err := c.failed(boom); !errors.Is(err, boom) {
			t.Fatalf("failed returned %v", err)
		}
		if got := c.next.Sub(before); got < want || got > want+time.Second {
			t.Fatalf("failure %d: next in %v, want %v", i+1, got, want)
		}
	}
	c.failures = 20
	_ = c.failed(boom)
	if got := time.Until(c.next); got > 320*time.Second || got < 319*time.Second {
		t.Fatalf("backoff %v after 21 failures, want 64 times 5s", got)
	}
}

// Without a job waiting, the writer's AfterCommit returns at once with its own table and records
// the time of its commit; a commit attempt is bounded by CommitTimeout.
func TestCommitterWithoutWaitingJob(t *testing.T) {
	t.Parallel()
	tm := testMaintained()
	tm.cfg.CommitTimeout = time.Second
	c := newCommitter(tm, newLeaseHolder(tm), time.Second)
	adopted := false
	if got := c.runWaiting(context.Background(), nil, func(*table.Table) error { adopted = true; return nil }); got != nil || adopted {
		t.Fatal("a table was adopted without a job")
	}
	if c.writerCommit.Load() == 0 {
		t.Fatal("the writer's commit was not recorded")
	}
	ctx, cancel := bounded(context.Background(), tm.cfg)
	defer cancel()
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Second {
		t.Fatalf("deadline %v %v, want within CommitTimeout", dl, ok)
	}
}
