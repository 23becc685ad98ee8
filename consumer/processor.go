package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// processor handles one lease of one shard. The KCL calls it from one goroutine.
type processor struct {
	c     *Consumer
	ctx   context.Context
	dec   *dms.Decoder
	shard string
	log   *zap.Logger
	track *checkpoint.Shard
	// epoch is the lease epoch this processor was started under; its checkpoints are
	// conditional on it.
	epoch int64
	// saved is the last checkpoint this processor wrote (or started from), savedAt when.
	saved   string
	savedAt time.Time
	// lastData is the last sequence number of the last delivery that held more than
	// heartbeats: a checkpoint that passes nothing newer waits (checkpoint).
	lastData string
	// parents are the shards that must be finished before this one's records are handed on.
	parents []string
	gated   bool
	// halted is set when a delivery was not handed on (shutdown while gated, or a fatal error):
	// nothing after it may be handed on or checkpointed by this processor.
	halted bool
	// stale is set when a newer processor took over the same shard in this worker, or a
	// checkpoint was fenced; a stale processor never writes a checkpoint again.
	stale atomic.Bool
	// handoff is set by the balancer to make the processor hand its lease off (handoff.go);
	// released once it has drained and asked for the release. handedOff: handOff ran.
	handoff, released atomic.Bool
	handedOff         bool
	// hz is the shard's read horizon (horizon.go).
	hz horizonState
	// probe remembers the previous read for the arrival margin's evidence (margin.go).
	probe tipProbe
	// keys is the sink when it knows tables' key columns (nil: it does not), asked per update.
	keys KeyColumner
	// alignBy and alignOff bound read-ahead alignment within one ProcessRecords call.
	alignBy  time.Time
	alignOff bool
	// tracked is the scratch list of the kinds and arrivals of one delivery's events.
	tracked []checkpoint.Tracked
	// acct is this processor's share of the process-wide byte budget (nil: no budget).
	acct *membudget.Account
}

func (p *processor) Initialize(in *kcl.InitializationInput) {
	p.shard = in.ShardId
	p.log = p.c.log.With(zap.String("shard", p.shard))
	start := ""
	if in.ExtendedSequenceNumber != nil && in.ExtendedSequenceNumber.SequenceNumber != nil {
		start = aws.ToString(in.ExtendedSequenceNumber.SequenceNumber)
	}
	if start == "TRIM_HORIZON" || start == "LATEST" || start == "AT_TIMESTAMP" || start == checkpoint.ShardEnd {
		start = ""
	}
	p.saved = start
	p.track = checkpoint.NewShard(p.shard, start)
	if kc, ok := p.c.sink.(KeyColumner); ok {
		p.keys = kc
		p.track.WithKeyColumns(kc.KeyColumns)
	}
	p.epoch = p.c.leases.Epoch(p.shard)
	p.c.register(p)
	// The shard holding the stream watermark back may always hand on its next delivery: its
	// reading is what lets the commit bound pass the records everyone else holds (design.md §8).
	p.acct.SetExempt(func() bool { h, _ := p.c.wm.holding(); return h == p.shard }, p.c.wm.changedCh)

	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	info, _, err := p.c.shards.lookup(ctx, p.shard, false)
	if err != nil {
		p.log.Warn("could not read the shard's parents; will retry before the first delivery", zap.Error(err))
		p.gated = true // checked again in ProcessRecords
	}
	p.parents = info.parents
	p.gated = p.gated || len(p.parents) > 0
	if start != "" {
		gap, err := trimmedPast(ctx, p.c.kc, p.c.cfg.Stream, p.shard, start)
		switch {
		case err != nil:
			p.log.Warn("could not check the checkpoint against the stream's retention", zap.Error(err))
		case gap:
			p.c.metrics.TrimmedPast(p.shard)
			p.log.Error("the checkpointed record is no longer in the stream: records after it may have been trimmed by the retention period before they were read (data loss upstream of dms2iceberg); continuing from the oldest record still available",
				zap.String("checkpoint", start))
		}
	}
	p.log.Info("shard processor started", zap.String("from", start), zap.Int64("epoch", p.epoch), zap.Strings("parents", p.parents))
}

