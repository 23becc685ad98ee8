package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"math/big"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// addGenDMSFlags declares gen's flags for DMS's partitioning modes, a lagging shard and a
// mid-stream table reload.
func addGenDMSFlags(fs *flag.FlagSet, o *genOptions) {
	fs.TextVar(&o.layout, "layout", workload.LayoutTable, "partition keys: table (every version of a key on one partition key), "+
		"dms-default (load by primary key, CDC by schema.table, control records by task) or primary-key (ParallelApply: every data record by primary key, key changes under the new key)")
	fs.IntVar(&o.lagShard, "lag-shard", -1, "delay the records of this open shard (0-based, in hash-key order) by --lag; -1: none")
	fs.DurationVar(&o.lag, "lag", 0, "how late the records of --lag-shard arrive (held back, then sent in their order)")
	fs.StringVar(&o.reloadTable, "reload-table", "", "reload this table mid-stream (customers, order_items, events or types): outage deletes and updates without records, a new create-table, a load of its current rows, then CDC")
	fs.IntVar(&o.reloadAt, "reload-at", -1, "CDC records written before the reload starts; -1: half of --changes")
	fs.IntVar(&o.reloadDeletes, "reload-deletes", 10, "rows deleted at the source during the outage before the reload, with no delete record")
	fs.IntVar(&o.reloadUpdates, "reload-updates", -1, "rows updated at the source during the outage, with no update record; -1: 10 for a keyed table, 0 for events")
}

// checkGenDMSFlags checks those flags and resolves their defaults.
func checkGenDMSFlags(o *genOptions) error {
	switch {
	case o.lagShard < -1:
		return usageErrorf("--lag-shard must be -1 or a shard index, got %d", o.lagShard)
	case o.lag < 0:
		return usageErrorf("--lag must not be negative, got %s", o.lag)
	case (o.lagShard >= 0) != (o.lag > 0):
		return usageErrorf("--lag-shard and --lag go together: give both or neither")
	}
	if o.reloadTable == "" {
		return nil
	}
	if o.reloadAt < 0 {
		o.reloadAt = o.changes / 2
	}
	if o.reloadUpdates < 0 {
		o.reloadUpdates = 10
		if o.reloadTable == workload.Events {
			o.reloadUpdates = 0
		}
	}
	switch {
	case o.reloadAt > o.changes:
		return usageErrorf("--reload-at must be between 0 and --changes (%d), got %d", o.changes, o.reloadAt)
	case o.reloadDeletes < 0:
		return usageErrorf("--reload-deletes must not be negative, got %d", o.reloadDeletes)
	}
	if err := o.workloadConfig().Validate(); err != nil {
		return usageErrorf("--reload-table: %w", err)
	}
	return nil
}

// countMessages returns the number of records of gen's finite workload.
func countMessages(gen *workload.Generator) int {
	n := 0
	for range gen.Messages() {
		n++
	}
	return n
}

// shardLister is the part of the Kinesis client lagSource uses.
type shardLister interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
}

// lagSource returns src, or, with --lag-shard, src with that open shard's records delayed by
// --lag (workload.DelayShard). Open shards are numbered in the order of their starting hash key.
func lagSource(ctx context.Context, api shardLister, o genOptions, src iter.Seq[workload.Message], out io.Writer) (iter.Seq[workload.Message], error) {
	if o.lagShard < 0 {
		return src, nil
	}
	shards, err := openShards(ctx, api, o.stream)
	if err != nil {
		return nil, err
	}
	if o.lagShard >= len(shards) {
		return nil, fmt.Errorf("--lag-shard %d: stream %s has %d open shards", o.lagShard, o.stream, len(shards))
	}
	sh := shards[o.lagShard]
	if sh.HashKeyRange == nil {
		return nil, fmt.Errorf("shard %s has no hash key range", aws.ToString(sh.ShardId))
	}
	rng, err := workload.ParseHashRange(aws.ToString(sh.HashKeyRange.StartingHashKey), aws.ToString(sh.HashKeyRange.EndingHashKey))
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", aws.ToString(sh.ShardId), err)
	}
	fmt.Fprintf(out, "gen: records of shard %s (hash keys %s) arrive %s late\n", aws.ToString(sh.ShardId), rng, o.lag)
	return workload.DelayShard(ctx, src, workload.Lag{Range: rng, Delay: o.lag}), nil
}

// openShards lists the stream's open shards, in the order of their starting hash key.
func openShards(ctx context.Context, api shardLister, stream string) ([]ktypes.Shard, error) {
	var shards []ktypes.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		page, err := api.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list shards of %s: %w", stream, err)
		}
		for _, s := range page.Shards {
			if s.SequenceNumberRange == nil || s.SequenceNumberRange.EndingSequenceNumber == nil {
				shards = append(shards, s)
			}
		}
		if page.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
	start := func(s ktypes.Shard) *big.Int {
		n := new(big.Int)
		if s.HashKeyRange != nil {
			if _, ok := n.SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10); !ok {
				n.SetInt64(0)
			}
		}
		return n
	}
	slices.SortFunc(shards, func(a, b ktypes.Shard) int { return start(a).Cmp(start(b)) })
	return shards, nil
}
