package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// fakeShards serves ListShards one shard per page, in the order given.
type fakeShards struct {
	shards []ktypes.Shard
	calls  int
}

func (f *fakeShards) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.calls++
	i := 0
	if in.NextToken != nil {
		if in.StreamName != nil {
			return nil, &ktypes.InvalidArgumentException{Message: aws.String("NextToken with StreamName")}
		}
		i = int(aws.ToString(in.NextToken)[0] - '0')
	}
	out := &kinesis.ListShardsOutput{Shards: f.shards[i : i+1]}
	if i+1 < len(f.shards) {
		out.NextToken = aws.String(string(rune('0' + i + 1)))
	}
	return out, nil
}

func shard(id string, r workload.HashRange, closed bool) ktypes.Shard {
	s := ktypes.Shard{ShardId: aws.String(id),
		HashKeyRange:        &ktypes.HashKeyRange{StartingHashKey: aws.String(r.Start.String()), EndingHashKey: aws.String(r.End.String())},
		SequenceNumberRange: &ktypes.SequenceNumberRange{StartingSequenceNumber: aws.String("1")}}
	if closed {
		s.SequenceNumberRange.EndingSequenceNumber = aws.String("9")
	}
	return s
}

func TestGenLagSource(t *testing.T) {
	even := workload.EvenHashRanges(4)
	whole := workload.EvenHashRanges(1)[0]
	// Out of order, with the closed parent of the stream's first shards.
	f := &fakeShards{shards: []ktypes.Shard{
		shard("shardId-000000000003", even[2], false), shard("shardId-000000000000", whole, true),
		shard("shardId-000000000004", even[3], false), shard("shardId-000000000001", even[0], false),
		shard("shardId-000000000002", even[1], false),
	}}
	msgs := workload.New(workload.Config{Seed: 5, Changes: 600, LoadRows: 30, Layout: workload.LayoutDMSDefault}).Messages()
	o := genOptions{stream: "s", lagShard: 2, lag: 20 * time.Millisecond}
	var out bytes.Buffer
	src, err := lagSource(context.Background(), f, o, msgs, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "shardId-000000000003") || !strings.Contains(out.String(), even[2].Start.String()) {
		t.Fatalf("lagging shard is not the third open one in hash-key order: %s", out.String())
	}
	// Through the sender: everything written once, per-key order kept.
	var want []workload.Message
	for m := range msgs {
		want = append(want, m)
	}
	k := &fakeKinesis{}
	s, _ := testSender(k)
	if err := s.send(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	checkWritten(t, want, k.written)

	o.lagShard = 4
	if _, err := lagSource(context.Background(), f, o, msgs, &out); err == nil || !strings.Contains(err.Error(), "4 open shards") {
		t.Fatalf("shard beyond the open ones: %v", err)
	}
	calls := f.calls
	o.lagShard = -1
	if got, err := lagSource(context.Background(), f, o, msgs, &out); err != nil || got == nil || f.calls != calls {
		t.Fatalf("no lag must not list shards: %v", err)
	}
}

func TestGenDMSFlags(t *testing.T) {
	base := []string{"--stream", "s", "--expected", "x", "--changes", "400"}
	o, err := parseGenArgs(append(base, "--layout", "primary-key", "--lag-shard", "1", "--lag", "45s",
		"--reload-table", "customers", "--reload-deletes", "7"))
	if err != nil {
		t.Fatal(err)
	}
	want := workload.Config{Seed: 1, Changes: 400, LoadRows: 1000, Layout: workload.LayoutPrimaryKey,
		Reload: workload.Reload{Table: "customers", At: 200, Deletes: 7, Updates: 10}}
	if got := o.workloadConfig(); got != want || o.lagShard != 1 || o.lag != 45*time.Second {
		t.Fatalf("workload config %+v (lag shard %d, %s), want %+v", got, o.lagShard, o.lag, want)
	}
	o, err = parseGenArgs(append(base, "--layout", "dms-default", "--reload-table", "events", "--reload-at", "0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := o.workloadConfig(); got.Layout != workload.LayoutDMSDefault || got.Reload != (workload.Reload{Table: "events", At: 0, Deletes: 10}) {
		t.Fatalf("workload config %+v", got)
	}
	o, err = parseGenArgs(base)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.workloadConfig(); got.Layout != workload.LayoutTable || got.Reload != (workload.Reload{}) || o.lagShard != -1 {
		t.Fatalf("default config %+v, lag shard %d", got, o.lagShard)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "shard"}, "unknown layout"},
		{[]string{"--lag-shard", "1"}, "go together"},
		{[]string{"--lag", "5s"}, "go together"},
		{[]string{"--lag-shard", "-2", "--lag", "5s"}, "--lag-shard"},
		{[]string{"--reload-table", "nope"}, "--reload-table"},
		{[]string{"--reload-table", "types", "--reload-at", "401"}, "--reload-at"},
		{[]string{"--reload-table", "types", "--reload-deletes", "-1"}, "--reload-deletes"},
		{[]string{"--reload-table", "events", "--reload-updates", "3"}, "keyed table"},
	} {
		_, err := parseGenArgs(append(append([]string(nil), base...), tc.args...))
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}
