package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// fakeKinesis serves ListShards in pages of one shard, and a shard whose first readable record
// is first.
type fakeKinesis struct {
	shards []ktypes.Shard
	first  string // sequence number of the oldest record still in the stream
	lists  int
}

func (f *fakeKinesis) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.lists++
	i := 0
	if in.NextToken != nil {
		i = int(aws.ToString(in.NextToken)[0] - '0')
	}
	out := &kinesis.ListShardsOutput{Shards: f.shards[i : i+1]}
	if i+1 < len(f.shards) {
		out.NextToken = aws.String(string(rune('0' + i + 1)))
	}
	return out, nil
}

func (f *fakeKinesis) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return &kinesis.GetShardIteratorOutput{ShardIterator: in.StartingSequenceNumber}, nil
}

// GetRecords returns the record at the iterator's sequence number when it is still in the
// stream, else the oldest one (as Kinesis does for a trimmed position).
func (f *fakeKinesis) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	seq := aws.ToString(in.ShardIterator)
	if len(seq) < len(f.first) || (len(seq) == len(f.first) && seq < f.first) {
		seq = f.first
	}
	return &kinesis.GetRecordsOutput{Records: []ktypes.Record{{SequenceNumber: aws.String(seq)}}}, nil
}

func TestShardMapFollowsPagesAndKnowsBothParents(t *testing.T) {
	t.Parallel()
	f := &fakeKinesis{shards: []ktypes.Shard{
		{ShardId: aws.String("s0")},
		{ShardId: aws.String("s1")},
		{ShardId: aws.String("s2"), ParentShardId: aws.String("s0"), AdjacentParentShardId: aws.String("s1")},
	}}
	m := newShardMap(f, "stream")
	info, ok, err := m.lookup(context.Background(), "s2", false)
	if err != nil || !ok {
		t.Fatalf("lookup s2: %v %v", ok, err)
	}
	if len(info.parents) != 2 || info.parents[0] != "s0" || info.parents[1] != "s1" {
		t.Fatalf("parents %v, want [s0 s1] (the adjacent parent of a merge counts too)", info.parents)
	}
	lists := f.lists
	if _, ok, _ := m.lookup(context.Background(), "s0", false); !ok || f.lists != lists {
		t.Fatalf("a cached shard was listed again (%d -> %d calls)", lists, f.lists)
	}
	if _, ok, _ := m.lookup(context.Background(), "gone", false); ok {
		t.Fatal("a shard the stream does not have was found")
	}
}

// The snapshot the horizon loop reads: every shard across pages, closed ones (with an ending
// sequence number) marked, and the time the listing started, which is no later than the call.
func TestShardMapSnapshotMarksClosedShards(t *testing.T) {
	t.Parallel()
	f := &fakeKinesis{shards: []ktypes.Shard{
		{ShardId: aws.String("s0"), SequenceNumberRange: &ktypes.SequenceNumberRange{StartingSequenceNumber: aws.String("1"), EndingSequenceNumber: aws.String("99")}},
		{ShardId: aws.String("s1"), SequenceNumberRange: &ktypes.SequenceNumberRange{StartingSequenceNumber: aws.String("100")}, ParentShardId: aws.String("s0")},
	}}
	m := newShardMap(f, "stream")
	before := time.Now()
	shards, at, err := m.snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 2 || !shards["s0"].closed || shards["s1"].closed || len(shards["s1"].parents) != 1 {
		t.Fatalf("snapshot %+v", shards)
	}
	if at.Before(before) || at.After(time.Now()) {
		t.Fatalf("listed at %v, want between %v and now", at, before)
	}
}

func TestTrimmedPastDetectsACheckpointOlderThanRetention(t *testing.T) {
	t.Parallel()
	f := &fakeKinesis{first: "200"}
	gap, err := trimmedPast(context.Background(), f, "stream", "s0", "150")
	if err != nil || !gap {
		t.Fatalf("checkpoint 150 with oldest record 200: gap=%v err=%v, want a reported gap", gap, err)
	}
	gap, err = trimmedPast(context.Background(), f, "stream", "s0", "250")
	if err != nil || gap {
		t.Fatalf("checkpoint 250 still readable: gap=%v err=%v", gap, err)
	}
}
