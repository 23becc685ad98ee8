package consumer

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// Lease balancing, the consumer's side (checkpoint/share.go has the rules, docs/scaling.md the
// why): after every scan of the lease table the horizon loop hands the snapshot to the
// balancer, which keeps this worker's presence row fresh, updates the fair share the lease
// store consults, and, when the share's plan names this worker as a giver, hands one lease
// off: it reserves the lease for the taker, then asks the shard's processor to drain; the
// processor (handOff, on the KCL's goroutine) stops handing on, commits and checkpoints what it
// handed on, and makes the lease store refuse its next renewal, so that the KCL ends the
// consumer and releases the lease; the taker's next shard-sync round takes it from the
// checkpoint. One hand-off at a time; one that has not released by its deadline is released
// anyway (what was not committed is read again by the taker: the tables' watermarks skip what
// was already committed).

// shareStore is what the balancer needs of the lease store beyond LeaseStore.
type shareStore interface {
	Reserve(ctx context.Context, shard string, epoch int64, taker string, until time.Time) error
	Announce(ctx context.Context, until time.Time) error
	Withdraw(ctx context.Context) error
}

// LeaseShare is this worker's view of the lease balance (Consumer.LeaseShare).
type LeaseShare struct {
	// Workers is the number of live workers, Open the open shards, Floor and Ceil the share.
	Workers, Open, Floor, Ceil int
	// Held is the number of open shards this worker holds (by the last scan).
	Held int
	// Refusals counts the acquisitions refused because this worker held its share; Handoffs
	// the leases it handed off.
	Refusals, Handoffs int64
}

// balancer is the hand-off driver of one Consumer. observe runs on the horizon loop's
// goroutine; LeaseShare from any.
type balancer struct {
	c     *Consumer
	bal   *checkpoint.Balance
	store shareStore

	// announced is when the presence row was last written; cur the hand-off under way.
	announced time.Time
	cur       *handoff
	logged    LeaseShare

	mu   sync.Mutex
	last checkpoint.Share
}

// handoff is one lease being handed off.
type handoff struct {
	p        *processor
	taker    string
	started  time.Time
	deadline time.Time
}

func newBalancer(c *Consumer, bal *checkpoint.Balance, store shareStore) *balancer {
	return &balancer{c: c, bal: bal, store: store}
}

// presenceEvery is how often the presence row is rewritten, and presenceFor how long it lasts.
func (b *balancer) presenceEvery() time.Duration { return b.c.cfg.Failover / 4 }
func (b *balancer) presenceFor() time.Duration   { return b.c.cfg.Failover }

// handoffDeadline bounds a hand-off: the drain (ShutdownTimeout, as at a shutdown) and one
// renewal interval for the KCL to notice the refused renewal.
func (b *balancer) handoffDeadline() time.Duration {
	return b.c.cfg.ShutdownTimeout + leaseRenewEvery(b.c.cfg.Failover)
}

// leaseRenewEvery is how often the KCL renews each lease it holds: failover/4, at most 2 s. A
// hand-off releases its lease at the first renewal after the drain (the KCL has no other way to
// let go of a lease), so this bounds how long a drained lease waits for its taker; each renewal
// is one conditional write per shard.
func leaseRenewEvery(failover time.Duration) time.Duration { return min(failover/4, 2*time.Second) }

// shareSettle is how long a starting worker waits after announcing itself before it takes its
// first look at the share: workers started together then count each other, instead of the first
// one taking every lease and handing them over one by one.
const shareSettle = 500 * time.Millisecond

// settle takes the first look at the share (observe) before the KCL's first round, shareSettle
// after this worker announced itself. Without it, the first round ran without a share and took
// every free lease.
func (b *balancer) settle(ctx context.Context, shards *shardMap, store checkpoint.LeaseStore) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(shareSettle):
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	listed, _, err := shards.snapshot(sctx)
	if err != nil {
		return // the horizon loop's first round observes it
	}
	rows, err := store.Rows(sctx)
	if err != nil {
		return
	}
	b.observe(sctx, listed, rows)
}

// announce writes the presence row (at start, and before it expires).
func (b *balancer) announce(ctx context.Context, now time.Time) {
	if now.Sub(b.announced) < b.presenceEvery() {
		return
	}
	if err := b.store.Announce(ctx, now.Add(b.presenceFor())); err != nil {
		b.c.log.Warn("could not write this worker's presence row; the others may count it out of the share", zap.Error(err))
		return
	}
	b.announced = now
}

// withdraw removes the presence row (the worker stops).
func (b *balancer) withdraw(ctx context.Context) {
	if err := b.store.Withdraw(ctx); err != nil {
		b.c.log.Warn("could not remove this worker's presence row; it expires by itself", zap.Error(err))
	}
}

// observe takes one scan (the shard list and every lease-table row) of the horizon loop.
func (b *balancer) observe(ctx context.Context, shards map[string]shardInfo, list []checkpoint.LeaseRow) {
	if b.c.stopping() {
		return
	}
	now := time.Now()
	b.announce(ctx, now)
	rows := make(map[string]checkpoint.LeaseRow, len(list))
	for _, r := range list {
		if r.Shard != "" {
			rows[r.Shard] = r
		}
	}
	open := make([]string, 0, len(shards))
	for id := range shards {
		if rows[id].Checkpoint != checkpoint.ShardEnd {
			open = append(open, id)
		}
	}
	slices.Sort(open)
	sh := b.bal.Observe(checkpoint.Snapshot{Now: now, Open: open, Rows: list})
	b.mu.Lock()
	b.last = sh
	b.mu.Unlock()
	b.logShare()
	b.progress(now)
	if taker := sh.Plan[b.c.cfg.WorkerID]; taker != "" && b.cur == nil {
		b.start(ctx, now, taker, shards, rows)
	}
}

