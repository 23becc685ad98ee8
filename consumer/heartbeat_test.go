package consumer

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
)

// Unit tests of the heartbeat records (heartbeat.go): what the processor does with one it
// reads, and which shards get one.

// heartbeatRec is a heartbeat record as Kinesis returns it.
func heartbeatRec(seq string, arrival time.Time) ktypes.Record {
	return ktypes.Record{SequenceNumber: aws.String(seq), PartitionKey: aws.String(HeartbeatPartitionKey),
		Data: heartbeatData("other-worker", arrival), ApproximateArrivalTimestamp: aws.Time(arrival)}
}

// A heartbeat is never handed on, yet it moves the shard's horizon to its arrival (less 1 ms,
// as any record) and is checkpointed with its delivery; a delivery of heartbeats alone commits
// at once. Only a record with both the partition key and the data prefix is a heartbeat.
func TestHeartbeatsMoveTheHorizonAndAreNotHandedOn(t *testing.T) {
	t.Parallel()
	e, now, p, loop := clockedShard(t)

	good := ktypes.Record{SequenceNumber: aws.String("101"), Data: goodRecord, ApproximateArrivalTimestamp: aws.Time(sec(10))}
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, Records: []ktypes.Record{good, heartbeatRec("102", sec(12))}})
	if got := e.sink.seqs(); !slices.Equal(got, []string{"101"}) {
		t.Fatalf("handed on %v, want only the DMS record 101", got)
	}
	if n := e.metrics.heartbeatCount(shard, "read"); n != 1 {
		t.Fatalf("heartbeats read: %d, want 1", n)
	}
	recordsRead := func() int { e.metrics.mu.Lock(); defer e.metrics.mu.Unlock(); return e.metrics.records }
	if n := recordsRead(); n != 1 {
		t.Fatalf("records counted: %d, want 1 (heartbeats are not records: /healthz would see a stall)", n)
	}
	loop.tick(e.ctx)
	e.wantHorizon(shard, sec(12).Add(-ms), sec(10), "a record and a heartbeat read")

	e.sink.ack(t, "101")
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, Records: []ktypes.Record{heartbeatRec("103", sec(13))}})
	// The record's delivery is checkpointed; a checkpoint past heartbeats alone waits a minute.
	e.wantCheckpoint(shard, "102", "a delivery of one heartbeat after the record was committed")
	if n := recordsRead(); n != 1 {
		t.Fatalf("records counted after a delivery of heartbeats alone: %d, want still 1", n)
	}
	loop.tick(e.ctx)
	e.wantHorizon(shard, sec(13).Add(-ms), time.Time{}, "a heartbeat alone")
	*now = now.Add(heartbeatCheckpointEvery)
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, Records: []ktypes.Record{heartbeatRec("104", sec(14))}})
	e.wantCheckpoint(shard, "103", "heartbeats alone, a minute after the last checkpoint")

	// The partition key alone, or the data alone, is not a heartbeat.
	keyOnly := ktypes.Record{SequenceNumber: aws.String("105"), PartitionKey: aws.String(HeartbeatPartitionKey), Data: goodRecord, ApproximateArrivalTimestamp: aws.Time(sec(15))}
	dataOnly := heartbeatRec("106", sec(16))
	dataOnly.PartitionKey = aws.String("public.t")
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, Records: []ktypes.Record{keyOnly, dataOnly}})
	if got := e.sink.seqs(); !slices.Equal(got, []string{"101", "105"}) {
		t.Fatalf("handed on %v, want 101 and 105 (a DMS record under the heartbeat's partition key)", got)
	}
	if _, _, dead, _ := e.metrics.counts(); dead != 1 {
		t.Fatalf("dead letters: %d, want 1 (heartbeat data under another partition key is not DMS)", dead)
	}
	if n := e.metrics.heartbeatCount(shard, "read"); n != 3 {
		t.Fatalf("heartbeats read: %d, want 3", n)
	}
}

// Heartbeats go to the owned shards that are open, caught up and quiet for an interval, each
// by its start hash key; a failed put is counted and returned.
func TestHeartbeatsGoToIdleOpenShards(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	now := sec(100)
	e.c.clock = func() time.Time { return now }
	e.c.cfg.WorkerID = me
	const (
		idle    = "shardId-000000000010" // at the tip, nothing ever read
		quiet   = "shardId-000000000011" // at the tip, last record 3 s ago
		busy    = "shardId-000000000012" // at the tip, last record 200 ms ago
		behind  = "shardId-000000000013" // not yet at the tip
		closing = "shardId-000000000014" // listed closed
	)
	e.stream.closed = map[string]bool{closing: true}
	deliverAt(e.start(idle, ""), 0, now)
	deliverAt(e.start(quiet, ""), 0, now, rec{"1", now.Add(-3 * time.Second)})
	deliverAt(e.start(busy, ""), 0, now, rec{"1", now.Add(-200 * time.Millisecond)})
	deliverAt(e.start(behind, ""), 5000, now, rec{"1", now.Add(-time.Minute)})
	deliverAt(e.start(closing, ""), 0, now)
	if err := e.c.shards.refresh(e.ctx); err != nil {
		t.Fatal(err)
	}

	if err := e.c.putHeartbeats(e.ctx, e.stream, time.Second); err != nil {
		t.Fatal(err)
	}
	if len(e.stream.puts) != 1 {
		t.Fatalf("%d PutRecords calls, want 1", len(e.stream.puts))
	}
	in := e.stream.puts[0]
	var hashes []string
	for _, r := range in.Records {
		hashes = append(hashes, aws.ToString(r.ExplicitHashKey))
		got := ktypes.Record{PartitionKey: r.PartitionKey, Data: r.Data}
		if !isHeartbeat(&got) || !strings.Contains(string(r.Data), `"worker":"me"`) {
			t.Fatalf("put %q under %q: not a heartbeat of worker me", r.Data, aws.ToString(r.PartitionKey))
		}
	}
	slices.Sort(hashes)
	if want := []string{hashOf(idle), hashOf(quiet)}; aws.ToString(in.StreamName) != "stream" || !slices.Equal(hashes, want) {
		t.Fatalf("put to stream %q at hash keys %v, want stream and %v", aws.ToString(in.StreamName), hashes, want)
	}
	if e.metrics.heartbeatCount(idle, "put") != 1 || e.metrics.heartbeatCount(busy, "put") != 0 {
		t.Fatalf("put metrics %v", e.metrics.heartbeats)
	}

	e.stream.putErr = errors.New("AccessDeniedException")
	if err := e.c.putHeartbeats(e.ctx, e.stream, time.Second); err == nil {
		t.Fatal("a refused PutRecords returned no error")
	}
	if e.metrics.heartbeatCount(idle, "put_failed") != 1 || e.metrics.heartbeatCount(quiet, "put_failed") != 1 {
		t.Fatalf("put_failed metrics %v", e.metrics.heartbeats)
	}
}

func TestHeartbeatIntervalIsValidated(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Stream, cfg.Application, cfg.WorkerID, cfg.Region = "s", "a", "w", "r"
	for _, tc := range []struct {
		every time.Duration
		ok    bool
	}{{0, true}, {minHeartbeatInterval, true}, {time.Second, true}, {-time.Second, false}, {10 * time.Millisecond, false}} {
		cfg.HeartbeatInterval = tc.every
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("heartbeat_interval %s: error %v, want ok=%v", tc.every, err, tc.ok)
		}
	}
}