func (p *processor) ProcessRecords(in *kcl.ProcessRecordsInput) {
	if p.handOffNow() || p.halted {
		return
	}
	if p.gated {
		if err := p.waitForParents(); err != nil {
			p.halted = true
			p.log.Info("not handing on records while parents are unfinished", zap.Error(err))
			return
		}
	}
	p.checkpoint(false)
	readTime := p.c.now()
	if in.CacheEntryTime != nil {
		readTime = *in.CacheEntryTime // just before the read: the earlier, the safer
		defer p.pace(*in.CacheEntryTime, len(in.Records) == 0 && in.MillisBehindLatest < p.c.cfg.IdleBetweenReads.Milliseconds())
	}
	complete := in.MillisBehindLatest == 0 && (p.c.cfg.MaxRecords <= 0 || len(in.Records) < p.c.cfg.MaxRecords)
	if delay, ok := p.probe.next(readTime, complete, oldestArrival(in.Records)); ok {
		p.c.margin.observe(p.c.now(), delay)
	}
	if len(in.Records) == 0 {
		if in.MillisBehindLatest == 0 {
			p.atTip(readTime)
		}
		return
	}
	kept, changes, ok := p.admit(in)
	if !ok {
		return
	}
	heartbeats := len(in.Records) - changes
	events, first, arrived, ok := p.decode(in.Records, heartbeats, kept)
	if !ok {
		return
	}
	fault.Hit(fault.AfterDecode)
	p.c.margin.checkLate(p.log, p.c.metrics, p.shard, p.hz.horizon.Load(), events, p.c.now())
	if heartbeats > 0 {
		p.c.metrics.Heartbeats(p.shard, "read", heartbeats)
	}
	d := p.begin(in.Records, events, first, changes)
	if !p.handOn(d, events) {
		return
	}
	p.handedOn(arrived) // the last record may have been dead-lettered: it is done too
	if in.MillisBehindLatest == 0 {
		p.atTip(readTime)
	}
	p.checkpoint(false)
}

// admit admits the delivery's bytes against the process-wide budget before anything of it is
// handed on (backpressure: this blocks while the budget is spent, unless this processor holds
// nothing); each event gives its bytes back when it is acknowledged. It returns the bytes admitted
// and the number of changes, or false, with the processor halted, when it stopped while waiting.
//
// Heartbeats are neither kept nor counted as records: they are no change, and a delivery of them
// alone is checkpointed only once a minute, which /healthz's stall check would take for a stall.
func (p *processor) admit(in *kcl.ProcessRecordsInput) (kept int64, changes int, ok bool) {
	for i := range in.Records {
		if !isHeartbeat(&in.Records[i]) {
			kept += int64(len(in.Records[i].Data))
			changes++
		}
	}
	p.c.metrics.Records(p.shard, changes, in.MillisBehindLatest)
	if err := p.acct.Acquire(p.ctx, kept); err != nil {
		p.halted = true
		p.log.Info("not handing on records: stopped while waiting for the memory budget", zap.Error(err))
		return kept, changes, false
	}
	return kept, changes, true
}

