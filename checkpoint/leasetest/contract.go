package leasetest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// Store is one worker's view of a lease table: the processor's LeaseStore plus the KCL's lease
// call and a consistent read of a row.
type Store interface {
	checkpoint.LeaseStore
	// GetLease takes or renews the lease of a shard for newOwner.
	GetLease(shard *par.ShardStatus, newOwner string) error
	// Get reads a shard's row.
	Get(ctx context.Context, shard string) (checkpoint.LeaseRow, error)
	// RemoveLeaseOwner releases the shard's lease (the KCL calls it when a consumer ends).
	RemoveLeaseOwner(shard string) error
	// The lease balancing (share.go): the fair share GetLease consults, the hand-off
	// reservation, and the worker's presence row.
	WithBalance(b *checkpoint.Balance)
	Reserve(ctx context.Context, shard string, epoch int64, taker string, until time.Time) error
	Announce(ctx context.Context, until time.Time) error
	Withdraw(ctx context.Context) error
}

// Table is a lease table under test.
type Table interface {
	// Worker returns worker's store with a lease duration long enough that no lease expires
	// during a test unless Expire ends it.
	Worker(t *testing.T, worker string) Store
	// Expire ends the shard's current lease now, as if its owner had stalled past the lease
	// duration, without changing anything else of the row.
	Expire(t *testing.T, shard string)
	// SetStateVersion writes v as the row's AttrStateVersion ("" removes it), as another
	// dms2iceberg binary (or one from before the stamp) would have left it.
	SetStateVersion(t *testing.T, shard, v string)
}

// Run runs the contract against the table newTable returns (called once).
func Run(t *testing.T, newTable func(t *testing.T) Table) {
	tbl := newTable(t)
	for _, c := range []struct {
		name string
		run  func(t *testing.T, tbl Table, shard string)
	}{
		{"AcquireSetsOwnerAndFirstEpoch", acquire},
		{"UnexpiredLeaseOfAnotherIsNotTaken", unexpiredNotTaken},
		{"RenewalKeepsEpochAndNeverWritesCheckpoint", renewal},
		{"TakeoverFencesOldOwner", takeover},
		{"LateRenewalKeepsEpoch", lateRenewal},
		{"ReacquisitionFencesOwnOlderEpoch", reacquisition},
		{"LeaseTakenInBetweenIsNotTakenBack", takenInBetween},
		{"ReleaseRemovesOnlyItsOwnLease", release},
		{"CheckpointNeverMovesBackwards", neverBackwards},
		{"ShardEndIsFinal", shardEndFinal},
		{"CheckpointWithoutLeaseIsFenced", withoutLease},
		{"HorizonPublishedByOwner", horizonPublished},
		{"HorizonSurvivesRenewalAndCheckpoint", horizonSurvives},
		{"TakeoverRemovesHorizonAndFencesOldOwner", horizonTakeover},
		{"ReacquisitionRemovesHorizon", horizonReacquisition},
		{"NoHorizonAfterShardEnd", horizonAfterShardEnd},
		{"HorizonWithoutLeaseIsFenced", horizonWithoutLease},
		{"LeaseIsStampedWithStateVersion", stampedLease},
		{"NewerStateVersionIsNotTaken", newerNotTaken},
		{"UnstampedRowIsTaken", unstampedTaken},
		{"ReservedLeaseGoesOnlyToItsTaker", reservedToTaker},
		{"OnlyTheOwnerReserves", onlyOwnerReserves},
		{"ExpiredReservationIsIgnored", expiredReservation},
		{"RenewalOfAReleasedLeaseIsRefused", releasedRenewal},
		{"PresenceRowIsScannedAndWithdrawn", presence},
		{"AcquisitionAboveTheShareIsRefused", aboveShare},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, tbl, "shardId-"+c.name)
		})
	}
}

func status(id, parent, inMemoryCheckpoint string) *par.ShardStatus {
	return &par.ShardStatus{ID: id, ParentShardId: parent, Checkpoint: inMemoryCheckpoint, Mux: &sync.RWMutex{}}
}