// logShare logs the share when it changed.
func (b *balancer) logShare() {
	s := b.LeaseShare()
	s.Refusals, s.Handoffs = 0, 0
	if s == b.logged {
		return
	}
	b.logged = s
	b.c.log.Info("lease share", zap.Int("workers", s.Workers), zap.Int("open_shards", s.Open),
		zap.Int("share_floor", s.Floor), zap.Int("share_ceil", s.Ceil), zap.Int("held", s.Held),
		zap.Int64("refusals", b.bal.Refusals()), zap.Int64("handoffs", b.bal.Handoffs()))
}

// LeaseShare returns the last view.
func (b *balancer) LeaseShare() LeaseShare {
	b.mu.Lock()
	sh := b.last
	b.mu.Unlock()
	return LeaseShare{Workers: len(sh.Workers), Open: sh.Open, Floor: sh.Floor, Ceil: sh.Ceil,
		Held: sh.Held[b.c.cfg.WorkerID], Refusals: b.bal.Refusals(), Handoffs: b.bal.Handoffs()}
}

// progress ends the hand-off under way once its lease is released, or at its deadline.
func (b *balancer) progress(now time.Time) {
	h := b.cur
	if h == nil {
		return
	}
	shard := h.p.shard
	switch {
	case h.p.released.Load() && !b.bal.Releasing(shard):
		b.c.log.Info("lease handed off", zap.String("shard", shard), zap.String("to", h.taker),
			zap.Duration("took", now.Sub(h.started)), zap.Int64("handoffs", b.bal.Handoffs()))
		b.cur = nil
	case h.p.stale.Load() && !h.p.released.Load():
		b.c.log.Info("hand-off ended: the lease moved on meanwhile", zap.String("shard", shard))
		b.cur = nil
	case now.After(h.deadline):
		if !h.p.released.Load() {
			b.bal.Release(shard) // the processor was not called: release without its drain
		}
		b.c.log.Warn("hand-off past its deadline; the lease is released as it is (what was not committed is read again by the next owner)",
			zap.String("shard", shard), zap.String("to", h.taker), zap.Duration("after", now.Sub(h.started)))
		b.cur = nil
	}
}

// start reserves one of this worker's leases for taker and asks its processor to hand it off.
// It picks, among the shards whose processor runs under the row's epoch and that are open and
// not waiting for parents, the one with the fewest pending deliveries.
func (b *balancer) start(ctx context.Context, now time.Time, taker string, shards map[string]shardInfo, rows map[string]checkpoint.LeaseRow) {
	var pick *processor
	pending := 0
	for _, p := range b.c.liveProcessors() {
		r := rows[p.shard]
		info, listed := shards[p.shard]
		if p.epoch == 0 || p.handoff.Load() || r.Owner != b.c.cfg.WorkerID || r.Epoch != p.epoch || r.HandoffTo != "" ||
			r.Checkpoint == checkpoint.ShardEnd || !listed || info.closed || parentsOpen(info, shards, rows) {
			continue
		}
		n := p.track.Pending()
		if pick == nil || n < pending || (n == pending && p.shard < pick.shard) {
			pick, pending = p, n
		}
	}
	if pick == nil {
		return
	}
	deadline := now.Add(b.handoffDeadline())
	if err := b.store.Reserve(ctx, pick.shard, pick.epoch, taker, deadline.Add(b.c.cfg.Failover)); err != nil {
		b.c.log.Warn("could not reserve a lease for its hand-off", zap.String("shard", pick.shard), zap.String("to", taker), zap.Error(err))
		return
	}
	b.cur = &handoff{p: pick, taker: taker, started: now, deadline: deadline}
	pick.handoff.Store(true)
	b.c.log.Info("handing off a lease above this worker's share", zap.String("shard", pick.shard), zap.String("to", taker),
		zap.Int("pending_deliveries", pending))
}

// parentsOpen reports whether a shard's parents are still listed and not finished (its
// processor waits for them).
func parentsOpen(info shardInfo, shards map[string]shardInfo, rows map[string]checkpoint.LeaseRow) bool {
	for _, parent := range info.parents {
		if _, listed := shards[parent]; listed && rows[parent].Checkpoint != checkpoint.ShardEnd {
			return true
		}
	}
	return false
}

// handOffNow runs the hand-off the balancer asked for (once); it reports whether it ran now.
func (p *processor) handOffNow() bool {
	if !p.handoff.Load() || p.handedOff {
		return false
	}
	p.handedOff = true
	p.handOff()
	return true
}

// handOff gives up the shard's lease (the balancer asked for it): it hands nothing more on,
// drains what it handed on (committed and checkpointed, by the shutdown's deadline rule), then
// makes the lease store refuse its next renewal, so that the KCL ends the consumer and
// releases the lease. The KCL calls no Shutdown for a consumer that ends that way. Called on
// the KCL's goroutine (ProcessRecords).
func (p *processor) handOff() {
	p.halted = true
	ctx, cancel := p.c.shutdownContext()
	defer cancel()
	p.finalHorizon()
	if err := p.drain(ctx); err != nil {
		p.log.Warn("hand-off: pending changes not committed; the next owner reads them again", zap.Error(err))
		p.hz.closed.Store(true)
	} else {
		p.checkpoint(true)
		p.publish(ctx, true)
	}
	if b := p.c.share.Load(); b != nil {
		b.bal.Release(p.shard)
	}
	p.released.Store(true)
	p.log.Info("hand-off: drained; releasing the lease", zap.String("checkpoint", p.saved))
}