// decode decodes the delivery's records (kept bytes of them admitted) into events, skipping the
// heartbeats when there are any and dead-lettering the records that do not decode. first is the
// arrival of the first record, arrived that of the last. It returns false, with the delivery's
// bytes released and the processor halted, when a record could be neither decoded nor
// dead-lettered.
func (p *processor) decode(records []ktypes.Record, heartbeats int, kept int64) (events []change.Event, first, arrived time.Time, ok bool) {
	events = make([]change.Event, 0, len(records))
	// Arrivals are raised to the shard's latest so far, so that they never go back within the
	// shard (ApproximateArrivalTimestamp is approximate): the order the gates compare is the
	// one the sink orders by.
	arrived = timeOf(p.hz.lastArrival.Load())
	for i := range records {
		r := &records[i]
		seq := aws.ToString(r.SequenceNumber)
		arrived = maxTime(arrived, p.arrival(r))
		if i == 0 {
			first = arrived
		}
		if heartbeats > 0 && isHeartbeat(r) {
			continue // not a change: it only moves the horizon (its arrival, folded in above)
		}
		events = append(events, change.Event{})
		ev := &events[len(events)-1]
		// Shared: the event keeps r.Data (Raw) until acknowledged, and nothing writes it. The
		// SDK decodes each record's base64 into a slice of its own, so a string kept longer (a
		// table name, a metric label) holds that record only, as it held the arena before.
		if err := p.dec.DecodeShared(r.Data, ev); err != nil {
			events = events[:len(events)-1]
			if !p.deadLetter(seq, r.Data, err) {
				p.acct.Release(kept) // nothing of the delivery was handed on
				p.halted = true
				return nil, first, arrived, false
			}
			p.acct.Release(int64(len(r.Data))) // stored: the dead letter holds it no more
			kept -= int64(len(r.Data))
			continue
		}
		ev.Pos = change.Position{Stream: p.c.cfg.Stream, Shard: p.shard, Seq: seq}
		ev.Raw = r.Data
		ev.Arrival = arrived
	}
	return events, first, arrived, true
}

// begin starts tracking the delivery (its last record's sequence number, the first record's
// arrival, and the kinds and arrivals of its events) and notes the last record of a delivery
// with changes.
func (p *processor) begin(records []ktypes.Record, events []change.Event, first time.Time, changes int) *checkpoint.Delivery {
	last := &records[len(records)-1]
	p.tracked = p.tracked[:0]
	for i := range events {
		ev := &events[i]
		kind, move, later := p.kindOf(ev)
		t := checkpoint.Tracked{Schema: ev.Schema, Table: ev.Table, Kind: kind, At: ev.Arrival, Pos: change.SourcePosOf(ev), Move: move}
		if later { // key columns not known yet: the tracker classifies it once they are
			t.Images = &change.Event{Op: ev.Op, Before: slices.Clone(ev.Before), Columns: slices.Clone(ev.Columns)}
		}
		p.tracked = append(p.tracked, t)
	}
	if changes > 0 {
		p.lastData = aws.ToString(last.SequenceNumber)
	}
	return p.track.BeginTracked(aws.ToString(last.SequenceNumber), first, p.tracked)
}

// readSpacing is the least time between the starts of two GetRecords calls on one shard.
// Kinesis allows 5 per second per shard, and the KCL (v1.0.0, polling) counts its calls in
// windows of a second: the 6th call in a window makes it sleep until the window ends
// (localTPSExceededError, "sleep for a second"). It reads again at once after a delivery with
// records, so on a shard with steady traffic it spent its five calls in the first part of each
// window and read nothing for the rest: in BenchmarkFreshness that was about one such sleep per
// shard per second and the whole tail of the freshness (docs/benchmarks.md). Spaced by a fifth of a
// second (and 10 ms, since a window ends only after more than a second), no window takes a
// sixth call, and a record waits at most one spacing for its read.
const readSpacing = time.Second/5 + 10*time.Millisecond

// pace returns once readSpacing has passed since the read of this delivery started (readStart,
// the KCL's time before its GetRecords call), so that the KCL's next call keeps the spacing.
// idles is set when the KCL itself sleeps consumer.idle_between_reads before its next call (an
// empty read at the tip); that sleep counts.
func (p *processor) pace(readStart time.Time, idles bool) {
	if wait := paceWait(readStart, p.c.now(), p.c.cfg.IdleBetweenReads, idles); wait > 0 {
		p.c.sleep(p.ctx, wait)
	}
}

// paceWait is how long pace waits at now: until readSpacing after readStart, less the KCL's own
// idle sleep when it takes one.
func paceWait(readStart, now time.Time, idle time.Duration, idles bool) time.Duration {
	wait := readStart.Add(readSpacing).Sub(now)
	if idles {
		wait -= idle
	}
	return wait
}

