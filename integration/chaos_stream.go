//go:build integration

package integration

// The chaos run's stream (chaosStream): the Kinesis stream's shards and the KCL lease table as
// the driver and the oracle read them, and the reshards the driver makes.

import (
	"context"
	"math/big"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// chaosStream is the stream and its lease table.
type chaosStream struct {
	t   *testing.T
	ctx context.Context
	kc  *kinesis.Client
	ddb *dynamodb.Client
	// name is the stream's; app the workers' application name, the lease table's.
	name, app string
}

// leases reads every lease row (checkpoint.ParseLeaseRow; a malformed timeout or epoch reads as
// zero, as for status).
func (s *chaosStream) leases(ctx context.Context) (map[string]checkpoint.LeaseRow, error) {
	rows := map[string]checkpoint.LeaseRow{}
	in := &dynamodb.ScanInput{TableName: aws.String(s.app), ConsistentRead: aws.Bool(true)}
	for {
		out, err := s.ddb.Scan(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			r, _ := checkpoint.ParseLeaseRow(item)
			rows[r.Shard] = r
		}
		if out.LastEvaluatedKey == nil {
			return rows, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// held returns the unfinished shards whose unexpired lease a worker holds, per worker id.
func (s *chaosStream) held() map[string][]string {
	rows, err := s.leases(s.ctx)
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	now := time.Now()
	for _, r := range rows {
		if r.Owner != "" && r.Checkpoint != checkpoint.ShardEnd && r.LeaseTimeout.After(now) {
			out[r.Owner] = append(out[r.Owner], r.Shard)
		}
	}
	for _, sh := range out {
		sort.Strings(sh)
	}
	return out
}

type openShard struct {
	id     string
	lo, hi *big.Int
}

// shardList returns every shard, and the open ones sorted by hash range.
func (s *chaosStream) shardList() ([]kintypes.Shard, []openShard, error) {
	var all []kintypes.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(s.name)}
	for {
		out, err := s.kc.ListShards(s.ctx, in)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	var open []openShard
	for _, sh := range all {
		if sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil {
			continue
		}
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
		open = append(open, openShard{id: aws.ToString(sh.ShardId), lo: lo, hi: hi})
	}
	sort.Slice(open, func(i, j int) bool { return open[i].lo.Cmp(open[j].lo) < 0 })
	return all, open, nil
}

// split splits an open shard at the middle of its hash range.
func (s *chaosStream) split(sh openShard) error {
	return splitShard(s.ctx, s.kc, s.name, sh.id, sh.lo, sh.hi)
}

// splitShard splits shard id, whose hash keys run from lo to hi, at the middle of that range:
// the second child starts just above the midpoint.
func splitShard(ctx context.Context, kc *kinesis.Client, stream, id string, lo, hi *big.Int) error {
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	mid.Add(mid, big.NewInt(1))
	_, err := kc.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream),
		ShardToSplit: aws.String(id), NewStartingHashKey: aws.String(mid.String())})
	return err
}

// merge merges two adjacent open shards.
func (s *chaosStream) merge(a, b openShard) error {
	_, err := s.kc.MergeShards(s.ctx, &kinesis.MergeShardsInput{StreamName: aws.String(s.name),
		ShardToMerge: aws.String(a.id), AdjacentShardToMerge: aws.String(b.id)})
	return err
}

func (s *chaosStream) waitActive() {
	w := kinesis.NewStreamExistsWaiter(s.kc, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(s.ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(s.name)}, 2*time.Minute); err != nil {
		s.t.Fatalf("stream %s not ACTIVE after a reshard: %v", s.name, err)
	}
}