func take(t *testing.T, s Store, shard, owner string) int64 {
	t.Helper()
	if err := s.GetLease(status(shard, "", ""), owner); err != nil {
		t.Fatalf("%s takes %s: %v", owner, shard, err)
	}
	return s.Epoch(shard)
}

func row(t *testing.T, s Store, shard string) checkpoint.LeaseRow {
	t.Helper()
	r, err := s.Get(t.Context(), shard)
	if err != nil {
		t.Fatalf("read %s: %v", shard, err)
	}
	return r
}

func mustCheckpoint(t *testing.T, s Store, shard string, epoch int64, seq string) {
	t.Helper()
	if err := s.Checkpoint(t.Context(), shard, epoch, seq); err != nil {
		t.Fatalf("checkpoint %s at %s (epoch %d): %v", shard, seq, epoch, err)
	}
}

func refused(t *testing.T, s Store, shard string, epoch int64, seq string, want error) {
	t.Helper()
	if err := s.Checkpoint(t.Context(), shard, epoch, seq); !errors.Is(err, want) {
		t.Fatalf("checkpoint %s at %s (epoch %d): %v, want %v", shard, seq, epoch, err, want)
	}
}

func acquire(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	if e := a.Epoch(shard); e != 0 {
		t.Fatalf("epoch %d before any lease, want 0", e)
	}
	if r := row(t, a, shard); r.Exists || r.Shard != shard {
		t.Fatalf("row before any lease: %+v, want none", r)
	}
	sh := status(shard, "shardId-parent", "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	r := row(t, a, shard)
	if !r.Exists || r.Owner != "A" || r.Epoch != 1 || a.Epoch(shard) != 1 || r.Parent != "shardId-parent" || r.Checkpoint != "" {
		t.Fatalf("row after the first acquisition: %+v (worker's epoch %d), want owner A, epoch 1, parent recorded, no checkpoint", r, a.Epoch(shard))
	}
	if r.LeaseTimeout.IsZero() || r.LeaseTimeoutText == "" || sh.GetLeaseOwner() != "A" || !sh.LeaseTimeout.Equal(r.LeaseTimeout) {
		t.Fatalf("lease timeout %v (%q), shard status owner %q timeout %v", r.LeaseTimeout, r.LeaseTimeoutText, sh.GetLeaseOwner(), sh.LeaseTimeout)
	}
	if fin, err := a.ShardFinished(t.Context(), shard); err != nil || fin {
		t.Fatalf("ShardFinished of a fresh lease = %v, %v", fin, err)
	}
}

func unexpiredNotTaken(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	if err := b.GetLease(status(shard, "", ""), "B"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("B took A's unexpired lease: %v", err)
	}
	if r := row(t, a, shard); r.Owner != "A" || r.Epoch != e || r.Checkpoint != "100" || b.Epoch(shard) != 0 {
		t.Fatalf("row after B's refused attempt: %+v (B's epoch %d)", r, b.Epoch(shard))
	}
}

func renewal(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	sh := status(shard, "", "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	e := a.Epoch(shard)
	mustCheckpoint(t, a, shard, e, "100")
	sh.SetCheckpoint("38") // a stale in-memory value, as the KCL keeps it
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if r := row(t, a, shard); r.Checkpoint != "100" || r.Epoch != e || a.Epoch(shard) != e {
		t.Fatalf("row after the renewal: %+v (worker's epoch %d), want checkpoint 100 and epoch %d kept", r, a.Epoch(shard), e)
	}
	mustCheckpoint(t, a, shard, e, "200") // the renewed lease still checkpoints
}

func takeover(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	zombie := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, zombie, "100")
	tbl.Expire(t, shard) // A stalls past the lease duration
	eb := take(t, b, shard, "B")
	if eb != zombie+1 {
		t.Fatalf("takeover epoch %d, want %d", eb, zombie+1)
	}
	refused(t, a, shard, zombie, "200", checkpoint.ErrFenced)
	if r := row(t, b, shard); r.Owner != "B" || r.Checkpoint != "100" || r.Epoch != eb {
		t.Fatalf("row after the zombie's attempt: %+v", r)
	}
	if err := a.GetLease(status(shard, "", ""), "A"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("the zombie took back B's unexpired lease: %v", err)
	}
	mustCheckpoint(t, b, shard, eb, "200")
}

// lateRenewal: a renewal that comes after the lease expired, with nobody having taken it
// meanwhile (a pause longer than the failover time), keeps the epoch, so the shard's running
// processor still checkpoints and publishes (it was once fenced for good).
func lateRenewal(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	publish(t, a, shard, e, h1)
	tbl.Expire(t, shard) // A paused past the lease duration; nobody took the lease
	if got := take(t, a, shard, "A"); got != e {
		t.Fatalf("late renewal epoch %d, want %d kept", got, e)
	}
	mustCheckpoint(t, a, shard, e, "200")
	wantHorizon(t, row(t, a, shard), h1, "after the late renewal")
}

// takenInBetween: a lease another worker took while its holder paused (both waiting for a
// merged shard's parents, say) is not taken back by the holder's running consumer, even once
// the taker's lease expired too: the renewal is refused, so the KCL ends that consumer instead
// of feeding a processor fenced by its own worker's new epoch (found by a chaos run: the shard
// then went unread until shutdown). The consumer's release forgets the epoch; the next GetLease
// is an acquisition under a new epoch, with a new processor.
func takenInBetween(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	ea := take(t, a, shard, "A")
	tbl.Expire(t, shard) // A's consumer waits for the parents past the lease duration
	eb := take(t, b, shard, "B")
	mustCheckpoint(t, b, shard, eb, "100")
	tbl.Expire(t, shard) // so does B's
	if err := a.GetLease(status(shard, "", ""), "A"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("A's running consumer took back the lease B took meanwhile: %v (row %+v, A's epoch %d)", err, row(t, a, shard), a.Epoch(shard))
	}
	if r := row(t, a, shard); r.Owner != "B" || r.Epoch != eb || a.Epoch(shard) != ea {
		t.Fatalf("row after A's refused renewal: %+v (A's epoch %d), want B's epoch %d kept", r, a.Epoch(shard), eb)
	}
	mustCheckpoint(t, b, shard, eb, "200")            // B's processor still holds the lease
	if err := a.RemoveLeaseOwner(shard); err != nil { // A's consumer ends and releases
		t.Fatalf("A's release: %v", err)
	}
	if r := row(t, a, shard); r.Owner != "B" || r.Epoch != eb || a.Epoch(shard) != 0 {
		t.Fatalf("row after A's release: %+v (A's epoch %d), want B's lease untouched and A's epoch forgotten", r, a.Epoch(shard))
	}
	e := take(t, a, shard, "A") // the event loop takes the expired lease afresh
	if e != eb+1 {
		t.Fatalf("A's acquisition after its release: epoch %d, want %d", e, eb+1)
	}
	refused(t, b, shard, eb, "300", checkpoint.ErrFenced)
	mustCheckpoint(t, a, shard, e, "300")
}

// release: a release removes the owner of the lease this worker holds and forgets the epoch; a
// release of a lease that moved on leaves the row alone.
func release(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatal(err)
	}
	if r := row(t, a, shard); r.Owner != "" || r.Epoch != e || r.Checkpoint != "100" || a.Epoch(shard) != 0 {
		t.Fatalf("row after the release: %+v (A's epoch %d), want no owner, epoch and checkpoint kept, A's epoch forgotten", r, a.Epoch(shard))
	}
	refused(t, a, shard, e, "200", checkpoint.ErrFenced)
	eb := take(t, b, shard, "B") // a released lease is taken at once
	if eb != e+1 {
		t.Fatalf("B's acquisition of the released lease: epoch %d, want %d", eb, e+1)
	}
	if err := a.RemoveLeaseOwner(shard); err != nil { // nothing to release any more
		t.Fatal(err)
	}
	if r := row(t, b, shard); r.Owner != "B" || r.Epoch != eb {
		t.Fatalf("A's second release changed B's lease: %+v", r)
	}
	mustCheckpoint(t, b, shard, eb, "200")
}