// handOn submits the delivery's events, pausing for read-ahead alignment before each one that
// arrived too far past W. It returns false, with the delivery abandoned and the processor
// halted, when an event could not be handed on.
func (p *processor) handOn(d *checkpoint.Delivery, events []change.Event) bool {
	p.alignBy, p.alignOff = time.Time{}, false
	var acks []membudget.Ack // one per event: its acknowledgement releases its bytes
	if p.acct != nil {
		acks = make([]membudget.Ack, len(events))
	}
	for i := range events {
		ev := &events[i]
		ev.Ack = d.Event(i)
		if acks != nil {
			acks[i] = membudget.Ack{Inner: ev.Ack, Account: p.acct, N: int64(len(ev.Raw))}
			ev.Ack = &acks[i]
		}
		var err error
		if !p.align(ev.Arrival) {
			err = p.ctx.Err()
		} else {
			err = p.c.sink.Submit(p.ctx, ev)
		}
		if err != nil {
			if p.ctx.Err() == nil {
				p.c.stop(fmt.Errorf("shard %s: hand over record %s: %w", p.shard, ev.Pos.Seq, err))
			}
			// The rest of the delivery was not handed on, so it can never finish: give it up
			// (never checkpointed, read again after a restart), so that the shutdown drains and
			// checkpoints the deliveries before it instead of waiting for it until the
			// shutdown timeout.
			p.track.Abandon(d)
			p.halted = true
			for j := i; j < len(events); j++ {
				p.acct.Release(int64(len(events[j].Raw))) // never handed on, never acknowledged
			}
			return false
		}
		p.handedOn(ev.Arrival)
	}
	return true
}

// gateBelow returns the oldest gate not after lastMs (unix ms), which records up to lastMs may
// wait for, and its table ("" when there is none).
func gateBelow(gates checkpoint.PendingTables, lastMs int64) (time.Time, string) {
	var oldest time.Time
	table := ""
	for t, g := range gates {
		for k := range g.Kinds {
			if at := g.Kinds[k].At; !at.IsZero() && at.UnixMilli() <= lastMs && (table == "" || at.Before(oldest)) {
				oldest, table = at, t
			}
		}
	}
	return oldest, table
}

// kindOf is the kind the tracker counts ev under for the cross-process gates (design.md §4): an
// update is a possible key change when its images differ in the table's key columns, as the
// sink knows them (KeyColumner), else anywhere (change.MayChangeKey). For a key change whose key
// is known, move is the hash of the old key (change.KeyHash; 0: unknown). later reports a
// possible key change whose table's key columns the sink does not know yet: the tracker
// classifies it from its images once it does (checkpoint.Tracked.Images).
func (p *processor) kindOf(ev *change.Event) (kind checkpoint.Kind, move uint64, later bool) {
	switch {
	case ev.Op == change.OpLoad && change.RoutedByKey(ev):
		return checkpoint.KindLoad, 0, false
	case ev.Op == change.OpLoad:
		return checkpoint.KindLoadNotByKey, 0, false
	case ev.Op == change.OpControl:
		return checkpoint.KindControl, 0, false
	case !change.MayChangeKey(ev):
		return checkpoint.KindChange, 0, false
	case p.keys == nil:
		return checkpoint.KindKeyChange, 0, false
	}
	key := p.keys.KeyColumns(ev.Schema, ev.Table)
	switch {
	case key == nil:
		return checkpoint.KindKeyChange, 0, true
	case !change.ChangesKey(ev, key):
		return checkpoint.KindChange, 0, false
	}
	move, _ = change.KeyHash(ev.Before, key)
	return checkpoint.KindKeyChange, move, false
}

// arrival is the record's ApproximateArrivalTimestamp; a record without one (never from
// Kinesis) gets the arrival of the last record handed on, or zero.
func (p *processor) arrival(r *ktypes.Record) time.Time {
	if r.ApproximateArrivalTimestamp != nil {
		return r.ApproximateArrivalTimestamp.Truncate(time.Millisecond).UTC()
	}
	return timeOf(p.hz.lastArrival.Load())
}

