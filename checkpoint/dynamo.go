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
)

// Lease table attributes. The first five are the KCL's; LeaseEpoch is ours.
const (
	attrShard   = chk.LeaseKeyKey
	attrOwner   = chk.LeaseOwnerKey
	attrTimeout = chk.LeaseTimeoutKey
	attrSeq     = chk.SequenceNumberKey
	attrParent  = chk.ParentShardIdKey
	attrEpoch   = "LeaseEpoch"
	// ShardEnd is the checkpoint of a shard that was read to its end and fully committed.
	ShardEnd = chk.ShardEnd
)

// ErrFenced means a checkpoint was refused because the lease moved on: another worker holds
// it, or this worker re-acquired it under a newer epoch.
var ErrFenced = errors.New("checkpoint: lease is held by someone else or under a newer epoch")

// ErrRegression means a checkpoint was refused because it would move backwards.
var ErrRegression = errors.New("checkpoint: refusing to move a checkpoint backwards")

// DynamoDBAPI is the part of the DynamoDB client the checkpointer uses (the KCL's interface).
type DynamoDBAPI = chk.DynamoDBAPI

// Leases replaces the KCL's DynamoDB checkpointer (through Worker.WithCheckpointer) where the
// KCL's own is unsafe (notes/kcl.md §2.3, §11 items 2-5):
//
//   - lease acquisition and renewal are UpdateItems that never write the Checkpoint attribute,
//     so a renewal can never roll a checkpoint back;
//   - every acquisition (not renewal) increments LeaseEpoch;
//   - the KCL's checkpoint path (CheckpointSequence) is refused: checkpoints are written only
//     through Checkpoint, conditional on owner and epoch, never backwards, and never over
//     SHARD_END.
//
// Every other method is the KCL's own implementation.
type Leases struct {
	*chk.DynamoCheckpoint
	ddb      DynamoDBAPI
	table    string
	worker   string
	duration time.Duration
	now      func() time.Time

	mu     sync.Mutex
	epochs map[string]int64 // shard -> epoch of the lease this worker holds
}

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

func (l *Leases) key(shard string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrShard: &types.AttributeValueMemberS{Value: shard}}
}

// Row is one lease-table row.
type Row struct {
	Shard, Owner, Checkpoint, Parent string
	LeaseTimeout                     time.Time
	// LeaseTimeoutText is the stored text of LeaseTimeout (conditions compare the string).
	LeaseTimeoutText string
	Epoch            int64
	Exists           bool
}

// Get reads a lease row with a consistent read.
func (l *Leases) Get(ctx context.Context, shard string) (Row, error) {
	out, err := l.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.table), Key: l.key(shard), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Row{}, fmt.Errorf("read lease of %s: %w", shard, err)
	}
	return parseRow(shard, out.Item)
}

func parseRow(shard string, item map[string]types.AttributeValue) (Row, error) {
	r := Row{Shard: shard, Exists: item != nil}
	str := func(k string) string {
		if v, ok := item[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	r.Owner, r.Checkpoint, r.Parent = str(attrOwner), str(attrSeq), str(attrParent)
	if t := str(attrTimeout); t != "" {
		r.LeaseTimeoutText = t
		ts, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return r, fmt.Errorf("lease of %s: bad %s %q: %w", shard, attrTimeout, t, err)
		}
		r.LeaseTimeout = ts
	}
	if v, ok := item[attrEpoch].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return r, fmt.Errorf("lease of %s: bad %s %q: %w", shard, attrEpoch, v.Value, err)
		}
		r.Epoch = n
	}
	return r, nil
}

// GetLease takes or renews the lease of a shard for newOwner (the KCL calls it for both). It is
// a renewal when this worker holds the unexpired lease under the epoch it recorded; anything
// else is an acquisition and increments the epoch. It never writes the checkpoint.
func (l *Leases) GetLease(shard *par.ShardStatus, newOwner string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur, err := l.Get(ctx, shard.ID)
	if err != nil {
		return err
	}
	now := l.now().UTC()
	expired := !now.Before(cur.LeaseTimeout)
	if cur.Owner != "" && cur.Owner != newOwner && !expired {
		return chk.ErrLeaseNotAcquired{}
	}
	l.mu.Lock()
	mine := l.epochs[shard.ID]
	l.mu.Unlock()
	renewal := cur.Owner == newOwner && !expired && mine != 0 && mine == cur.Epoch
	epoch := cur.Epoch
	if !renewal {
		epoch = cur.Epoch + 1 // acquisition
	}
	timeout := now.Add(l.duration)
	names := map[string]string{"#o": attrOwner, "#t": attrTimeout, "#e": attrEpoch}
	values := map[string]types.AttributeValue{
		":new_owner":   &types.AttributeValueMemberS{Value: newOwner},
		":new_timeout": &types.AttributeValueMemberS{Value: timeout.Format(time.RFC3339Nano)},
		":new_epoch":   &types.AttributeValueMemberN{Value: strconv.FormatInt(epoch, 10)},
	}
	update := "SET #o = :new_owner, #t = :new_timeout, #e = :new_epoch"
	if shard.ParentShardId != "" {
		names["#p"] = attrParent
		values[":parent"] = &types.AttributeValueMemberS{Value: shard.ParentShardId}
		update += ", #p = :parent"
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
	if cur.Epoch == 0 {
		cond += " AND attribute_not_exists(#e)"
	} else {
		cond += " AND #e = :old_epoch"
		values[":old_epoch"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(cur.Epoch, 10)}
	}
	_, err = l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: l.key(shard.ID),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
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
	_, err := l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: l.key(shard),
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
	if cur.Owner != l.worker || cur.Epoch != epoch {
		return fmt.Errorf("%w (shard %s: owner %q epoch %d, ours %q epoch %d)", ErrFenced, shard, cur.Owner, cur.Epoch, l.worker, epoch)
	}
	return fmt.Errorf("%w (shard %s: stored %q, refused %q)", ErrRegression, shard, cur.Checkpoint, seq)
}

// ShardFinished reports whether a shard's lease row says it was read to its end and committed.
func (l *Leases) ShardFinished(ctx context.Context, shard string) (bool, error) {
	r, err := l.Get(ctx, shard)
	if err != nil {
		return false, err
	}
	return r.Checkpoint == ShardEnd, nil
}
