package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
)

// kclListingMaxAge is how long the KCL's own ListShards answers are reused (listCache).
const kclListingMaxAge = 10 * time.Second

// listCache answers the KCL's ListShards calls from the last answer to the same request while
// it is younger than maxAge. The KCL (vmware-go-kcl-v2 v1.0.0) lists every shard of the stream
// in each shard-sync round (consumer.shard_sync, 100 ms) and takes at most one lease per round:
// with several workers that is tens of ListShards calls a second, which Kinesis limits to 100 a
// second per stream and which slowed every other call to the emulator by seconds. The consumer's
// own listings (shardMap, every horizon round) are kept as answers too (store). A new shard (a
// reshard) is seen at most maxAge later; the consumer's own listing is not answered from here.
type listCache struct {
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	answers map[listKey]listAnswer
	// Calls and Hits count the ListShards calls seen and the ones answered from the cache.
	calls, hits int
}

// listKey is what identifies a ListShards request of the KCL: a page token or the stream.
type listKey struct{ stream, token string }

type listAnswer struct {
	out *kinesis.ListShardsOutput
	at  time.Time
}

func newListCache(maxAge time.Duration) *listCache {
	return &listCache{maxAge: maxAge, now: time.Now, answers: map[listKey]listAnswer{}}
}

// option is the Kinesis client option that installs the cache (kinesis.NewFromConfig).
func (lc *listCache) option(o *kinesis.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("dms2iceberg.listCache", lc.handle), middleware.Before)
	})
}

func (lc *listCache) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error) {
	req, ok := in.Parameters.(*kinesis.ListShardsInput)
	if !ok || req.ExclusiveStartShardId != nil || req.ShardFilter != nil || req.MaxResults != nil {
		return next.HandleInitialize(ctx, in)
	}
	key := listKey{aws.ToString(req.StreamName) + "|" + aws.ToString(req.StreamARN), aws.ToString(req.NextToken)}
	lc.mu.Lock()
	lc.calls++
	if a, ok := lc.answers[key]; ok && lc.now().Sub(a.at) < lc.maxAge {
		lc.hits++
		lc.mu.Unlock()
		return middleware.InitializeOutput{Result: a.out}, middleware.Metadata{}, nil
	}
	lc.mu.Unlock()
	started := lc.now()
	out, md, err := next.HandleInitialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	if res, ok := out.Result.(*kinesis.ListShardsOutput); ok {
		lc.mu.Lock()
		if len(lc.answers) > 64 { // page tokens expire: keep the map small
			clear(lc.answers)
		}
		lc.answers[key] = listAnswer{out: res, at: started}
		lc.mu.Unlock()
	}
	return out, md, err
}

// store keeps a complete listing of stream that started at started (the consumer's own, which
// the horizon loop refreshes every round, in the background when Kinesis is slow) as the answer
// to the KCL's request for stream, unless a later one is kept: so the KCL's rounds rarely wait
// for a ListShards call of their own.
func (lc *listCache) store(stream string, shards []ktypes.Shard, started time.Time) {
	key := listKey{stream + "|", ""}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if a, ok := lc.answers[key]; ok && !a.at.Before(started) {
		return
	}
	lc.answers[key] = listAnswer{out: &kinesis.ListShardsOutput{Shards: shards}, at: started}
}

// stats returns the calls seen and the ones answered from the cache.
func (lc *listCache) stats() (calls, hits int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.calls, lc.hits
}