// errStale ends the parent wait of a processor that went stale while it waited.
var errStale = errors.New("this processor is stale (a newer one took the shard, or its lease moved on)")

// waitForParents blocks until every parent shard is finished (SHARD_END in the lease table) or
// has left the stream, or this processor goes stale (errStale). The KCL keeps renewing this
// shard's lease meanwhile (polling mode renews on its own goroutine), so the lease is not lost
// while waiting; a renewal refused because another worker took the lease ends the consumer once
// this returns.
func (p *processor) waitForParents() error {
	p.c.metrics.WaitingForParents(p.shard, true)
	defer p.c.metrics.WaitingForParents(p.shard, false)
	logged := false
	for {
		if p.stale.Load() || p.handoff.Load() {
			// A newer processor of the shard, a fenced lease, or a hand-off: the KCL consumer
			// must get back to its loop, where a refused renewal ends it.
			return errStale
		}
		done, err := p.parentsFinished()
		if err == nil && done {
			p.gated = false
			if logged {
				p.log.Info("parents finished; handing on records")
			}
			return nil
		}
		if err != nil {
			p.log.Warn("checking parent shards", zap.Error(err))
		} else if !logged {
			p.log.Info("waiting for parent shards to finish before handing on records", zap.Strings("parents", p.parents))
			logged = true
		}
		select {
		case <-p.ctx.Done():
			return p.ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (p *processor) parentsFinished() (bool, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if p.parents == nil {
		info, ok, err := p.c.shards.lookup(ctx, p.shard, true)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("shard %s is not in the stream", p.shard)
		}
		p.parents = info.parents
	}
	for _, parent := range p.parents {
		fin, err := p.c.leases.ShardFinished(ctx, parent)
		if err != nil {
			return false, err
		}
		if fin {
			continue
		}
		_, exists, err := p.c.shards.lookup(ctx, parent, true)
		if err != nil {
			return false, err
		}
		if exists {
			return false, nil
		}
	}
	return true, nil
}

// deadLetter stores an undecodable record. It returns false if that failed, which is fatal: the
// record must not be checkpointed past without a trace.
func (p *processor) deadLetter(seq string, raw []byte, cause error) bool {
	dl := change.DeadLetter{Stream: p.c.cfg.Stream, Shard: p.shard, Seq: seq, Reason: cause.Error(), Raw: raw}
	err := p.c.dlq.DeadLetter(p.ctx, dl)
	if err != nil {
		p.c.stop(fmt.Errorf("shard %s: dead-letter record %s: %w", p.shard, seq, err))
		return false
	}
	p.c.metrics.DeadLettered(p.shard)
	// Decode errors quote the input they rejected: log the reason as the dead letter stores it
	// (the sink's column rules may cut it).
	if r, ok := p.c.dlq.(change.DeadLetterRedactor); ok {
		dl = r.RedactDeadLetter(dl)
	}
	p.log.Warn("dead-lettered undecodable record", zap.String("seq", seq), zap.String("error", dl.Reason))
	return true
}

// checkpoint writes the shard checkpoint up to the committed prefix, if it moved. The write is
// conditional on this processor's lease epoch, so a processor whose lease moved on cannot write.
// Unless final (the shutdown's), a checkpoint that would pass only heartbeat records since the
// last one written waits until heartbeatCheckpointEvery has passed: an idle shard would
// otherwise cost a DynamoDB write per heartbeat, and reading heartbeats again after a restart
// costs nothing.
func (p *processor) checkpoint(final bool) {
	if p.stale.Load() {
		return
	}
	seq := p.track.Committed()
	if seq == "" || change.CompareSeq(seq, p.saved) <= 0 {
		return
	}
	if !final && change.CompareSeq(p.lastData, p.saved) <= 0 && p.c.now().Sub(p.savedAt) < heartbeatCheckpointEvery {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fault.Hit(fault.BeforeCheckpoint)
	err := p.c.leases.Checkpoint(ctx, p.shard, p.epoch, seq)
	fault.Hit(fault.AfterCheckpoint)
	if err != nil {
		if errors.Is(err, checkpoint.ErrFenced) {
			p.stale.Store(true)
			p.c.metrics.Fenced(p.shard)
			p.log.Warn("lease moved on; this processor stops checkpointing", zap.Error(err))
			return
		}
		p.log.Warn("checkpoint failed; will retry", zap.String("seq", seq), zap.Error(err))
		return
	}
	p.saved, p.savedAt = seq, p.c.now()
	p.c.metrics.Checkpointed(p.shard, seq)
}

func (p *processor) Shutdown(in *kcl.ShutdownInput) {
	reason := aws.ToString(kcl.ShutdownReasonMessage(in.ShutdownReason))
	defer p.hz.closed.Store(true) // the horizon loop publishes nothing for it any more
	fault.Hit(fault.DuringShutdown)
	ctx, cancel := p.c.shutdownContext()
	defer cancel()
	p.finalHorizon() // reading has stopped; the drain needs the bound to pass the last records
	if err := p.drain(ctx); err != nil {
		if shard, owner := p.c.wm.holding(); shard != "" && shard != p.shard && p.c.wm.bound.Load() < p.hz.lastArrival.Load() {
			// The ordering guard: nothing arrived after W may commit, and W waits for a shard
			// this processor does not read (its owner died and nobody took it over yet, or it
			// is read late). Correct and expected; the records are read again by the next owner.
			p.log.Warn("shutdown: pending changes wait for the stream watermark, held by another shard; they will be read again",
				zap.String("reason", reason), zap.String("holder", shard), zap.String("holder_owner", owner),
				zap.Time("watermark", timeOf(p.c.wm.w.Load())), zap.Error(err))
			return
		}
		if oldest, table := gateBelow(p.c.CommitBounds().Gates, p.hz.lastArrival.Load()); table != "" {
			// The gates: another process holds older records of a table it has not committed
			// yet (it may be stopping too). Correct and expected, as above.
			p.log.Warn("shutdown: pending changes wait for older changes another worker has not committed; they will be read again",
				zap.String("reason", reason), zap.String("table", table), zap.Time("gate", oldest), zap.Error(err))
			return
		}
		p.log.Error("shutdown: pending changes not committed; they will be read again", zap.String("reason", reason), zap.Error(err))
		return
	}
	p.checkpoint(true)
	if in.ShutdownReason == kcl.TERMINATE && !p.halted && !p.stale.Load() {
		// The final horizon, the last record's arrival (finalHorizon; the tip rule never
		// applies to a shard at its end), is published before SHARD_END, which freezes it.
		p.publish(ctx, true)
		p.finishShard(ctx)
		return
	}
	p.publish(ctx, true) // nothing pending any more: others need not wait for this shard's changes
	p.log.Info("shard processor stopped", zap.String("reason", reason), zap.String("checkpoint", p.saved))
}

// finishShard writes SHARD_END once everything read from the shard is committed, and reads it
// back: children wait for it.
func (p *processor) finishShard(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		err := p.c.leases.Checkpoint(ctx, p.shard, p.epoch, checkpoint.ShardEnd)
		if err == nil {
			fin, rerr := p.c.leases.ShardFinished(ctx, p.shard)
			if rerr == nil && fin {
				p.log.Info("shard finished (SHARD_END)")
				return
			}
			err = rerr
			if err == nil {
				err = errors.New("SHARD_END did not stick")
			}
		}
		if errors.Is(err, checkpoint.ErrFenced) || attempt >= 5 || ctx.Err() != nil {
			p.log.Error("shutdown: could not write SHARD_END; the shard will be read again by its next owner (no duplicates: the tables' watermarks skip it)", zap.Error(err))
			return
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
}

// drain flushes the sink until every delivery of this processor is committed.
func (p *processor) drain(ctx context.Context) error {
	for p.track.Pending() > 0 {
		if err := p.c.sink.Flush(ctx); err != nil {
			return err
		}
		wait, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := p.track.WaitIdle(wait)
		cancel()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
