package consumer

import (
	"slices"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// The stream-wide watermark W and the commit bound, as pure functions of one snapshot: the
// shard list (ListShards), every lease row (a scan) and this process's own shards (memory).
//
// W is the minimum contribution over every shard that can still deliver records:
//
//   - a shard whose checkpoint is SHARD_END does not count (everything of it is committed);
//   - a shard gone from ListShards does not count (retention expired; its row is deleted by the
//     KCL soon after);
//   - a shard this process owns (live processor, row owned by this worker under the processor's
//     epoch) counts with its horizon from memory (none yet: as a shard without a horizon);
//   - any other shard counts with its row's ReadHorizon;
//   - a shard with no horizon (no row, not started, or its lease was just taken) whose parents
//     in ListShards are all at SHARD_END counts with the minimum of their final ReadHorizons
//     (its own records all arrived after its parents closed); if one of its parents is still
//     unfinished, that parent covers it and it does not count;
//   - a shard whose horizon is still unknown holds W at the shard's last known safe point (the
//     memo: min(last horizon, last PendingFrom - 1ms)); with no memo, W is unknown (zero) and
//     nothing may commit.
//
// bound = W. Across processes the gates order what W alone cannot (design.md §4): per source
// table and kind of pending record (loads, control records, CDC changes, key changes), the
// oldest one published on the counted shards this process does not own
// (checkpoint.PendingTables). A load waits for its table's older control records; a CDC change
// for its table's older loads, control records and key changes; a key change also for its
// table's older CDC changes. Control records wait for nothing. Every wait across processes is
// for a strictly older record of the same table (arrival, then source position), or, for loads
// and control records, which wait for nothing of CDC, an equally old one; the pending values are
// exact per event and arrivals never go back within a shard, so the waits never form a cycle.
// Gating every change on every other process's oldest pending change (tried first) deadlocked
// on shared milliseconds and advanced by milliseconds per round under a full load spread over
// every shard; stream-wide gates (tried next) made every table wait for another table's key
// changes.

// ownShard is what this process knows of a shard it owns.
type ownShard struct {
	// horizon: every record of the shard with arrival at or before it was handed on (zero:
	// unknown, nothing handed on yet).
	horizon time.Time
	// pending is the arrival of its oldest record handed on and not committed (zero: none).
	pending time.Time
}

// wmInput is one snapshot.
type wmInput struct {
	// shards is ListShards: every shard the stream still has, with its parents.
	shards map[string]shardInfo
	// rows are the lease rows by shard.
	rows map[string]checkpoint.LeaseRow
	// own are this process's shards.
	own map[string]ownShard
	// memo is each shard's last known safe point; wmCompute updates it (the caller keeps it
	// from one snapshot to the next).
	memo map[string]time.Time
}

// wmResult is what a snapshot gives.
type wmResult struct {
	// W is the stream-wide watermark (zero: unknown).
	W time.Time
	// Bound is the commit bound (zero: nothing may commit).
	Bound time.Time
	// Gates are, per source table, the oldest full-load row, control record, CDC change and key
	// change (by arrival, then source position) that another process has read and not committed
	// (nil: none).
	Gates checkpoint.PendingTables
	// Holder is the counted shard with the lowest contribution, or the first one whose horizon
	// is unknown when W is unknown ("" when no shard counts); HolderOwner its row's owner.
	Holder, HolderOwner string
	// Unknown counts the counted shards whose horizon is unknown and that have no memo.
	Unknown int
	// Counted is how many shards count.
	Counted int
}

// wmCompute computes W and the bound from one snapshot.
func wmCompute(in wmInput) wmResult {
	ids := make([]string, 0, len(in.shards))
	for id := range in.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic holder among equals
	var res wmResult
	var minKnown time.Time
	unknownHolder := ""
	for _, id := range ids {
		row := in.rows[id]
		if row.Checkpoint == checkpoint.ShardEnd {
			continue
		}
		own, isOwn := in.own[id]
		h, counts := contribution(id, in, own, isOwn)
		if !counts {
			continue
		}
		res.Counted++
		if !isOwn && len(row.Pending) > 0 {
			if res.Gates == nil {
				res.Gates = make(checkpoint.PendingTables)
			}
			res.Gates.Merge(row.Pending)
		}
		if h.IsZero() {
			if m, ok := in.memo[id]; ok {
				h = m
			} else {
				res.Unknown++
				if unknownHolder == "" {
					unknownHolder = id
				}
				continue
			}
		} else {
			in.memo[id] = safePoint(h, own, isOwn, row)
		}
		if minKnown.IsZero() || h.Before(minKnown) {
			minKnown, res.Holder, res.HolderOwner = h, id, row.Owner
		}
	}
	for id := range in.memo {
		if _, ok := in.shards[id]; !ok {
			delete(in.memo, id) // bounded: only shards the stream still has
		}
	}
	if unknownHolder != "" {
		res.Holder, res.HolderOwner = unknownHolder, in.rows[unknownHolder].Owner
		return res // W unknown: nothing commits
	}
	res.W = minKnown
	res.Bound = res.W
	return res
}

// contribution returns a counted shard's horizon (zero: unknown) and whether it counts at all.
// An owned shard with no horizon yet (nothing handed on since its lease was taken, which
// removed the row's) is judged like any shard without one: by its parents.
func contribution(id string, in wmInput, own ownShard, isOwn bool) (time.Time, bool) {
	if isOwn && !own.horizon.IsZero() {
		return own.horizon, true
	}
	if row := in.rows[id]; !isOwn && !row.ReadHorizon.IsZero() {
		return row.ReadHorizon, true
	}
	parents := in.shards[id].parents
	present := parents[:0:0]
	for _, p := range parents {
		if _, ok := in.shards[p]; !ok {
			continue // gone from the stream: it cannot hold records back
		}
		if in.rows[p].Checkpoint != checkpoint.ShardEnd {
			// An unfinished parent covers its unstarted child, whatever the other parent of a
			// merge says: judging the parents in order let a finished parent without a final
			// horizon make the child unknown, and the child (waiting for this parent) then held
			// W, which this parent's commits waited for.
			return time.Time{}, false
		}
		present = append(present, p)
	}
	if len(present) == 0 {
		return time.Time{}, true
	}
	var h time.Time
	for _, p := range present {
		pr := in.rows[p]
		if pr.ReadHorizon.IsZero() {
			return time.Time{}, true // a finished parent with no final horizon: unknown
		}
		h = minTime(h, pr.ReadHorizon)
	}
	return h, true
}

// safePoint is what a shard may hold W at once its horizon becomes unknown (its lease taken):
// the records its owner handed on but had not committed are read again by the next owner.
func safePoint(h time.Time, own ownShard, isOwn bool, row checkpoint.LeaseRow) time.Time {
	p := row.PendingFrom
	if isOwn {
		p = own.pending
	}
	if !p.IsZero() {
		return minTime(h, p.Add(-time.Millisecond))
	}
	return h
}

// minTime is the earlier of a and b, where zero means unset.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// ownHorizon is a shard processor's horizon from what it recorded: the arrival of the last
// record it handed on (lastArrival), minus 1 ms because the next record may share its
// millisecond; and, when its last read was at the tip of the shard (tipAt, the time just before
// that read), tipAt - margin, but only while the shard was still open then: listedOpen is the
// time of a ListShards call that saw the shard open (zero: not known open). A shard may close
// between two listings; its children's records arrive after it closes, so the tip rule never
// claims a time after the last listing that saw it open. prev is the horizon before; it never
// goes back.
func ownHorizon(prev, lastArrival, tipAt, listedOpen time.Time, margin time.Duration) time.Time {
	h := prev
	if !lastArrival.IsZero() {
		h = maxTime(h, lastArrival.Add(-time.Millisecond))
	}
	if !tipAt.IsZero() && !listedOpen.IsZero() {
		h = maxTime(h, minTime(tipAt, listedOpen).Add(-margin))
	}
	return h
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
