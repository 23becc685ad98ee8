package consumer

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/zap"
)

// Heartbeat records (consumer.heartbeat_interval; off by default, design.md §4).
//
// A caught-up shard that delivers nothing has only the tip rule for its horizon: read time
// minus consumer.arrival_margin, since a record put just before the read may not be readable
// yet. With DMS's default layout one shard carries only the task's control records, so that
// margin is what every table's freshness waits for. A record this consumer puts into the idle
// shard and reads back carries an arrival time from Kinesis itself, and every record of the
// shard that arrived before it comes before it in the shard: the processor's ordinary rule
// (horizon = last arrival - 1 ms) then covers the shard up to the heartbeat, with no margin and
// no clock of ours involved. The heartbeat is never handed on; it is acknowledged with its
// delivery and counted.

// HeartbeatPartitionKey is the partition key of every heartbeat record. A record is a heartbeat
// when it has this partition key and its data starts with heartbeatPrefix; the processor skips
// such records whether or not this process puts heartbeats, so a fleet with mixed settings, or
// another application's heartbeats on the same stream, is read correctly.
const HeartbeatPartitionKey = "dms2iceberg-heartbeat"

// heartbeatPrefix starts every heartbeat's data. DMS's records are JSON objects that start with
// "data" or "metadata", so no DMS record starts with it.
var heartbeatPrefix = []byte(`{"dms2iceberg-heartbeat":`)

// minHeartbeatInterval bounds consumer.heartbeat_interval from below: at most 10 puts per
// second per idle shard (a shard takes 1,000 records per second).
const minHeartbeatInterval = 100 * time.Millisecond

// heartbeatCheckpointEvery: a checkpoint that passes only heartbeats is written at most this
// often (processor.checkpoint).
const heartbeatCheckpointEvery = time.Minute

// heartbeatPutTimeout bounds one PutRecords call of heartbeats (at least one interval).
const heartbeatPutTimeout = 2 * time.Second

// maxPutRecords is the most records one PutRecords call takes.
const maxPutRecords = 500

// isHeartbeat reports whether r is a heartbeat record.
func isHeartbeat(r *ktypes.Record) bool { return IsHeartbeat(aws.ToString(r.PartitionKey), r.Data) }

// IsHeartbeat reports whether a record with this partition key and data is a heartbeat record
// (for tools that read the stream themselves).
func IsHeartbeat(partitionKey string, data []byte) bool {
	return partitionKey == HeartbeatPartitionKey && bytes.HasPrefix(data, heartbeatPrefix)
}

// heartbeatData is the data of a heartbeat put by worker at now.
func heartbeatData(worker string, now time.Time) []byte {
	return fmt.Appendf(nil, `%s{"worker":%s,"at":%d}}`, heartbeatPrefix, strconv.Quote(worker), now.UnixMilli())
}

// PutAPI is the part of the Kinesis client the heartbeats use.
type PutAPI interface {
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// runHeartbeats puts heartbeats every interval until ctx ends (the goroutine Run owns and
// waits for). Failures are counted and logged at most once per heldLogEvery: an idle shard's
// horizon then falls back to the tip rule, which is slower but as safe.
func (c *Consumer) runHeartbeats(ctx context.Context, api PutAPI, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.putHeartbeats(ctx, api, every)
		if err != nil && ctx.Err() == nil && c.now().Sub(warned) >= heldLogEvery {
			warned = c.now()
			c.log.Warn("could not put heartbeat records (consumer.heartbeat_interval): idle shards' horizons "+
				"fall back to read time minus consumer.arrival_margin meanwhile (kinesis:PutRecords refused, throttled or slow)", zap.Error(err))
		}
	}
}

// heartbeatShards returns the shards that get a heartbeat now, with their start hash keys: the
// owned ones that are open in the last listing, have read at the tip, and have handed on no
// record that arrived within the last interval (a shard with traffic moves its horizon with
// its own records).
func (c *Consumer) heartbeatShards(now time.Time, every time.Duration) (shards, hashes []string) {
	listed := c.shards.cached()
	for _, p := range c.liveProcessors() {
		info, ok := listed[p.shard]
		if !ok || info.closed || info.startHash == "" || p.hz.tipAt.Load() == 0 {
			continue
		}
		if last := p.hz.lastArrival.Load(); last != 0 && now.UnixMilli()-last < every.Milliseconds() {
			continue
		}
		shards, hashes = append(shards, p.shard), append(hashes, info.startHash)
	}
	return shards, hashes
}

// putHeartbeats puts one heartbeat into each shard heartbeatShards names.
func (c *Consumer) putHeartbeats(ctx context.Context, api PutAPI, every time.Duration) error {
	now := c.now()
	shards, hashes := c.heartbeatShards(now, every)
	var first error
	data, key := heartbeatData(c.cfg.WorkerID, now), aws.String(HeartbeatPartitionKey)
	for start := 0; start < len(shards); start += maxPutRecords {
		end := min(start+maxPutRecords, len(shards))
		in := &kinesis.PutRecordsInput{StreamName: aws.String(c.cfg.Stream)}
		for i := start; i < end; i++ {
			in.Records = append(in.Records, ktypes.PutRecordsRequestEntry{Data: data, PartitionKey: key, ExplicitHashKey: aws.String(hashes[i])})
		}
		// A put that takes longer than the interval delays the next ones (ticks are dropped
		// meanwhile); one that fails is retried at the next tick.
		cctx, cancel := context.WithTimeout(ctx, max(every, heartbeatPutTimeout))
		out, err := api.PutRecords(cctx, in)
		cancel()
		if err != nil {
			for _, s := range shards[start:end] {
				c.metrics.Heartbeats(s, "put_failed", 1)
			}
			if first == nil {
				first = err
			}
			continue
		}
		for i, r := range out.Records {
			event := "put"
			if r.ErrorCode != nil {
				event = "put_failed"
				if first == nil {
					first = fmt.Errorf("shard %s: %s: %s", shards[start+i], aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				}
			}
			c.metrics.Heartbeats(shards[start+i], event, 1)
		}
	}
	return first
}