// reacquisition: the same worker id taking its expired lease in a new process (a restart) is an
// acquisition, which fences the old process.
func reacquisition(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	old := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, old, "100")
	tbl.Expire(t, shard)
	restarted := tbl.Worker(t, "A")
	e := take(t, restarted, shard, "A")
	if e != old+1 {
		t.Fatalf("re-acquisition epoch %d, want %d", e, old+1)
	}
	refused(t, a, shard, old, "300", checkpoint.ErrFenced)
	mustCheckpoint(t, restarted, shard, e, "300")
	if r := row(t, restarted, shard); r.Checkpoint != "300" || r.Epoch != e {
		t.Fatalf("row: %+v", r)
	}
}

func neverBackwards(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	e := take(t, a, shard, "A")
	lo, hi := "49680676645530718379842435000698513630969073433269239810", "49680676645530718379842435000698513630969073433269239999"
	mustCheckpoint(t, a, shard, e, hi)
	refused(t, a, shard, e, lo, checkpoint.ErrRegression)
	refused(t, a, shard, e, "999", checkpoint.ErrRegression) // fewer digits: lower
	mustCheckpoint(t, a, shard, e, hi)                       // the same again: not backwards
	if r := row(t, a, shard); r.Checkpoint != hi {
		t.Fatalf("stored %q, want %s", r.Checkpoint, hi)
	}
	longer := hi + "0"
	mustCheckpoint(t, a, shard, e, longer)
	if r := row(t, a, shard); r.Checkpoint != longer {
		t.Fatalf("stored %q, want %s", r.Checkpoint, longer)
	}
}

