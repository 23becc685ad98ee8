package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// KinesisAPI is the part of the Kinesis client the consumer uses directly (the KCL has its own).
type KinesisAPI interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

// shardInfo is what the consumer needs to know about a shard's lineage.
type shardInfo struct {
	parents []string // ParentShardId and AdjacentParentShardId, when set
	// closed: the shard has an ending sequence number (split or merged away); it delivers no
	// new records, only what it holds.
	closed bool
	// startHash is the lowest hash key of the shard's range: a record put with it as its
	// ExplicitHashKey goes to this shard while it is open (heartbeat.go).
	startHash string
}

// shardMap caches the stream's shards (ListShards), refreshed when a shard is unknown or the
// cache is older than maxAge.
type shardMap struct {
	api    KinesisAPI
	stream string
	maxAge time.Duration

	mu     sync.Mutex
	shards map[string]shardInfo // replaced whole by refresh, never modified: shareable
	// fetched is when the listing in shards started: every shard listed open was open then.
	fetched time.Time
	// onList, when set, is given every complete listing and when it started (listCache.store).
	onList func(shards []ktypes.Shard, started time.Time)
}

func newShardMap(api KinesisAPI, stream string) *shardMap {
	return &shardMap{api: api, stream: stream, maxAge: 10 * time.Second}
}

func (m *shardMap) refresh(ctx context.Context) error {
	started := time.Now()
	shards := make(map[string]shardInfo)
	var all []ktypes.Shard // for onList
	in := &kinesis.ListShardsInput{StreamName: aws.String(m.stream)}
	for {
		out, err := m.api.ListShards(ctx, in)
		if err != nil {
			return fmt.Errorf("list shards of %s: %w", m.stream, err)
		}
		if m.onList != nil {
			all = append(all, out.Shards...)
		}
		for _, s := range out.Shards {
			info := shardInfo{closed: s.SequenceNumberRange != nil && aws.ToString(s.SequenceNumberRange.EndingSequenceNumber) != ""}
			if s.HashKeyRange != nil {
				info.startHash = aws.ToString(s.HashKeyRange.StartingHashKey)
			}
			for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
				if aws.ToString(p) != "" {
					info.parents = append(info.parents, aws.ToString(p))
				}
			}
			shards[aws.ToString(s.ShardId)] = info
		}
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	m.mu.Lock()
	if !started.Before(m.fetched) { // a listing that started earlier never replaces a later one
		m.shards, m.fetched = shards, started
	}
	m.mu.Unlock()
	if m.onList != nil {
		m.onList(all, started)
	}
	return nil
}

// snapshot lists the stream's shards now and returns them (read-only) with the time the listing
// started.
func (m *shardMap) snapshot(ctx context.Context) (map[string]shardInfo, time.Time, error) {
	if err := m.refresh(ctx); err != nil {
		return nil, time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shards, m.fetched, nil
}

// cached returns the last listing (read-only; nil before the first) without listing again.
func (m *shardMap) cached() map[string]shardInfo {
	shards, _ := m.cachedAt()
	return shards
}

// cachedAt returns the last listing and when it started (zero before the first).
func (m *shardMap) cachedAt() (map[string]shardInfo, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shards, m.fetched
}

// lookup returns the shard's info and whether the stream still has it.
func (m *shardMap) lookup(ctx context.Context, shard string, fresh bool) (shardInfo, bool, error) {
	m.mu.Lock()
	info, ok := m.shards[shard]
	stale := m.shards == nil || time.Since(m.fetched) > m.maxAge
	m.mu.Unlock()
	if ok && !fresh && !stale {
		return info, true, nil
	}
	if err := m.refresh(ctx); err != nil {
		return shardInfo{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	info, ok = m.shards[shard]
	return info, ok, nil
}

// trimmedPast reports whether records after the checkpoint seq may have been trimmed away by
// the stream's retention: the checkpointed record itself is no longer readable.
func trimmedPast(ctx context.Context, api KinesisAPI, stream, shard, seq string) (bool, error) {
	it, err := api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
		ShardId: aws.String(shard), ShardIteratorType: ktypes.ShardIteratorTypeAtSequenceNumber,
		StartingSequenceNumber: aws.String(seq)})
	if err != nil {
		var bad *ktypes.InvalidArgumentException
		if errors.As(err, &bad) {
			return true, nil
		}
		return false, fmt.Errorf("iterator at checkpoint %s of %s: %w", seq, shard, err)
	}
	out, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(1)})
	if err != nil {
		return false, fmt.Errorf("read checkpoint record %s of %s: %w", seq, shard, err)
	}
	if len(out.Records) == 0 {
		return true, nil
	}
	return aws.ToString(out.Records[0].SequenceNumber) != seq, nil
}
