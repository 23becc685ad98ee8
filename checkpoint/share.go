package checkpoint

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Lease balancing (docs/scaling.md, "Lease balancing"). The KCL (vmware-go-kcl-v2 v1.0.0, lease
// stealing off) lets every worker take any free lease, one per shard-sync round, and never
// gives one up: the first worker up ends with every shard, and a worker that joins later gets
// none. Balancing is built from what the KCL lets a Checkpointer decide:
//
//   - presence: every worker writes a presence row into the lease table (PresenceKey, live until
//     AttrWorkerUntil) and removes it when it stops; the live workers are the presence rows
//     that have not expired, plus the worker itself;
//   - fair share: with S open shards (listed by ListShards, not at SHARD_END) and N live
//     workers, each worker should hold floor(S/N) or ceil(S/N) leases. GetLease refuses an
//     acquisition once this worker holds ceil(S/N) (the KCL skips a refusal silently);
//   - hand-off: while no open shard is free, the plan (ComputeShare) pairs each worker that
//     holds at least two leases more than the least loaded one with that worker. The giver
//     reserves one of its leases for the taker (Reserve: AttrHandoffTo until AttrHandoffUntil,
//     which every other worker's GetLease respects), drains the shard's processor (everything
//     handed on committed and checkpointed), then refuses its own next renewal on purpose
//     (Balance.Release), which makes the KCL end the shard's consumer and release the lease.
//     The taker's next round takes the lease from the checkpoint. One hand-off at a time per
//     giver (a giver whose lease is reserved is busy);
//   - cheap rounds: FetchCheckpoint and GetLease answer from the last scan of the lease table,
//     without a DynamoDB call, for a shard this worker may not take anyway, so that a short
//     shard-sync interval (several rounds a second: the KCL takes one lease per round) costs
//     one ListShards call per round once a worker holds its share.

// presencePrefix starts the key of a presence row. A Kinesis shard id is "shardId-" and 12
// digits, so a presence key is never a shard id.
const presencePrefix = "~worker:"

// PresenceKey is the AttrShardID of worker's presence row.
func PresenceKey(worker string) string { return presencePrefix + worker }

// presenceWorker returns the worker of a presence key.
func presenceWorker(key string) (string, bool) {
	return strings.CutPrefix(key, presencePrefix)
}

// reservedForOther reports whether cur is being handed off to a worker other than w.
func reservedForOther(cur LeaseRow, w string, now time.Time) bool {
	return cur.HandoffTo != "" && cur.HandoffTo != w && now.Before(cur.HandoffUntil)
}

// reservedFor reports whether cur is being handed off to w.
func reservedFor(cur LeaseRow, w string, now time.Time) bool {
	return cur.HandoffTo == w && now.Before(cur.HandoffUntil)
}

// FairShare returns floor(open/workers) and ceil(open/workers) (0, 0 without workers).
func FairShare(open, workers int) (floor, ceil int) {
	if workers <= 0 {
		return 0, 0
	}
	floor = open / workers
	ceil = floor
	if open%workers != 0 {
		ceil++
	}
	return floor, ceil
}

// Snapshot is one observation of the lease table, from which the share is computed.
type Snapshot struct {
	// Now is when the scan was made.
	Now time.Time
	// Open are the shards that must be read: listed by ListShards, not at SHARD_END.
	Open []string
	// Rows is the scan of the lease table (presence rows included).
	Rows []LeaseRow
}

// Share is what a Snapshot says about the balance, the same for every worker that computes it
// from the same snapshot.
type Share struct {
	// Workers are the live workers, sorted (the observer always among them).
	Workers []string
	// Open is the number of open shards, Floor and Ceil the fair share.
	Open, Floor, Ceil int
	// Held is, per live worker, the open shards whose unexpired lease it holds or that are
	// being handed off to it.
	Held map[string]int
	// Free counts the open shards nobody holds (no row, no owner, or an expired lease) and that
	// are not reserved.
	Free int
	// Plan pairs givers with takers (giver -> taker): one hand-off per giver. Empty while a
	// shard is free (those below their share take the free ones first).
	Plan map[string]string
}

// ComputeShare computes the share me sees in s.
func ComputeShare(me string, s Snapshot) Share {
	live := map[string]bool{me: true}
	byShard := make(map[string]LeaseRow, len(s.Rows))
	for _, r := range s.Rows {
		switch {
		case r.Worker != "" && s.Now.Before(r.WorkerUntil):
			live[r.Worker] = true
		case r.Shard != "":
			byShard[r.Shard] = r
		}
	}
	sh := Share{Open: len(s.Open), Held: make(map[string]int, len(live)), Plan: map[string]string{}}
	for w := range live {
		sh.Workers = append(sh.Workers, w)
		sh.Held[w] = 0
	}
	slices.Sort(sh.Workers)
	sh.Floor, sh.Ceil = FairShare(sh.Open, len(sh.Workers))
	busy := map[string]bool{}
	for _, id := range s.Open {
		r := byShard[id]
		unexpired := r.Owner != "" && s.Now.Before(r.LeaseTimeout)
		switch {
		case r.HandoffTo != "" && live[r.HandoffTo] && s.Now.Before(r.HandoffUntil):
			sh.Held[r.HandoffTo]++
			if unexpired {
				busy[r.Owner] = true
			}
		case unexpired && live[r.Owner]:
			sh.Held[r.Owner]++
		case unexpired:
			// held by a worker without a presence row (an older binary, or one whose presence
			// expired first): neither free nor anyone's share
		default:
			sh.Free++
		}
	}
	if sh.Free > 0 {
		return sh
	}
	h := make(map[string]int, len(sh.Held))
	for w, n := range sh.Held {
		h[w] = n
	}
	givers := slices.Clone(sh.Workers)
	slices.SortStableFunc(givers, func(a, b string) int { return h[b] - h[a] })
	for _, g := range givers {
		if busy[g] {
			continue
		}
		t := ""
		for _, w := range sh.Workers { // sorted: the first of the least loaded
			if w != g && (t == "" || h[w] < h[t]) {
				t = w
			}
		}
		if t != "" && h[g]-h[t] >= 2 {
			sh.Plan[g] = t
			h[g]--
			h[t]++
		}
	}
	return sh
}

// Balance is one worker's view of the fair share, from the last Snapshot it observed. The
// lease store consults it: GetLease refuses an acquisition above the share or of a lease
// reserved for another worker, and refuses a renewal of a lease being released (Release);
// FetchCheckpoint answers from the snapshot for a shard this worker may not take. Safe for
// concurrent use. A nil *Balance refuses nothing.
type Balance struct {
	worker string
	// maxAge is how old an observation may be and still be used; an older one (or none) lets
	// every acquisition through (the KCL's own behaviour), so that balancing never stops a
	// worker from taking leases.
	maxAge time.Duration

	mu        sync.Mutex
	at        time.Time
	rows      map[string]LeaseRow
	share     Share
	releasing map[string]bool

	refusals atomic.Int64
	handoffs atomic.Int64
}

// NewBalance returns worker's view, whose observations are used for maxAge.
func NewBalance(worker string, maxAge time.Duration) *Balance {
	return &Balance{worker: worker, maxAge: maxAge, releasing: map[string]bool{}}
}

// Observe records a snapshot and returns the share it gives.
func (b *Balance) Observe(s Snapshot) Share {
	sh := ComputeShare(b.worker, s)
	rows := make(map[string]LeaseRow, len(s.Rows))
	for _, r := range s.Rows {
		if r.Shard != "" {
			rows[r.Shard] = r
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at, b.rows, b.share = s.Now, rows, sh
	return sh
}

// Refusals counts the acquisitions refused because this worker held its share.
func (b *Balance) Refusals() int64 { return b.refusals.Load() }

// Handoffs counts the leases this worker released on purpose (Release, then the KCL's release).
func (b *Balance) Handoffs() int64 { return b.handoffs.Load() }

// Release makes the next renewal of the shard's lease fail on purpose: the KCL then ends the
// shard's consumer (without a Shutdown callback: the processor must have drained first) and
// releases the lease.
func (b *Balance) Release(shard string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releasing[shard] = true
}

// Releasing reports whether the shard's lease is being released (Release, not yet released).
func (b *Balance) Releasing(shard string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.releasing[shard]
}

// released notes the release of a lease; it reports whether it was one Release asked for.
func (b *Balance) released(shard string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.releasing[shard] {
		return false
	}
	delete(b.releasing, shard)
	b.handoffs.Add(1)
	return true
}

// decide says whether this worker, holding held leases, may acquire the shard's lease at now:
// ok, and share when a refusal is because of the fair share (else: the lease is reserved for
// another worker, or the snapshot shows someone else's unexpired lease).
func (b *Balance) decide(shard string, held int, now time.Time) (ok, share bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at.IsZero() || now.Sub(b.at) > b.maxAge {
		return true, false
	}
	r, known := b.rows[shard]
	switch {
	case known && reservedFor(r, b.worker, now):
		return true, false // the giver chose this worker: take it even above the share
	case known && (reservedForOther(r, b.worker, now) || r.Checkpoint == ShardEnd):
		return false, false // a finished shard is never taken: its cached row says so
	case held >= b.share.Ceil:
		return false, true
	case known && r.Owner != "" && r.Owner != b.worker && now.Before(r.LeaseTimeout):
		return false, false
	}
	return true, false
}

// refuse decides a GetLease before any I/O: a renewal (mine != 0) is refused when the lease is
// being released; an acquisition when decide says no.
func (b *Balance) refuse(shard string, mine int64, held int, now time.Time) bool {
	if b == nil {
		return false
	}
	if mine != 0 {
		return b.Releasing(shard)
	}
	b.mu.Lock()
	delete(b.releasing, shard) // a release asked for a lease held before: not this one
	b.mu.Unlock()
	ok, share := b.decide(shard, held, now)
	if share {
		b.refusals.Add(1)
	}
	return !ok
}

// cached returns the shard's row from the last snapshot when this worker may not take the
// lease anyway (FetchCheckpoint then needs no read).
func (b *Balance) cached(shard string, held int, now time.Time) (LeaseRow, bool) {
	if b == nil {
		return LeaseRow{}, false
	}
	if ok, _ := b.decide(shard, held, now); ok {
		return LeaseRow{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r, known := b.rows[shard]
	return r, known
}
