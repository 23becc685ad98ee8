package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// The lease rules, shared by the DynamoDB store (Leases) and the in-memory one (MemLeases):
//
//   - acquisition and renewal (GetLease) never write the checkpoint, so a renewal can never roll
//     a checkpoint back;
//   - acquisition and renewal stamp the row with the state version (AttrStateVersion) and refuse a
//     row stamped with a newer one;
//   - every acquisition (not renewal) increments the epoch; a late renewal (the lease expired
//     but nobody took it) is a renewal;
//   - while this process holds a lease (it recorded an epoch and has not released it), a
//     GetLease is refused once the row names another owner or epoch: someone took the lease in
//     between, so the running consumer must end (the KCL then releases the lease, which forgets
//     the epoch) rather than take the lease back under a new epoch its processor does not hold;
//   - an acquisition is refused while the row reserves the lease for another worker (a
//     hand-off, AttrHandoffTo until AttrHandoffUntil), and removes any reservation; the
//     reservation is written only by the owner under its epoch (Reserve);
//   - a release removes the owner only while the row names this worker under its epoch, and
//     forgets that epoch;
//   - a checkpoint is written only by the owner, under the epoch it holds, never backwards and
//     never over ShardEnd;
//   - the horizon attributes (AttrReadHorizon, AttrPending*From, AttrHorizonAt) are written only
//     by the owner, under the epoch it holds, never once the checkpoint is ShardEnd (the final
//     horizon is published before it); every acquisition (not renewal) removes them, so a new
//     owner's horizon starts unknown.

// ErrFenced means a checkpoint was refused because the lease moved on: another worker holds
// it, or this worker re-acquired it under a newer epoch.
var ErrFenced = errors.New("checkpoint: lease is held by someone else or under a newer epoch")

// ErrRegression means a checkpoint was refused because it would move backwards (or over
// ShardEnd).
var ErrRegression = errors.New("checkpoint: refusing to move a checkpoint backwards")

// LeaseStore is what a shard processor needs of the lease table: the epoch it was started
// under, the fenced checkpoint write, and whether a (parent) shard is finished. Leases (DynamoDB)
// and MemLeases (in memory, for tests) implement it with the same semantics; both are safe for
// concurrent use.
type LeaseStore interface {
	// Epoch returns the epoch under which this worker holds the shard's lease (0 if it does not).
	Epoch(shard string) int64
	// Checkpoint writes seq (a sequence number, or ShardEnd) as the shard's checkpoint, only if
	// this worker still holds the lease under epoch (else ErrFenced), the stored checkpoint is
	// not ShardEnd and, for a sequence number, not higher (else ErrRegression).
	Checkpoint(ctx context.Context, shard string, epoch int64, seq string) error
	// ShardFinished reports whether the shard's row says it was read to its end and committed.
	ShardFinished(ctx context.Context, shard string) (bool, error)
	// PublishHorizon writes h on the shard's row (a zero time removes that
	// attribute), only if this worker still holds the lease under epoch (else ErrFenced) and the
	// checkpoint is not ShardEnd (else ErrRegression).
	PublishHorizon(ctx context.Context, shard string, epoch int64, h Horizon) error
	// Rows reads every row of the lease table (a full scan). A malformed attribute is reported in
	// the error and left zero in its row; the rows are returned all the same.
	Rows(ctx context.Context) ([]LeaseRow, error)
}

var (
	_ LeaseStore = (*Leases)(nil)
	_ LeaseStore = (*MemLeases)(nil)
)

