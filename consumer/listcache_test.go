package consumer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The KCL's ListShards calls are answered from the last answer for maxAge, per request (a page
// token is its own request); other calls and older answers go to Kinesis.
func TestListCacheReusesTheKCLsListing(t *testing.T) {
	t.Parallel()
	var lists, others atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if r.Header.Get("X-Amz-Target") == "Kinesis_20131202.ListShards" {
			lists.Add(1)
			_, _ = w.Write([]byte(`{"Shards":[{"ShardId":"shardId-000000000000","HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"1"},"SequenceNumberRange":{"StartingSequenceNumber":"1"}}]}`))
			return
		}
		others.Add(1)
		_, _ = w.Write([]byte(`{"ShardIterator":"it"}`))
	}))
	defer srv.Close()
	clock := time.Unix(1000, 0)
	lc := newListCache(time.Second)
	lc.now = func() time.Time { return clock }
	kc := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}}, lc.option)
	ctx := context.Background()
	list := func(token string) {
		t.Helper()
		in := &kinesis.ListShardsInput{StreamName: aws.String("s")}
		if token != "" {
			in = &kinesis.ListShardsInput{NextToken: aws.String(token)}
		}
		out, err := kc.ListShards(ctx, in)
		if err != nil || len(out.Shards) != 1 {
			t.Fatalf("ListShards: %v, %+v", err, out)
		}
	}
	list("")
	list("")
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d ListShards calls reached Kinesis within maxAge, want 1", n)
	}
	list("page2")
	if n := lists.Load(); n != 2 {
		t.Fatalf("a page token is its own request: %d calls, want 2", n)
	}
	clock = clock.Add(time.Second)
	list("")
	if n := lists.Load(); n != 3 {
		t.Fatalf("an answer maxAge old was reused: %d calls, want 3", n)
	}
	for range 2 {
		if _, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("s"),
			ShardId: aws.String("shardId-000000000000"), ShardIteratorType: "TRIM_HORIZON"}); err != nil {
			t.Fatal(err)
		}
	}
	if calls, hits := lc.stats(); others.Load() != 2 || calls != 4 || hits != 1 {
		t.Fatalf("other calls %d (want 2), ListShards seen %d (want 4), from the cache %d (want 1)", others.Load(), calls, hits)
	}
	// The consumer's own listing answers the KCL's request for the stream; an older one does not
	// replace it.
	clock = clock.Add(time.Second)
	lc.store("s", []ktypes.Shard{{ShardId: aws.String("a")}, {ShardId: aws.String("b")}}, clock)
	lc.store("s", []ktypes.Shard{{ShardId: aws.String("old")}}, clock.Add(-time.Millisecond))
	out, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("s")})
	if err != nil || len(out.Shards) != 2 || lists.Load() != 3 {
		t.Fatalf("after a stored listing: %v, %d shards (want 2), %d calls reached Kinesis (want 3)", err, len(out.Shards), lists.Load())
	}
}
