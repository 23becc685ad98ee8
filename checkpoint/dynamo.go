package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// Short names of the lease-table attributes in this file's expressions.
const (
	attrOwner   = AttrAssignedTo
	attrTimeout = AttrLeaseTimeout
	attrSeq     = AttrCheckpoint
	attrParent  = AttrParentShardID
	attrEpoch   = AttrLeaseEpoch
)

// removeHorizon is the update clause of an acquisition that forgets the previous owner's horizon
// and any hand-off reservation.
const removeHorizon = " REMOVE #rh, #pf, #pt, #ha, #am, #hto, #hun"

// DynamoDBAPI is the part of the DynamoDB client the checkpointer uses (the KCL's interface).
type DynamoDBAPI = chk.DynamoDBAPI

// Leases replaces the KCL's DynamoDB checkpointer (through Worker.WithCheckpointer) where the
// KCL's own is unsafe (notes/kcl.md §2.3, §11 items 2-5):
//
//   - lease acquisition and renewal are UpdateItems that never write the Checkpoint attribute,
//     so a renewal can never roll a checkpoint back;
//   - every acquisition and renewal stamps AttrStateVersion and refuses a row of a newer state
//     version (OnStateRefused is told);
//   - every acquisition (not renewal) increments LeaseEpoch and removes the horizon attributes;
//   - the horizon attributes are written only by PublishHorizon, conditional on owner and epoch;
//   - the KCL's checkpoint path (CheckpointSequence) is refused: checkpoints are written only
//     through Checkpoint, conditional on owner and epoch, never backwards, and never over
//     SHARD_END;
//   - RemoveLeaseOwner (the KCL's release) forgets this process's epoch and removes the owner
//     only while the row still names this worker under it.
//
// Every other method is the KCL's own implementation. None of the KCL's writes that remain
// (RemoveLeaseInfo deletes the row of a shard gone from ListShards; ClaimShard, a PutItem, is
// lease stealing, which is disabled) drops the attributes this type adds.
type Leases struct {
	*chk.DynamoCheckpoint
	ddb      DynamoDBAPI
	table    string
	worker   string
	duration time.Duration
	now      func() time.Time

	mu     sync.Mutex
	epochs map[string]int64 // shard -> epoch of the lease this worker holds

	onRefused func(shard string, err error)
	onLost    func(shard string)
	// balance is the fair share (share.go); nil: none.
	balance *Balance
}

// WithBalance makes GetLease and FetchCheckpoint consult b (share.go). Set it before the KCL
// worker starts.
func (l *Leases) WithBalance(b *Balance) { l.balance = b }

// held is the number of leases this process holds.
func (l *Leases) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.epochs)
}

// OnLeaseLost sets f to be told when a GetLease of a lease this process holds is refused because
// someone took the lease in between (the running processor of that shard is done for: the KCL
// ends its consumer once the processor returns). Set it before the KCL worker starts.
func (l *Leases) OnLeaseLost(f func(shard string)) { l.onLost = f }

// OnStateRefused sets f to be told of every GetLease refused because the row was written by a
// newer state version (logs, metrics). Set it before the KCL worker starts.
func (l *Leases) OnStateRefused(f func(shard string, err error)) { l.onRefused = f }

// NewLeases returns the checkpointer for the lease table. duration is the lease duration.
func NewLeases(kcl *chk.DynamoCheckpoint, ddb DynamoDBAPI, table, worker string, duration time.Duration) *Leases {
	return &Leases{DynamoCheckpoint: kcl, ddb: ddb, table: table, worker: worker, duration: duration,
		now: time.Now, epochs: make(map[string]int64)}
}

// Epoch returns the epoch under which this worker holds the shard's lease (0 if it does not).
func (l *Leases) Epoch(shard string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs[shard]
}

// Get reads a lease row with a consistent read.
func (l *Leases) Get(ctx context.Context, shard string) (LeaseRow, error) {
	out, err := l.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return LeaseRow{}, fmt.Errorf("read lease of %s: %w", shard, err)
	}
	r, err := ParseLeaseRow(out.Item)
	r.Shard = shard
	return r, err
}