// leaseEpoch decides a GetLease of newOwner over the stored row cur: the KCL's
// ErrLeaseNotAcquired while another owner's lease runs, else the epoch to write. mine is the
// epoch this process recorded for the shard and has not released (0: none).
//
// With mine set, the call comes from this process's running consumer (its renewal, or the event
// loop after the KCL's FetchCheckpoint overwrote the in-memory owner with the row's). It is a
// renewal (same epoch) when the row still names newOwner under mine, even if the lease expired
// meanwhile: nobody took it in between (that would have changed the owner or the epoch, and the
// write is conditional on both as read), so the running processor may go on. Bumping the epoch
// there fenced the shard's own processor after any pause longer than the failover time. Any
// other row means the lease was taken in between, and the call is refused even if that lease
// expired too: taking it back under a new epoch would leave the running processor fenced by its
// own worker with the KCL still feeding it, and the shard would never checkpoint again (seen in
// a chaos run: a merged child's lease taken by another worker while both waited for the
// parents). The refused renewal ends the KCL's consumer; its release (RemoveLeaseOwner) forgets
// mine, and the event loop then takes the lease afresh with a new processor.
//
// Without mine it is an acquisition (epoch + 1): another owner's expired lease, a released one,
// or this worker's after a restart (mine is 0 in a new process), unless the lease is being
// handed off to another worker (AttrHandoffTo) until AttrHandoffUntil. A row written by a newer state
// version is refused (a *stateversion.Error): it is neither taken nor renewed, so it is never
// rewritten.
func leaseEpoch(cur LeaseRow, newOwner string, mine int64, now time.Time) (int64, error) {
	if err := stateversion.Check("lease", cur.StateVersion); err != nil {
		return 0, fmt.Errorf("lease of %s: %w", cur.Shard, err)
	}
	if mine != 0 {
		if cur.Owner == newOwner && cur.Epoch == mine {
			return cur.Epoch, nil
		}
		return 0, chk.ErrLeaseNotAcquired{}
	}
	expired := !now.Before(cur.LeaseTimeout)
	if cur.Owner != "" && cur.Owner != newOwner && !expired {
		return 0, chk.ErrLeaseNotAcquired{}
	}
	if reservedForOther(cur, newOwner, now) {
		return 0, chk.ErrLeaseNotAcquired{}
	}
	return cur.Epoch + 1, nil
}

// checkpointAllowed is the checkpoint rule: worker may write seq over cur under epoch. (Leases
// states the same rule as a DynamoDB condition expression.)
func checkpointAllowed(cur LeaseRow, worker string, epoch int64, seq string) bool {
	if cur.Owner != worker || cur.Epoch != epoch || cur.Checkpoint == ShardEnd {
		return false
	}
	return seq == ShardEnd || change.CompareSeq(cur.Checkpoint, seq) <= 0
}

// publishAllowed is the rule of PublishHorizon: worker holds cur under epoch and the shard is not
// finished. (Leases states the same rule as a DynamoDB condition expression.)
func publishAllowed(cur LeaseRow, worker string, epoch int64) bool {
	return cur.Owner == worker && cur.Epoch == epoch && cur.Checkpoint != ShardEnd
}

// refusal explains a refused checkpoint from the row as it is now: ErrFenced when the lease
// moved on, else ErrRegression.
func refusal(cur LeaseRow, shard, worker string, epoch int64, seq string) error {
	if cur.Owner != worker || cur.Epoch != epoch {
		return fmt.Errorf("%w (shard %s: owner %q epoch %d, ours %q epoch %d)", ErrFenced, shard, cur.Owner, cur.Epoch, worker, epoch)
	}
	return fmt.Errorf("%w (shard %s: stored %q, refused %q)", ErrRegression, shard, cur.Checkpoint, seq)
}

// releaseAllowed is the rule of RemoveLeaseOwner: the row still names worker under the epoch it
// recorded (mine, 0: none). (Leases states the same rule as a DynamoDB condition expression.)
func releaseAllowed(cur LeaseRow, worker string, mine int64) bool {
	return mine != 0 && cur.Owner == worker && cur.Epoch == mine
}

// publishRefusal explains a refused PublishHorizon from the row as it is now.
func publishRefusal(cur LeaseRow, shard, worker string, epoch int64) error {
	if cur.Owner != worker || cur.Epoch != epoch {
		return fmt.Errorf("%w (shard %s: owner %q epoch %d, ours %q epoch %d)", ErrFenced, shard, cur.Owner, cur.Epoch, worker, epoch)
	}
	return fmt.Errorf("%w (shard %s is finished: no horizon is published after %s)", ErrRegression, shard, ShardEnd)
}