func shardEndFinal(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	mustCheckpoint(t, a, shard, e, checkpoint.ShardEnd)
	refused(t, a, shard, e, "123", checkpoint.ErrRegression)
	refused(t, a, shard, e, checkpoint.ShardEnd, checkpoint.ErrRegression)
	fin, err := b.ShardFinished(t.Context(), shard)
	if err != nil || !fin {
		t.Fatalf("ShardFinished seen by another worker = %v, %v", fin, err)
	}
	// A later owner of the finished shard cannot overwrite SHARD_END either.
	tbl.Expire(t, shard)
	eb := take(t, b, shard, "B")
	refused(t, b, shard, eb, "200", checkpoint.ErrRegression)
	if r := row(t, b, shard); r.Checkpoint != checkpoint.ShardEnd {
		t.Fatalf("stored %q, want SHARD_END", r.Checkpoint)
	}
}

func withoutLease(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	refused(t, a, shard, 1, "100", checkpoint.ErrFenced)
	if r := row(t, a, shard); r.Exists {
		t.Fatalf("a refused checkpoint created the row %+v", r)
	}
	e := take(t, a, shard, "A")
	refused(t, b, shard, e, "100", checkpoint.ErrFenced) // B never held it, even under A's epoch
	if r := row(t, a, shard); r.Checkpoint != "" {
		t.Fatalf("stored %q after B's refused checkpoint", r.Checkpoint)
	}
}