// GetLease takes or renews the lease of a shard for newOwner (the KCL calls it for both). It is
// a renewal when this worker holds the unexpired lease under the epoch it recorded; anything
// else is an acquisition and increments the epoch. It never writes the checkpoint.
func (l *Leases) GetLease(shard *par.ShardStatus, newOwner string) error {
	if l.balance.refuse(shard.ID, l.Epoch(shard.ID), l.held(), l.now()) {
		return chk.ErrLeaseNotAcquired{} // above the share, reserved for another, or handed off
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur, err := l.Get(ctx, shard.ID)
	if err != nil {
		return err
	}
	now := l.now().UTC()
	mine := l.Epoch(shard.ID)
	epoch, err := leaseEpoch(cur, newOwner, mine, now)
	if err != nil {
		if l.onRefused != nil && stateversion.IsRefused(err) {
			l.onRefused(shard.ID, err)
		}
		if l.onLost != nil && mine != 0 && errors.As(err, &chk.ErrLeaseNotAcquired{}) {
			l.onLost(shard.ID)
		}
		return err
	}
	timeout := now.Add(l.duration)
	names := map[string]string{"#o": attrOwner, "#t": attrTimeout, "#e": attrEpoch, "#v": AttrStateVersion}
	values := map[string]types.AttributeValue{
		":new_owner":   &types.AttributeValueMemberS{Value: newOwner},
		":new_timeout": &types.AttributeValueMemberS{Value: timeout.Format(time.RFC3339Nano)},
		":new_epoch":   &types.AttributeValueMemberN{Value: strconv.FormatInt(epoch, 10)},
		":version":     &types.AttributeValueMemberN{Value: stateversion.CurrentText},
	}
	update := "SET #o = :new_owner, #t = :new_timeout, #e = :new_epoch, #v = :version"
	if shard.ParentShardId != "" {
		names["#p"] = attrParent
		values[":parent"] = &types.AttributeValueMemberS{Value: shard.ParentShardId}
		update += ", #p = :parent"
	}
	if epoch != cur.Epoch { // an acquisition: the previous owner's horizon is lost with its buffers
		names["#rh"], names["#pf"], names["#ha"] = AttrReadHorizon, AttrPendingFrom, AttrHorizonAt
		names["#pt"], names["#hto"], names["#hun"] = AttrPendingTables, AttrHandoffTo, AttrHandoffUntil
		names["#am"] = AttrArrivalMargin
		update += removeHorizon
	}
	var cond string
	if cur.Owner == "" {
		cond = "attribute_not_exists(#o)"
	} else {
		cond = "#o = :old_owner AND attribute_not_exists(#t)"
		values[":old_owner"] = &types.AttributeValueMemberS{Value: cur.Owner}
		if cur.LeaseTimeoutText != "" {
			cond = "#o = :old_owner AND #t = :old_timeout"
			values[":old_timeout"] = &types.AttributeValueMemberS{Value: cur.LeaseTimeoutText}
		}
	}
	// A newer binary that stamped the row since it was read makes the write fail; the next
	// GetLease reads the stamp and refuses.
	cond += " AND (attribute_not_exists(#v) OR #v <= :version)"
	if cur.Epoch == 0 {
		cond += " AND attribute_not_exists(#e)"
	} else {
		cond += " AND #e = :old_epoch"
		values[":old_epoch"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(cur.Epoch, 10)}
	}
	_, err = l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard.ID),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if l.onLost != nil && mine != 0 { // the row changed since it was read
				l.onLost(shard.ID)
			}
			return chk.ErrLeaseNotAcquired{}
		}
		return fmt.Errorf("take lease of %s: %w", shard.ID, err)
	}
	l.mu.Lock()
	l.epochs[shard.ID] = epoch
	l.mu.Unlock()
	shard.Mux.Lock()
	shard.AssignedTo = newOwner
	shard.LeaseTimeout = timeout
	shard.Mux.Unlock()
	return nil
}

// RemoveLeaseOwner releases the shard's lease; the KCL calls it when a shard consumer ends. This
// process forgets the epoch it recorded, so its next GetLease of the shard is an acquisition
// (a new epoch and a new processor), and the row's owner is removed only while the row still
// names this worker under that epoch (the KCL's own release checks the owner alone, and so could
// wipe a lease taken afresh meanwhile). A lease that moved on is left alone: nothing to release.
func (l *Leases) RemoveLeaseOwner(shard string) error {
	l.mu.Lock()
	mine := l.epochs[shard]
	delete(l.epochs, shard)
	l.mu.Unlock()
	l.balance.released(shard)
	if mine == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard),
		UpdateExpression:         aws.String("REMOVE #o"),
		ConditionExpression:      aws.String("#o = :me AND #e = :epoch"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#e": attrEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me":    &types.AttributeValueMemberS{Value: l.worker},
			":epoch": &types.AttributeValueMemberN{Value: strconv.FormatInt(mine, 10)},
		}})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("release lease of %s: %w", shard, err)
	}
	return nil
}

// CheckpointSequence is the KCL's checkpoint path. It is refused: the application checkpoints
// only through Checkpoint, which is fenced. Nothing in dms2iceberg calls the KCL's
// Checkpoint, so this only fires if that rule is broken.
func (l *Leases) CheckpointSequence(shard *par.ShardStatus) error {
	return fmt.Errorf("checkpoint: the KCL checkpoint path is disabled (shard %s); use Leases.Checkpoint", shard.ID)
}

