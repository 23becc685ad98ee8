package consumer

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// Defaults of the ordering guard's consumer side.
const (
	// DefaultArrivalMargin is how far before its read time a caught-up shard's horizon is put.
	// AWS documents that a record put to Kinesis is typically readable in under a second
	// (propagation delay), and NTP-synced clocks (required by the KCL's leases anyway) agree
	// within tens of milliseconds; 2 s covers both with room.
	DefaultArrivalMargin = 2 * time.Second
	// DefaultMaxReadAhead is how far past W (by arrival time) a shard that is not holding W
	// back reads before it pauses.
	DefaultMaxReadAhead = 30 * time.Second
	// DefaultHorizonInterval is how often the horizons are published and W computed, in
	// rounds aligned to the wall clock (runHorizons).
	DefaultHorizonInterval = time.Second
	// maxAlignWait bounds one pause of read-ahead alignment inside one ProcessRecords call:
	// Kinesis shard iterators expire 5 minutes after they were issued, and an expired one ends
	// the KCL's shard consumer (a replay after re-leasing). After it, the batch goes on and the
	// next one pauses again.
	maxAlignWait = 4 * time.Minute
	// heartbeatTicks: an unchanged horizon is published again every this many intervals, so
	// HorizonAt shows the owner alive.
	heartbeatTicks = 10
	// heldLogAge and heldLogEvery: a W older than heldLogAge logs the shard holding it back, at
	// most once per heldLogEvery per shard.
	heldLogAge   = 30 * time.Second
	heldLogEvery = time.Minute
)

// watermarkState is W and the commit bound as the horizon loop last computed them (unix
// milliseconds, 0 = unknown), for concurrent readers.
type watermarkState struct {
	w, bound atomic.Int64
	// bounds is the bound with the gates, as one snapshot (nil: none computed yet).
	bounds  atomic.Pointer[Bounds]
	mu      sync.Mutex
	changed chan struct{} // closed after every computation
	// holder and owner name the shard holding W back and its lease owner (guarded by mu).
	holder, owner string
}

// holding returns the shard holding W back and its lease owner ("" when none).
func (s *watermarkState) holding() (shard, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder, s.owner
}

func (s *watermarkState) changedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