// Horizons are stored at millisecond precision; the test values are whole milliseconds.
var (
	h1 = checkpoint.Horizon{Read: time.UnixMilli(1_764_000_000_100).UTC(), PendingFrom: time.UnixMilli(1_764_000_000_050).UTC(),
		Pending: checkpoint.PendingTables{"shop.a": withMoves(checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindLoad: {At: time.UnixMilli(1_764_000_000_060).UTC()},
			checkpoint.KindKeyChange: {At: time.UnixMilli(1_764_000_000_090).UTC(), Pos: change.SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z", TxID: "7", TxRecord: "2"}}})),
			"shop.b": checkpoint.GatesOf(map[checkpoint.Kind]checkpoint.Gate{checkpoint.KindControl: {At: time.UnixMilli(1_764_000_000_070).UTC()}})},
		At: time.UnixMilli(1_764_000_001_000).UTC(), Margin: 300 * time.Millisecond}
	h2 = checkpoint.Horizon{Read: time.UnixMilli(1_764_000_000_900).UTC(), At: time.UnixMilli(1_764_000_002_000).UTC()}
)

// withMoves adds pending moves (two keys and an unknown one) to g.
func withMoves(g checkpoint.TableGates) checkpoint.TableGates {
	g.Moves.Add(0xfeedbeef, checkpoint.Gate{At: time.UnixMilli(1_764_000_000_091).UTC()})
	g.Moves.Add(0xffffffff00000001, checkpoint.Gate{At: time.UnixMilli(1_764_000_000_092).UTC()})
	g.Moves.AddUnknown(checkpoint.Gate{At: time.UnixMilli(1_764_000_000_093).UTC()})
	return g
}

func publish(t *testing.T, s Store, shard string, epoch int64, h checkpoint.Horizon) {
	t.Helper()
	if err := s.PublishHorizon(t.Context(), shard, epoch, h); err != nil {
		t.Fatalf("publish %s (epoch %d): %v", shard, epoch, err)
	}
}

func publishRefused(t *testing.T, s Store, shard string, epoch int64, want error) {
	t.Helper()
	if err := s.PublishHorizon(t.Context(), shard, epoch, h2); !errors.Is(err, want) {
		t.Fatalf("publish %s (epoch %d): %v, want %v", shard, epoch, err, want)
	}
}

func wantHorizon(t *testing.T, r checkpoint.LeaseRow, want checkpoint.Horizon, when string) {
	t.Helper()
	if !r.ReadHorizon.Equal(want.Read) || !r.PendingFrom.Equal(want.PendingFrom) || !r.HorizonAt.Equal(want.At) ||
		!reflect.DeepEqual(r.Pending, want.Pending) || r.Margin != want.Margin {
		t.Fatalf("%s: row horizon (read %v, pending %v, tables %v, at %v, margin %s), want %+v", when,
			r.ReadHorizon, r.PendingFrom, r.Pending, r.HorizonAt, r.Margin, want)
	}
}

// horizonPublished: the owner's publish sets every attribute; a publish with nothing pending
// removes the pending ones; Rows (the scan every worker reads) shows the published values.
func horizonPublished(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	e := take(t, a, shard, "A")
	wantHorizon(t, row(t, a, shard), checkpoint.Horizon{}, "fresh lease")
	publish(t, a, shard, e, h1)
	wantHorizon(t, row(t, a, shard), h1, "after the first publish")
	publish(t, a, shard, e, h2)
	wantHorizon(t, row(t, a, shard), h2, "after a publish with nothing pending")
	rows, err := tbl.Worker(t, "B").Rows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if r.Shard == shard {
			found = true
			wantHorizon(t, r, h2, "scanned by another worker")
			if r.Owner != "A" || r.Epoch != e {
				t.Fatalf("scanned row %+v", r)
			}
		}
	}
	if !found {
		t.Fatalf("Rows has no row of %s", shard)
	}
}

// horizonSurvives: renewals and checkpoints leave the published horizon alone.
func horizonSurvives(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	sh := status(shard, "", "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	e := a.Epoch(shard)
	publish(t, a, shard, e, h1)
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	mustCheckpoint(t, a, shard, e, "100")
	r := row(t, a, shard)
	wantHorizon(t, r, h1, "after a renewal and a checkpoint")
	if r.Checkpoint != "100" || r.Epoch != e {
		t.Fatalf("row %+v", r)
	}
}

// horizonTakeover: taking the lease removes the old owner's horizon (its buffers are lost), and the
// old owner can no longer publish; the new one can.
func horizonTakeover(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	old := take(t, a, shard, "A")
	publish(t, a, shard, old, h1)
	tbl.Expire(t, shard)
	eb := take(t, b, shard, "B")
	wantHorizon(t, row(t, b, shard), checkpoint.Horizon{}, "after the takeover")
	publishRefused(t, a, shard, old, checkpoint.ErrFenced)
	wantHorizon(t, row(t, b, shard), checkpoint.Horizon{}, "after the old owner's refused publish")
	publish(t, b, shard, eb, h2)
	wantHorizon(t, row(t, b, shard), h2, "after the new owner's publish")
}

// horizonReacquisition: re-taking an expired lease, even by the same worker, removes the horizon
// and fences the older epoch's publish.
func horizonReacquisition(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	old := take(t, a, shard, "A")
	publish(t, a, shard, old, h1)
	tbl.Expire(t, shard)
	restarted := tbl.Worker(t, "A")
	e := take(t, restarted, shard, "A")
	wantHorizon(t, row(t, a, shard), checkpoint.Horizon{}, "after the re-acquisition")
	publishRefused(t, a, shard, old, checkpoint.ErrFenced)
	publish(t, restarted, shard, e, h1)
	wantHorizon(t, row(t, a, shard), h1, "after the publish under the new epoch")
}

// horizonAfterShardEnd: the final horizon is published before SHARD_END; after it nothing changes
// the row's horizon.
func horizonAfterShardEnd(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	e := take(t, a, shard, "A")
	publish(t, a, shard, e, h2)
	mustCheckpoint(t, a, shard, e, checkpoint.ShardEnd)
	publishRefused(t, a, shard, e, checkpoint.ErrRegression)
	if err := a.PublishHorizon(t.Context(), shard, e, h1); !errors.Is(err, checkpoint.ErrRegression) {
		t.Fatalf("publish after SHARD_END: %v", err)
	}
	wantHorizon(t, row(t, a, shard), h2, "after SHARD_END")
}

func horizonWithoutLease(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	publishRefused(t, a, shard, 1, checkpoint.ErrFenced)
	if r := row(t, a, shard); r.Exists {
		t.Fatalf("a refused publish created the row %+v", r)
	}
	e := take(t, a, shard, "A")
	publishRefused(t, b, shard, e, checkpoint.ErrFenced)
	wantHorizon(t, row(t, a, shard), checkpoint.Horizon{}, "after B's refused publish")
}

func stampedLease(t *testing.T, tbl Table, shard string) {
	a := tbl.Worker(t, "A")
	take(t, a, shard, "A")
	if r := row(t, a, shard); r.StateVersion != stateversion.CurrentText {
		t.Fatalf("row after an acquisition stamped %q, want %q", r.StateVersion, stateversion.CurrentText)
	}
}

// A row written by a newer state version is not taken (nor renewed) and not rewritten.
func newerNotTaken(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	mustCheckpoint(t, a, shard, e, "100")
	tbl.Expire(t, shard)
	tbl.SetStateVersion(t, shard, "2")
	before := row(t, a, shard)
	err := b.GetLease(status(shard, "", ""), "B")
	if !stateversion.IsRefused(err) {
		t.Fatalf("B's GetLease of a row of state version 2 = %v, want a state-version refusal", err)
	}
	if err := a.GetLease(status(shard, "", ""), "A"); !stateversion.IsRefused(err) {
		t.Fatalf("A's renewal of a row of state version 2 = %v, want a state-version refusal", err)
	}
	if r := row(t, a, shard); r.Owner != "A" || r.Epoch != e || r.Checkpoint != "100" || r.StateVersion != "2" ||
		r.LeaseTimeoutText != before.LeaseTimeoutText || b.Epoch(shard) != 0 {
		t.Fatalf("row after the refused attempts: %+v (B's epoch %d), want it unchanged", r, b.Epoch(shard))
	}
}

// A row from before the stamp (no AttrStateVersion: version 1) is taken, and stamped.
func unstampedTaken(t *testing.T, tbl Table, shard string) {
	a, b := tbl.Worker(t, "A"), tbl.Worker(t, "B")
	e := take(t, a, shard, "A")
	tbl.Expire(t, shard)
	tbl.SetStateVersion(t, shard, "")
	if r := row(t, a, shard); r.StateVersion != "" {
		t.Fatalf("stamp not removed: %+v", r)
	}
	if got := take(t, b, shard, "B"); got != e+1 {
		t.Fatalf("B's epoch %d, want %d", got, e+1)
	}
	if r := row(t, b, shard); r.Owner != "B" || r.StateVersion != stateversion.CurrentText {
		t.Fatalf("row after B took an unstamped lease: %+v", r)
	}
}