// Checkpoint writes seq (a sequence number, or ShardEnd) as the shard's checkpoint, only if
// this worker still holds the lease under epoch, the stored checkpoint is not ShardEnd, and
// (for a sequence number) the stored one is not higher.
func (l *Leases) Checkpoint(ctx context.Context, shard string, epoch int64, seq string) error {
	names := map[string]string{"#o": attrOwner, "#e": attrEpoch, "#c": attrSeq}
	values := map[string]types.AttributeValue{
		":me":    &types.AttributeValueMemberS{Value: l.worker},
		":epoch": &types.AttributeValueMemberN{Value: strconv.FormatInt(epoch, 10)},
		":seq":   &types.AttributeValueMemberS{Value: seq},
		":end":   &types.AttributeValueMemberS{Value: ShardEnd},
	}
	cond := "#o = :me AND #e = :epoch AND (attribute_not_exists(#c) OR #c <> :end)"
	if seq != ShardEnd {
		// Sequence numbers of one shard have the same number of digits; compare by length, then
		// as strings.
		values[":len"] = &types.AttributeValueMemberN{Value: strconv.Itoa(len(seq))}
		cond += " AND (attribute_not_exists(#c) OR size(#c) < :len OR (size(#c) = :len AND #c <= :seq))"
	}
	_, err := l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard),
		UpdateExpression: aws.String("SET #c = :seq"), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return fmt.Errorf("checkpoint %s at %s: %w", shard, seq, err)
	}
	cur, gerr := l.Get(ctx, shard)
	if gerr != nil {
		return fmt.Errorf("checkpoint %s at %s refused: %w", shard, seq, gerr)
	}
	return refusal(cur, shard, l.worker, epoch, seq)
}

// PublishHorizon writes h on the shard's row (a zero time removes that attribute), only if this
// worker holds the lease under epoch and the checkpoint is not ShardEnd. One UpdateItem: the
// attributes always change together.
func (l *Leases) PublishHorizon(ctx context.Context, shard string, epoch int64, h Horizon) error {
	names := map[string]string{"#o": attrOwner, "#e": attrEpoch, "#c": attrSeq, "#ha": AttrHorizonAt}
	values := map[string]types.AttributeValue{
		":me":    &types.AttributeValueMemberS{Value: l.worker},
		":epoch": &types.AttributeValueMemberN{Value: strconv.FormatInt(epoch, 10)},
		":end":   &types.AttributeValueMemberS{Value: ShardEnd},
		":at":    unixMilli(h.At),
	}
	set, remove := "SET #ha = :at", ""
	for _, a := range []struct {
		ref, name, val string
		t              time.Time
	}{{"#rh", AttrReadHorizon, ":rh", h.Read}, {"#pf", AttrPendingFrom, ":pf", h.PendingFrom}} {
		names[a.ref] = a.name
		if a.t.IsZero() {
			remove += sep(remove) + a.ref
			continue
		}
		values[a.val] = unixMilli(a.t)
		set += ", " + a.ref + " = " + a.val
	}
	names["#am"] = AttrArrivalMargin
	if ms := h.Margin.Milliseconds(); ms <= 0 {
		remove += sep(remove) + "#am"
	} else {
		values[":am"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(ms, 10)}
		set += ", #am = :am"
	}
	names["#pt"] = AttrPendingTables
	if pt := h.Pending.encode(); pt == "" {
		remove += sep(remove) + "#pt"
	} else {
		values[":pt"] = &types.AttributeValueMemberS{Value: pt}
		set += ", #pt = :pt"
	}
	update := set
	if remove != "" {
		update += " REMOVE " + remove
	}
	_, err := l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard),
		UpdateExpression:         aws.String(update),
		ConditionExpression:      aws.String("#o = :me AND #e = :epoch AND (attribute_not_exists(#c) OR #c <> :end)"),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return fmt.Errorf("publish the horizon of %s: %w", shard, err)
	}
	cur, gerr := l.Get(ctx, shard)
	if gerr != nil {
		return fmt.Errorf("publish the horizon of %s refused: %w", shard, gerr)
	}
	return publishRefusal(cur, shard, l.worker, epoch)
}

func sep(list string) string {
	if list == "" {
		return ""
	}
	return ", "
}

// Rows reads every row of the lease table with a consistent, paginated scan.
func (l *Leases) Rows(ctx context.Context) ([]LeaseRow, error) {
	var rows []LeaseRow
	var errs []error
	in := &dynamodb.ScanInput{TableName: aws.String(l.table), ConsistentRead: aws.Bool(true)}
	for {
		out, err := l.ddb.Scan(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("scan lease table %s: %w", l.table, err)
		}
		for _, item := range out.Items {
			r, err := ParseLeaseRow(item)
			if err != nil {
				errs = append(errs, err)
			}
			rows = append(rows, r)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return rows, errors.Join(errs...)
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// ShardFinished reports whether a shard's lease row says it was read to its end and committed.
func (l *Leases) ShardFinished(ctx context.Context, shard string) (bool, error) {
	r, err := l.Get(ctx, shard)
	if err != nil {
		return false, err
	}
	return r.Checkpoint == ShardEnd, nil
}