func (s *watermarkState) set(r wmResult) {
	s.w.Store(msOf(r.W))
	s.bound.Store(msOf(r.Bound))
	s.bounds.Store(&Bounds{Bound: r.Bound, Gates: r.Gates})
	s.mu.Lock()
	s.holder, s.owner = r.Holder, r.HolderOwner
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeOf(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Watermark returns the stream-wide watermark W: every shard that can still deliver records has
// handed on every record that arrived at or before it (zero: unknown, at start or while a shard
// has no known horizon). Safe for concurrent use.
func (c *Consumer) Watermark() time.Time { return timeOf(c.wm.w.Load()) }

// CommitBound returns the bound a table writer commits up to: changes that arrived at or before
// it (zero: nothing may commit yet). It is W. Safe for concurrent use.
func (c *Consumer) CommitBound() time.Time { return timeOf(c.wm.bound.Load()) }

// Bounds is the commit bound with the cross-process gates of one computation (design.md §4).
type Bounds struct {
	// Bound is CommitBound (zero: nothing may commit).
	Bound time.Time
	// Gates are the cross-process gates per source table (checkpoint.PendingTables.For): the
	// oldest record of each kind that another process has read and not committed. Read-only.
	Gates checkpoint.PendingTables
}

// BoundsChanged returns a channel that is closed after the next computation of the bounds (at
// most every consumer.horizon_interval). Safe for concurrent use.
func (c *Consumer) BoundsChanged() <-chan struct{} { return c.wm.changedCh() }

// CommitBounds returns the last computed Bounds as one consistent snapshot (all zero before the
// first computation). Safe for concurrent use.
func (c *Consumer) CommitBounds() Bounds {
	if b := c.wm.bounds.Load(); b != nil {
		return *b
	}
	return Bounds{}
}

func (c *Consumer) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return time.Now()
}

// sleep waits d or until ctx ends (c.sleeper, replaced in tests, when set).
func (c *Consumer) sleep(ctx context.Context, d time.Duration) {
	if c.sleeper != nil {
		c.sleeper(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// horizonLoop is the one goroutine of a consumer that publishes its shards' horizons and
// computes W every HorizonInterval, until ctx ends. Its state (memo, log times) is its own.
type horizonLoop struct {
	c      *Consumer
	memo   map[string]time.Time
	logged map[string]time.Time
	shards map[string]shardInfo // the last shard list read
	// unknownSince is when W was last seen becoming unknown (zero: W is known).
	unknownSince time.Time
	// margin is the arrival margin of the last publish phase, marginLogged when a change of
	// it was last logged.
	margin       time.Duration
	marginLogged time.Time
	// peers is the largest arrival margin other workers published on the rows of the last scan
	// (0: none).
	peers time.Duration
	// async: a round uses the cached shard list and refreshes it in the background (listing).
	// Off in unit tests, which change the fake stream between rounds.
	async bool
	// refreshing is set while a background refresh runs; refreshed receives its error; bg
	// waits for it when the loop stops.
	refreshing bool
	refreshed  chan error
	bg         sync.WaitGroup
	// late is how long after a round's start W waits for a late ListShards call (awaitListing).
	late time.Duration
}

func newHorizonLoop(c *Consumer) *horizonLoop {
	return &horizonLoop{c: c, memo: make(map[string]time.Time), logged: make(map[string]time.Time), refreshed: make(chan error, 1),
		late: listingLate(durOr(c.cfg.HorizonInterval, DefaultHorizonInterval))}
}

func (c *Consumer) runHorizons(ctx context.Context) {
	l := newHorizonLoop(c)
	l.async = true
	defer l.bg.Wait()
	interval := durOr(c.cfg.HorizonInterval, DefaultHorizonInterval)
	for {
		start := nextRound(time.Now(), interval)
		if !sleepUntil(ctx, start) {
			return
		}
		r := l.publishPhase(ctx)
		if !sleepUntil(ctx, start.Add(computeDelay(interval))) {
			return
		}
		l.computePhase(ctx, r)
	}
}

// nextRound is the first wall-clock multiple of interval after now: every worker starts its
// rounds there (NTP-synced clocks, which the leases need anyway), so the rows another worker
// publishes at a round's start are in this worker's scan computeDelay later.
func nextRound(now time.Time, interval time.Duration) time.Time {
	return now.Truncate(interval).Add(interval)
}

// computeDelay is how long after a round's start W is computed: time for every worker's
// publishes to land.
func computeDelay(interval time.Duration) time.Duration { return min(interval/4, 250*time.Millisecond) }

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// round is what a round's publish phase hands its compute phase.
type round struct {
	began, listed, published time.Time
	shards                   map[string]shardInfo
	listedAt                 time.Time
}

// tick is one round without the pause between its phases (unit tests).
func (l *horizonLoop) tick(ctx context.Context) { l.computePhase(ctx, l.publishPhase(ctx)) }

// publishPhase lists the shards and publishes the own shards' horizons.
func (l *horizonLoop) publishPhase(loopCtx context.Context) round {
	ctx, cancel := context.WithTimeout(loopCtx, 30*time.Second)
	defer cancel()
	r := round{began: time.Now()}
	r.shards, r.listedAt = l.listing(loopCtx, ctx)
	r.listed = time.Now()
	if age := r.listed.Sub(r.listedAt); !r.listedAt.IsZero() && age > durOr(l.c.cfg.HorizonInterval, DefaultHorizonInterval) &&
		r.listed.Sub(l.logged["stale-list"]) >= heldLogEvery {
		l.logged["stale-list"] = r.listed
		l.c.log.Info("horizon round uses an older shard list (ListShards slower than the round waits for it): the tip rule trails by its age",
			zap.Duration("list_age", age), zap.Duration("waited", listingWait))
	}
	margin := l.arrivalMargin()
	for _, p := range l.c.liveProcessors() {
		p.updateHorizon(r.open(p.shard), margin)
		p.publish(ctx, false)
	}
	r.published = time.Now()
	return r
}

// open is when the round's list saw the shard open (zero: not known open).
func (r round) open(shard string) time.Time {
	if info, ok := r.shards[shard]; ok && !info.closed {
		return r.listedAt
	}
	return time.Time{}
}

// arrivalMargin is the margin for a round (the measured one, or the configured one without a
// meter), reported to the metrics and logged when it changes.
func (l *horizonLoop) arrivalMargin() time.Duration {
	c := l.c
	if c.margin == nil {
		return durOr(c.cfg.ArrivalMargin, DefaultArrivalMargin)
	}
	now := c.now()
	r := c.margin.read(now)
	margin := c.margin.use(r, l.peers)
	c.metrics.ArrivalMargin(margin)
	if margin != l.margin && (margin == c.margin.cap || l.margin == c.margin.cap || now.Sub(l.marginLogged) >= heldLogEvery) {
		l.marginLogged = now
		c.log.Info("arrival margin", zap.Duration("margin", margin), zap.Duration("was", l.margin),
			zap.Duration("measured", r.margin), zap.Bool("evidence", r.evidence), zap.Duration("other_workers", l.peers),
			zap.Int("observations", r.n), zap.Duration("largest_delay", r.largest))
	}
	l.margin = margin
	return margin
}

// computePhase scans the lease table and computes W, with the own shards' horizons as they
// are now.
func (l *horizonLoop) computePhase(loopCtx context.Context, r round) {
	c := l.c
	ctx, cancel := context.WithTimeout(loopCtx, 30*time.Second)
	defer cancel()
	var scanned time.Time
	defer func() {
		// A slow round is a round without a new W: the tables commit nothing newer meanwhile.
		if took := time.Since(r.began); took > durOr(c.cfg.HorizonInterval, DefaultHorizonInterval) {
			l.c.log.Info("slow horizon round: W was not recomputed meanwhile", zap.Duration("took", took),
				zap.Duration("list_shards", sinceOr(r.listed, r.began)), zap.Duration("publish", sinceOr(r.published, r.listed)),
				zap.Duration("scan_leases", sinceOr(scanned, r.published)))
		}
	}()
	if r.shards == nil {
		return
	}
	list, err := c.leases.Rows(ctx)
	scanned = time.Now()
	if err != nil && list == nil {
		l.warn("scan", "could not read the lease table; W is not recomputed", err)
		return
	}
	rows := make(map[string]checkpoint.LeaseRow, len(list))
	l.peers = 0
	for _, r := range list {
		rows[r.Shard] = r
		if r.Owner != "" && r.Owner != c.cfg.WorkerID && r.Checkpoint != checkpoint.ShardEnd {
			l.peers = max(l.peers, r.Margin)
		}
	}
	r = l.lateListing(ctx, r)
	shards := r.shards
	if listingBehind(shards, rows) {
		// The list predates a reshard that the rows already show: list now, and keep the
		// last W (computed from a consistent snapshot) if that fails or still lags the rows.
		if shards, _, err = c.shards.snapshot(ctx); err == nil && listingBehind(shards, rows) {
			err = errors.New("ListShards still lists open a shard whose lease row is at SHARD_END")
		}
		if err != nil {
			l.warn("shard-list", "the stream's shard list lags a reshard; W is not recomputed", err)
			return
		}
		l.shards = shards
	}
	if b := c.share.Load(); b != nil {
		b.observe(ctx, shards, list)
	}
	margin := l.margin
	if c.margin == nil {
		margin = durOr(c.cfg.ArrivalMargin, DefaultArrivalMargin)
	}
	own := make(map[string]ownShard)
	for _, p := range c.liveProcessors() {
		if row := rows[p.shard]; row.Owner == c.cfg.WorkerID && row.Epoch == p.epoch && p.epoch != 0 {
			p.updateHorizon(r.open(p.shard), margin) // the reads since the publish count too
			horizon := timeOf(p.hz.horizon.Load())   // before the pending: what it covers is registered
			pending, _ := p.track.Oldest()
			own[p.shard] = ownShard{horizon: horizon, pending: pending}
		}
	}
	l.report(rows, wmCompute(wmInput{shards: shards, rows: rows, own: own, memo: l.memo}))
}

// report publishes a computed W to the readers and the metrics, and logs a shard holding it
// back for long.
func (l *horizonLoop) report(rows map[string]checkpoint.LeaseRow, res wmResult) {
	c := l.c
	c.wm.set(res)
	now := c.now()
	var age time.Duration
	switch {
	case !res.W.IsZero():
		age, l.unknownSince = now.Sub(res.W), time.Time{}
	case l.unknownSince.IsZero():
		l.unknownSince = now
	}
	c.metrics.StreamWatermark(res.W, age, res.Holder, res.HolderOwner)
	held := age > heldLogAge || (res.W.IsZero() && now.Sub(l.unknownSince) > heldLogAge)
	if res.Holder != "" && held && now.Sub(l.logged[res.Holder]) >= heldLogEvery {
		l.logged[res.Holder] = now
		r := rows[res.Holder]
		c.log.Warn("stream watermark held back: tables commit only changes that arrived before it",
			zap.String("shard", res.Holder), zap.String("last_owner", r.Owner), zap.Time("watermark", res.W),
			zap.Duration("age", age), zap.Time("shard_horizon", r.ReadHorizon), zap.Time("published_at", r.HorizonAt),
			zap.Int("shards_unknown", res.Unknown))
	}
	for id, at := range l.logged {
		if now.Sub(at) > 2*heldLogEvery {
			delete(l.logged, id) // bounded
		}
	}
}

// listingMaxAge bounds how old a cached shard list a round may use before it lists itself.
const listingMaxAge = 10 * time.Second

// listingWait is how long a round waits for its ListShards call before it goes on with the
// cached list (the call finishes in the background).
const listingWait = 200 * time.Millisecond

// listing returns the shard list for a round (ctx bounds the round, loopCtx the loop, which a
// background call outlives the round in) and when it was taken (zero: unknown, so the tip rule
// does not apply). A synchronous loop (unit tests) lists every round, as does any loop whose
// cached list is missing or older than listingMaxAge. Otherwise the round starts a ListShards
// call (unless one is still running) and waits up to listingWait for it: a fast call gives the
// round a fresh list, as before; a slow one (over a second in the emulator: every commit waited
// for it, the freshness tail) no longer holds the round, which goes on with the cached list.
// The tip rule is then capped at that list's older time, so it is more cautious for the round;
// and tick checks the rows for the one case an older list misses (listingBehind).
func (l *horizonLoop) listing(loopCtx, ctx context.Context) (map[string]shardInfo, time.Time) {
	c := l.c
	shards, at := c.shards.cachedAt()
	if !l.async || shards == nil || time.Since(at) >= listingMaxAge {
		if l.refreshing { // a background call from before: wait for it, then list now
			l.collect(<-l.refreshed)
		}
		shards, at, err := c.shards.snapshot(ctx)
		if err != nil {
			l.warn("shard-list", "could not list the stream's shards; horizons do not advance at the tip", err)
			return l.shards, time.Time{}
		}
		l.shards = shards
		return shards, at
	}
	if !l.refreshing {
		l.refreshing = true
		l.bg.Add(1)
		go func() {
			defer l.bg.Done()
			rctx, cancel := context.WithTimeout(loopCtx, 30*time.Second)
			defer cancel()
			l.refreshed <- c.shards.refresh(rctx)
		}()
	}
	l.waitRefresh(ctx, listingWait)
	shards, at = c.shards.cachedAt()
	l.shards = shards
	return shards, at
}

// lateListing returns r with the list W is computed with: a ListShards call that outlasted the
// round's publish and has answered since (awaitListing) caps the own shards' tip rule less than
// the round's list. The horizons already published keep the round's list (a second publish
// from here let the byte budget and the ordering guard deadlock, 1 run in about 10 of
// TestBudgetWithOrderingGuardDoesNotDeadlock); the other workers see them at the next round.
func (l *horizonLoop) lateListing(ctx context.Context, r round) round {
	l.awaitListing(ctx, r)
	if newer, at := l.c.shards.cachedAt(); newer != nil && at.After(r.listedAt) {
		r.shards, r.listedAt = newer, at
	}
	return r
}

// listingLate is how long after a round's start W waits for a ListShards call that outlasted the
// round's publish (listingWait): the own shards' tip rule is capped at the list's time, so with
// the older list W would not move this round, and a W a few hundred ms late costs less than a
// round without one (a second of freshness).
func listingLate(interval time.Duration) time.Duration {
	return min(interval*3/5, 600*time.Millisecond)
}

// awaitListing waits, while the ListShards call round r started is still running and r went on
// with an older list, until the call answers or l.late after r began.
func (l *horizonLoop) awaitListing(ctx context.Context, r round) {
	if !l.async || !l.refreshing || !r.listedAt.Before(r.began) {
		return
	}
	l.waitRefresh(ctx, time.Until(r.began.Add(l.late)))
}

// waitRefresh waits up to d for the running background ListShards call and collects it if it
// answers.
func (l *horizonLoop) waitRefresh(ctx context.Context, d time.Duration) {
	wait := time.NewTimer(d)
	defer wait.Stop()
	select {
	case err := <-l.refreshed:
		l.collect(err)
	case <-wait.C:
	case <-ctx.Done():
	}
}

// collect ends a background ListShards call with its result.
func (l *horizonLoop) collect(err error) {
	l.refreshing = false
	if err != nil {
		l.warn("shard-list", "could not list the stream's shards; the last list is used", err)
	}
}

// listingBehind reports whether a shard list is older than the lease rows in a way that
// matters to W: a shard it lists as open is at SHARD_END in its row. Such a shard was closed
// by a reshard after the list was taken, and does not count any more, while its children,
// which hold records after its end, are not in the list yet. (A closed shard's children are in
// every list that shows it closed.)
func listingBehind(shards map[string]shardInfo, rows map[string]checkpoint.LeaseRow) bool {
	for id, r := range rows {
		if info, ok := shards[id]; ok && !info.closed && r.Checkpoint == checkpoint.ShardEnd {
			return true
		}
	}
	return false
}

// sinceOr is to - from, or 0 when either is unset (the round ended before that phase).
func sinceOr(to, from time.Time) time.Duration {
	if to.IsZero() || from.IsZero() {
		return 0
	}
	return to.Sub(from)
}

// warn logs a failure of the loop, at most once per heldLogEvery per kind.
func (l *horizonLoop) warn(kind, msg string, err error) {
	now := l.c.now()
	if now.Sub(l.logged[kind]) < heldLogEvery {
		return
	}
	l.logged[kind] = now
	l.c.log.Warn(msg, zap.Error(err))
}

// liveProcessors returns the newest processor of every shard that is still running.
func (c *Consumer) liveProcessors() []*processor {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*processor, 0, len(c.gen))
	for _, p := range c.gen {
		if p.track != nil && !p.stale.Load() && !p.hz.closed.Load() {
			out = append(out, p)
		}
	}
	return out
}

// horizonState is a processor's read horizon, written by the processor (lastArrival, tipAt)
// and the horizon loop (horizon), read by both.
type horizonState struct {
	// lastArrival is the arrival of the last record handed on (unix ms, 0: none);
	// firstArrival that of the first one this processor handed on.
	lastArrival, firstArrival atomic.Int64
	// tipAt is the time just before the last read that was at the tip of the shard
	// (MillisBehindLatest == 0) and whose records were all handed on (unix ms, 0: none).
	tipAt atomic.Int64
	// horizon is ownHorizon of the above (unix ms, 0: unknown); it never goes back.
	horizon atomic.Int64
	// closed is set when the processor has shut down: nothing is published after it.
	closed atomic.Bool
	// paused is set while the processor waits for read-ahead alignment.
	paused atomic.Bool

	pubMu     sync.Mutex // serializes publishes; guards the fields below
	published checkpoint.Horizon
	since     int // ticks since the last publish
}

// updateHorizon recomputes the horizon; listedOpen is when a ListShards saw the shard open,
// margin the arrival margin in use.
func (p *processor) updateHorizon(listedOpen time.Time, margin time.Duration) {
	for {
		prev := p.hz.horizon.Load()
		h := msOf(ownHorizon(timeOf(prev), timeOf(p.hz.lastArrival.Load()), timeOf(p.hz.tipAt.Load()), listedOpen, margin))
		if h <= prev || p.hz.horizon.CompareAndSwap(prev, h) {
			return
		}
	}
}

// finalHorizon is called when the processor stops reading (any shutdown): every record it will
// ever hand on has been handed on, so its horizon may include the last record's millisecond.
// (While reading, ownHorizon stays 1 ms short of it, since the next record may share that
// millisecond.) Without this a drain would wait for a commit bound that can never pass the
// records of that last millisecond.
func (p *processor) finalHorizon() {
	last := p.hz.lastArrival.Load()
	for {
		prev := p.hz.horizon.Load()
		if last <= prev || p.hz.horizon.CompareAndSwap(prev, last) {
			return
		}
	}
}

// publish writes the shard's horizon and oldest pending arrival on its lease row, if they
// changed (or as a heartbeat). final is the last publish of this processor (at its shutdown,
// after the drain): nothing is published after it.
func (p *processor) publish(ctx context.Context, final bool) {
	p.hz.pubMu.Lock()
	defer p.hz.pubMu.Unlock()
	if p.hz.closed.Load() || p.stale.Load() {
		return
	}
	if final {
		p.hz.closed.Store(true)
	}
	// The horizon is read first: every record it covers was registered with the tracker before
	// the horizon passed it, so the pending arrivals read after it include all of them.
	read := timeOf(p.hz.horizon.Load())
	pending, ok := p.track.Oldest()
	if ok && pending.IsZero() {
		pending = timeOf(p.hz.lastArrival.Load()) // unknown first arrival: the best lower estimate
	}
	h := checkpoint.Horizon{Read: read, PendingFrom: pending, Pending: p.track.PendingTables(), At: p.c.now(),
		Margin: p.c.margin.published()}
	p.hz.since++
	was := p.hz.published
	unchanged := h.Read.Equal(was.Read) && h.PendingFrom.Equal(was.PendingFrom) && maps.EqualFunc(h.Pending, was.Pending, checkpoint.TableGates.Equal) &&
		h.Margin == was.Margin
	if h.Read.IsZero() && h.PendingFrom.IsZero() || (unchanged && !final && p.hz.since < heartbeatTicks) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := p.c.leases.PublishHorizon(pctx, p.shard, p.epoch, h)
	if err != nil {
		p.c.metrics.HorizonPublishFailed(p.shard)
		if errors.Is(err, checkpoint.ErrFenced) {
			p.stale.Store(true)
			p.c.metrics.Fenced(p.shard)
			p.log.Warn("lease moved on; this processor stops publishing and checkpointing", zap.Error(err))
			return
		}
		p.log.Warn("could not publish the shard's horizon; will retry", zap.Error(err))
		return
	}
	p.hz.published, p.hz.since = h, 0
}

// handedOn records that the record that arrived at arrival was handed on.
func (p *processor) handedOn(arrival time.Time) {
	ms := msOf(arrival)
	if ms > p.hz.lastArrival.Load() {
		p.hz.lastArrival.Store(ms)
	}
	if ms != 0 && p.hz.firstArrival.Load() == 0 {
		p.hz.firstArrival.Store(ms)
	}
}

// atTip records a read at the tip of the shard, started at readTime, fully handed on.
func (p *processor) atTip(readTime time.Time) {
	if ms := msOf(readTime); ms > p.hz.tipAt.Load() {
		p.hz.tipAt.Store(ms)
	}
}

// align waits until the record that arrived at arrival may be handed on:
//
//   - a shard whose own horizon is unknown (nothing handed on yet) always proceeds: it is what
//     holds W back, or will be;
//   - while W is known: up to W + MaxReadAhead, and beyond it while this shard is the one
//     holding W back (its horizon at or below W), so the slowest shard always proceeds;
//   - while W is unknown (at start, before every shard has a horizon): up to MaxReadAhead past
//     the first record this processor handed on (or its horizon from reads at the tip), then
//     it waits for W.
//
// One ProcessRecords call pauses at most maxAlignWait in all (p.alignBy, reset per call); after
// that the rest of its batch goes on. It returns false when the processor's context ended while
// waiting.
func (p *processor) align(arrival time.Time) bool {
	if p.mayHandOn(arrival) {
		return true // the hot path: no allocation, no timer
	}
	if p.alignBy.IsZero() {
		p.alignBy = time.Now().Add(maxAlignWait)
	}
	started := time.Now()
	timer := time.NewTimer(time.Until(p.alignBy))
	p.hz.paused.Store(true)
	defer func() {
		timer.Stop()
		p.hz.paused.Store(false)
		p.c.metrics.ReadAheadPaused(p.shard, time.Since(started))
	}()
	for {
		select {
		case <-p.ctx.Done():
			return false
		case <-timer.C:
			p.alignOff = true
			p.log.Warn("read-ahead alignment paused this shard for the longest one read may wait; handing on the rest of this batch anyway (the commit bound keeps tables correct)",
				zap.Duration("waited", maxAlignWait), zap.Time("record_arrival", arrival), zap.Time("watermark", p.c.Watermark()))
			return true
		case <-p.c.wm.changedCh():
		}
		if p.mayHandOn(arrival) {
			return true
		}
	}
}

// mayHandOn is align's rule without waiting.
func (p *processor) mayHandOn(arrival time.Time) bool {
	w := p.c.wm.w.Load()
	h, last := p.hz.horizon.Load(), p.hz.lastArrival.Load()
	if p.alignOff || (h == 0 && last == 0) || (w != 0 && max(h, last-1) <= w) {
		return true
	}
	base := w
	if w == 0 {
		base = p.hz.firstArrival.Load()
		if base == 0 {
			base = h // known only from reads at the tip
		}
	}
	return arrival.UnixMilli() <= base+durOr(p.c.cfg.MaxReadAhead, DefaultMaxReadAhead).Milliseconds()
}
