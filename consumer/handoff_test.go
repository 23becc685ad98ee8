package consumer

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

const shard2 = "shardId-000000000002"

// balancedEnv is a procEnv whose consumer balances its leases, with a second live worker
// "other" that holds nothing.
func balancedEnv(t *testing.T) (*procEnv, *checkpoint.Balance) {
	t.Helper()
	e := newProcEnv(t)
	e.c.cfg.Failover = 30 * time.Second
	bal := checkpoint.NewBalance(me, time.Hour)
	e.leases.WithBalance(bal)
	e.c.share.Store(newBalancer(e.c, bal, e.leases))
	if err := e.table.Worker("other", time.Hour).Announce(t.Context(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	return e, bal
}

// observe runs the balancer on a scan of the table, as the horizon loop does.
func (e *procEnv) observe(shards ...string) {
	e.t.Helper()
	rows, err := e.leases.Rows(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	listed := map[string]shardInfo{}
	for _, s := range shards {
		listed[s] = shardInfo{}
	}
	e.c.share.Load().observe(e.t.Context(), listed, rows)
}

func status(id string) *par.ShardStatus { return &par.ShardStatus{ID: id, Mux: &sync.RWMutex{}} }

// A worker above its share hands one lease off: it reserves it for the worker below its share,
// hands nothing more on, commits and checkpoints what it handed on, refuses its own renewal so
// that the KCL releases the lease, and only the taker then takes it, from that checkpoint.
func TestHandOffDrainsCheckpointsAndReleasesToTheTaker(t *testing.T) {
	t.Parallel()
	e, bal := balancedEnv(t)
	p := e.start(shard, "")
	p2 := e.start(shard2, "")
	deliver(p, "101", "102")
	deliver(p2, "201")
	deliver(p2, "202")
	e.observe(shard, shard2) // me 2, other 0: me gives the one with fewer pending deliveries
	if r := e.row(shard); r.HandoffTo != "other" || r.Owner != me {
		t.Fatalf("row of the shard handed off: %+v", r)
	}
	if r := e.row(shard2); r.HandoffTo != "" {
		t.Fatalf("a second hand-off at once: %+v", r)
	}
	e.wantCheckpoint(shard, "", "before the hand-off's drain")
	deliver(p, "103") // the KCL's next call: the processor drains instead
	e.wantCheckpoint(shard, "102", "after the hand-off's drain")
	if slices.Contains(e.sink.seqs(), "103") {
		t.Fatal("a record read after the hand-off began was handed on")
	}
	if !bal.Releasing(shard) || !p.released.Load() {
		t.Fatal("the drained processor did not ask for the release")
	}
	if err := e.leases.GetLease(status(shard), me); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("the renewal of the lease handed off: %v, want ErrLeaseNotAcquired", err)
	}
	if err := e.leases.GetLease(status(shard2), me); err != nil {
		t.Fatalf("the renewal of the lease kept: %v", err)
	}
	third := e.table.Worker("third", time.Hour)
	if err := e.leases.RemoveLeaseOwner(shard); err != nil { // the KCL ends the consumer
		t.Fatal(err)
	}
	if err := third.GetLease(status(shard), "third"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("a worker other than the taker took the reserved lease: %v", err)
	}
	other := e.table.Worker("other", time.Hour)
	if err := other.GetLease(status(shard), "other"); err != nil {
		t.Fatalf("the taker: %v", err)
	}
	if r := e.row(shard); r.Owner != "other" || r.Checkpoint != "102" || r.HandoffTo != "" {
		t.Fatalf("row after the taker took the lease: %+v", r)
	}
	e.observe(shard, shard2)
	if e.c.share.Load().cur != nil || bal.Handoffs() != 1 {
		t.Fatalf("hand-off still under way (%v), %d hand-offs", e.c.share.Load().cur, bal.Handoffs())
	}
	if s := e.c.LeaseShare(); s.Workers != 2 || s.Open != 2 || s.Floor != 1 || s.Ceil != 1 || s.Held != 1 || s.Handoffs != 1 {
		t.Fatalf("lease share %+v", s)
	}
	e.observe(shard, shard2) // balanced: nothing more to hand off
	if e.c.share.Load().cur != nil || e.row(shard2).HandoffTo != "" {
		t.Fatal("a balanced worker handed off again")
	}
}

// A hand-off whose processor is not called by its deadline releases the lease anyway.
func TestHandOffPastItsDeadlineReleases(t *testing.T) {
	t.Parallel()
	e, bal := balancedEnv(t)
	e.start(shard, "")
	e.start(shard2, "")
	e.observe(shard, shard2)
	h := e.c.share.Load().cur
	if h == nil {
		t.Fatal("no hand-off")
	}
	e.c.share.Load().progress(time.Now().Add(time.Hour))
	if !bal.Releasing(h.p.shard) || e.c.share.Load().cur != nil {
		t.Fatalf("past the deadline: releasing %v, under way %v", bal.Releasing(h.p.shard), e.c.share.Load().cur)
	}
}

// A processor waiting for its parents stops waiting when asked to hand off.
func TestHandOffEndsAParentWait(t *testing.T) {
	t.Parallel()
	e, _ := balancedEnv(t)
	p := e.start(shard, "", "shardId-parent")
	e.stream.mu.Lock()
	e.stream.shards["shardId-parent"] = nil
	e.stream.mu.Unlock()
	p.handoff.Store(true)
	if err := p.waitForParents(); !errors.Is(err, errStale) {
		t.Fatalf("parent wait: %v, want errStale", err)
	}
}

// Without a plan (the worker holds its share), nothing is handed off, and an acquisition above
// the share is refused.
func TestNoHandOffWithinTheShare(t *testing.T) {
	t.Parallel()
	e, bal := balancedEnv(t)
	e.start(shard, "")
	e.observe(shard, shard2)
	if e.c.share.Load().cur != nil {
		t.Fatal("a worker within its share handed off")
	}
	if err := e.leases.GetLease(status(shard2), me); !errors.As(err, &chk.ErrLeaseNotAcquired{}) || bal.Refusals() != 1 {
		t.Fatalf("acquisition above the share: %v (%d refusals)", err, bal.Refusals())
	}
}

// A starting worker looks at the share before the KCL's first round (settle): beside another
// live worker it takes only its half of the free leases. Without that look it would take them
// all, and hand them over one at a time.
func TestStartingWorkerTakesOnlyItsShare(t *testing.T) {
	t.Parallel()
	e, _ := balancedEnv(t)
	f := &fakeKinesis{shards: []ktypes.Shard{{ShardId: aws.String(shard)}, {ShardId: aws.String(shard2)}}}
	e.c.share.Load().settle(e.t.Context(), newShardMap(f, "stream"), e.leases)
	if err := e.leases.GetLease(status(shard), me); err != nil {
		t.Fatalf("the first lease: %v", err)
	}
	if err := e.leases.GetLease(status(shard2), me); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("a second lease above the share of 1: %v, want refused", err)
	}
}
