package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// The lease-balancing writes of Leases (share.go).

// FetchCheckpoint is the KCL's read of a shard's row before it tries to take the lease (every
// shard-sync round, for every shard this worker does not hold), when a consumer starts, and
// while a child waits for its parent. For a shard this worker may not take anyway (Balance),
// it fills the shard's status from the last scan instead of reading DynamoDB, as the KCL's own
// read would: a short shard-sync interval then costs no read per shard and round. A shard
// whose status names this worker (a consumer starting) is always read.
func (l *Leases) FetchCheckpoint(shard *par.ShardStatus) error {
	if shard.GetLeaseOwner() != l.worker {
		if r, ok := l.balance.cached(shard.ID, l.held(), l.now()); ok {
			return fillStatus(shard, r)
		}
	}
	return l.DynamoCheckpoint.FetchCheckpoint(shard)
}

// fillStatus sets shard from r as the KCL's FetchCheckpoint sets it from the item it reads.
func fillStatus(shard *par.ShardStatus, r LeaseRow) error {
	if r.Checkpoint == "" {
		return chk.ErrSequenceIDNotFound
	}
	shard.SetCheckpoint(r.Checkpoint)
	if r.Owner != "" {
		shard.SetLeaseOwner(r.Owner)
	}
	if !r.LeaseTimeout.IsZero() {
		shard.Mux.Lock()
		shard.LeaseTimeout = r.LeaseTimeout
		shard.Mux.Unlock()
	}
	return nil
}

// Reserve marks the shard's lease, which this worker holds under epoch, as being handed off to
// taker until until (AttrHandoffTo, AttrHandoffUntil): no other worker takes it meanwhile, and
// taker's acquisition removes the mark. ErrFenced when the lease moved on or the shard is
// finished.
func (l *Leases) Reserve(ctx context.Context, shard string, epoch int64, taker string, until time.Time) error {
	_, err := l.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(l.table), Key: LeaseKey(shard),
		UpdateExpression:    aws.String("SET #hto = :to, #hun = :until"),
		ConditionExpression: aws.String("#o = :me AND #e = :epoch AND (attribute_not_exists(#c) OR #c <> :end)"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#e": attrEpoch, "#c": attrSeq,
			"#hto": AttrHandoffTo, "#hun": AttrHandoffUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me":    &types.AttributeValueMemberS{Value: l.worker},
			":epoch": &types.AttributeValueMemberN{Value: strconv.FormatInt(epoch, 10)},
			":end":   &types.AttributeValueMemberS{Value: ShardEnd},
			":to":    &types.AttributeValueMemberS{Value: taker},
			":until": unixMilli(until),
		}})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("%w (shard %s: not held by %s under epoch %d, or finished)", ErrFenced, shard, l.worker, epoch)
	}
	if err != nil {
		return fmt.Errorf("reserve %s for %s: %w", shard, taker, err)
	}
	return nil
}

// Announce writes this worker's presence row: it counts as live until until.
func (l *Leases) Announce(ctx context.Context, until time.Time) error {
	item := LeaseKey(PresenceKey(l.worker))
	item[AttrWorkerUntil] = unixMilli(until)
	item[AttrStateVersion] = &types.AttributeValueMemberN{Value: stateversion.CurrentText}
	if _, err := l.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(l.table), Item: item}); err != nil {
		return fmt.Errorf("announce worker %s: %w", l.worker, err)
	}
	return nil
}

// Withdraw removes this worker's presence row (it stops: the others' share grows at once).
func (l *Leases) Withdraw(ctx context.Context) error {
	if _, err := l.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(l.table), Key: LeaseKey(PresenceKey(l.worker))}); err != nil {
		return fmt.Errorf("withdraw worker %s: %w", l.worker, err)
	}
	return nil
}
