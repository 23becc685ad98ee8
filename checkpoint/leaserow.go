package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
)

// The attributes of a lease-table row: one row per shard, keyed by AttrShardID. All but
// AttrLeaseEpoch are the KCL's (vmware-go-kcl-v2); every reader and writer of the lease table
// names them through these constants, never through literals.
const (
	// AttrShardID (S) is the table's hash key: the Kinesis shard id.
	AttrShardID = chk.LeaseKeyKey
	// AttrAssignedTo (S) is the worker id of the lease's owner; absent for a lease never taken.
	AttrAssignedTo = chk.LeaseOwnerKey
	// AttrLeaseTimeout (S, RFC 3339 with nanoseconds, UTC) is when the owner's lease ends unless
	// renewed. Conditions compare its stored text.
	AttrLeaseTimeout = chk.LeaseTimeoutKey
	// AttrCheckpoint (S) is the shard's checkpoint: the highest sequence number below which
	// every change is committed to its tables, or ShardEnd. Written only by Leases.Checkpoint.
	AttrCheckpoint = chk.SequenceNumberKey
	// AttrParentShardID (S) is the shard's parent (a split's or a merge's first parent), as the
	// KCL records it when it takes the lease.
	AttrParentShardID = chk.ParentShardIdKey
	// AttrClaimRequest (S) is the KCL's lease-stealing claim. dms2iceberg disables lease
	// stealing, so it is never written; it is named here so that the list is complete.
	AttrClaimRequest = chk.ClaimRequestKey
	// AttrLeaseEpoch (N) is ours: incremented by every acquisition (never by a renewal), so that
	// a checkpoint conditional on it is refused once the lease has moved on, even back to the
	// same worker.
	AttrLeaseEpoch = "LeaseEpoch"
	// AttrReadHorizon (N, unix milliseconds) is ours: the owner's read horizon of the shard.
	// Every record of the shard whose Kinesis arrival time (ApproximateArrivalTimestamp) is at
	// or before it has been handed on to the owner's sink. Absent: unknown (never published,
	// or the lease was taken since: a new owner's horizon restarts unknown, because what the
	// old owner handed on is lost with its buffers). At SHARD_END it is the shard's final
	// horizon: no record of the shard arrived after it.
	AttrReadHorizon = "ReadHorizon"
	// AttrPendingFrom (N, unix milliseconds) is ours: the arrival time of the oldest record of
	// the shard the owner has handed on whose change is not yet in a committed snapshot (the
	// record after the checkpoint). Absent: nothing is pending, or unknown as for
	// AttrReadHorizon. Written together with AttrReadHorizon, in the same update.
	AttrPendingFrom = "PendingFrom"
	// AttrPendingTables (S, JSON) is ours: per source table and kind of record (full-load row,
	// control record, CDC change, key change), the arrival and DMS source position of the
	// oldest pending record of the shard: the cross-process gates of the ordering guard
	// (design.md §4, PendingTables). At most MaxPendingTables tables; the rest are merged into
	// AnyTable. Absent: nothing is pending, or unknown as for AttrReadHorizon. Written with
	// AttrReadHorizon.
	AttrPendingTables = "PendingTables"
	// AttrHorizonAt (N, unix milliseconds) is ours: when the owner last published
	// AttrReadHorizon and AttrPendingFrom (its own clock). It shows whether the owner is alive.
	AttrHorizonAt = "HorizonAt"
	// AttrArrivalMargin (N, milliseconds) is ours: the arrival margin the owner measured from
	// its own reads of the stream (consumer/margin.go), so that a worker whose shards return too
	// few records to measure it (a quiet shard) uses the others'. Absent: no evidence. Written
	// with AttrReadHorizon.
	AttrArrivalMargin = "ArrivalMargin"
	// AttrStateVersion (N) is ours: the state version (pkg/stateversion) of the dms2iceberg that
	// last took or renewed the lease. Absent: version 1 (rows from before the stamp). A row with
	// a newer version is never taken, renewed or rewritten (GetLease refuses it).
	AttrStateVersion = "StateVersion"
	// AttrHandoffTo (S) is ours: the worker a lease is being handed to (share.go). Written by the
	// owner (Reserve) before it drains and releases the lease; until AttrHandoffUntil no other
	// worker takes the lease. Every acquisition removes it.
	AttrHandoffTo = "HandoffTo"
	// AttrHandoffUntil (N, unix milliseconds) is ours: when the reservation AttrHandoffTo ends.
	AttrHandoffUntil = "HandoffUntil"
	// AttrWorkerUntil (N, unix milliseconds) is ours, on a presence row only (PresenceKey): the
	// worker counts as live until then (share.go).
	AttrWorkerUntil = "WorkerUntil"
)

// ShardEnd is the checkpoint of a shard that was read to its end and fully committed.
const ShardEnd = chk.ShardEnd

// LeaseRow is one lease-table row, as ParseLeaseRow reads it.
type LeaseRow struct {
	// Shard is AttrShardID.
	Shard string
	// Owner is AttrAssignedTo ("" for none).
	Owner string
	// Checkpoint is AttrCheckpoint ("" for none).
	Checkpoint string
	// Parent is AttrParentShardID ("" for none).
	Parent string
	// LeaseTimeout is AttrLeaseTimeout (zero when absent or malformed).
	LeaseTimeout time.Time
	// LeaseTimeoutText is the stored text of LeaseTimeout (conditions compare the string).
	LeaseTimeoutText string
	// Epoch is AttrLeaseEpoch (0 when absent or malformed: the lease was never acquired by
	// dms2iceberg).
	Epoch int64
	// ReadHorizon is AttrReadHorizon (zero when absent or malformed: unknown).
	ReadHorizon time.Time
	// PendingFrom is AttrPendingFrom (zero when absent or malformed).
	PendingFrom time.Time
	// Pending is AttrPendingTables (nil when absent or malformed).
	Pending PendingTables
	// HorizonAt is AttrHorizonAt (zero when absent or malformed).
	HorizonAt time.Time
	// Margin is AttrArrivalMargin (zero when absent or malformed: no evidence).
	Margin time.Duration
	// StateVersion is AttrStateVersion as stored ("" when absent: version 1).
	StateVersion string
	// HandoffTo and HandoffUntil are AttrHandoffTo and AttrHandoffUntil ("" and zero when
	// absent: the lease is not being handed off).
	HandoffTo    string
	HandoffUntil time.Time
	// Worker is set, and Shard empty, on a worker's presence row (PresenceKey): the worker's
	// id, live until WorkerUntil (AttrWorkerUntil).
	Worker      string
	WorkerUntil time.Time
	// Exists is false when there is no row at all.
	Exists bool
}

// Horizon is what the owner of a shard publishes on its lease row (PublishHorizon): the
// attributes AttrReadHorizon, AttrPendingFrom, AttrPendingTables, AttrHorizonAt and
// AttrArrivalMargin, at millisecond precision.
type Horizon struct {
	// Read is the read horizon (zero: unknown, the attribute is removed).
	Read time.Time
	// PendingFrom is the arrival of the oldest pending record (zero: none, the attribute is
	// removed).
	PendingFrom time.Time
	// Pending are the gates of the tables with pending records (nil: none, the attribute is
	// removed).
	Pending PendingTables
	// At is the time of the publish.
	At time.Time
	// Margin is the owner's measured arrival margin (zero: no evidence, the attribute is
	// removed).
	Margin time.Duration
}

// unixMilli is the stored form of a horizon attribute.
func unixMilli(t time.Time) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
}

// Row is the former name of LeaseRow, kept until its last users (the integration guard tests)
// name LeaseRow; new code names LeaseRow.
type Row = LeaseRow

// LeaseKey is the key of a shard's lease row.
func LeaseKey(shard string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrShardID: &types.AttributeValueMemberS{Value: shard}}
}

// ParseLeaseRow reads a lease-table item (from GetItem or Scan; nil for no row). A malformed
// LeaseTimeout or LeaseEpoch is reported in the error and left zero in the row, whose other
// fields are filled: a reader that only displays rows may ignore the error; the lease logic
// does not.
func ParseLeaseRow(item map[string]types.AttributeValue) (LeaseRow, error) {
	str := func(k string) string {
		if v, ok := item[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	r := LeaseRow{Exists: item != nil, Shard: str(AttrShardID), Owner: str(AttrAssignedTo),
		Checkpoint: str(AttrCheckpoint), Parent: str(AttrParentShardID), LeaseTimeoutText: str(AttrLeaseTimeout),
		HandoffTo: str(AttrHandoffTo)}
	if w, ok := presenceWorker(r.Shard); ok {
		r.Shard, r.Worker = "", w
	}
	var errs []error
	if p, err := decodePendingTables(str(AttrPendingTables)); err != nil {
		errs = append(errs, fmt.Errorf("lease of %s: bad %s: %w", r.Shard, AttrPendingTables, err))
	} else {
		r.Pending = p
	}
	if t := r.LeaseTimeoutText; t != "" {
		ts, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("lease of %s: bad %s %q: %w", r.Shard, AttrLeaseTimeout, t, err))
		} else {
			r.LeaseTimeout = ts
		}
	}
	if v, ok := item[AttrStateVersion].(*types.AttributeValueMemberN); ok {
		r.StateVersion = v.Value
	}
	if v, ok := item[AttrArrivalMargin].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(v.Value, 10, 64); err == nil && ms > 0 {
			r.Margin = time.Duration(ms) * time.Millisecond
		} else {
			errs = append(errs, fmt.Errorf("lease of %s: bad %s %q", r.Shard, AttrArrivalMargin, v.Value))
		}
	}
	if v, ok := item[AttrLeaseEpoch].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("lease of %s: bad %s %q: %w", r.Shard, AttrLeaseEpoch, v.Value, err))
		} else {
			r.Epoch = n
		}
	}
	for _, a := range []struct {
		name string
		dst  *time.Time
	}{{AttrReadHorizon, &r.ReadHorizon}, {AttrPendingFrom, &r.PendingFrom}, {AttrHorizonAt, &r.HorizonAt},
		{AttrHandoffUntil, &r.HandoffUntil}, {AttrWorkerUntil, &r.WorkerUntil}} {
		v, ok := item[a.name].(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("lease of %s: bad %s %q: %w", r.Shard, a.name, v.Value, err))
			continue
		}
		*a.dst = time.UnixMilli(ms).UTC()
	}
	return r, errors.Join(errs...)
}
