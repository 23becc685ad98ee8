package consumer

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// Unit tests of the shard processor over the in-memory lease store (processor_harness_test.go).

const shard = "shardId-000000000001"

// Invariant 1: the checkpoint only covers deliveries every event of which is acknowledged, and
// every delivery before them.
func TestProcessorCheckpointsOnlyTheAcknowledgedPrefix(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	deliver(p, "101", "102")
	deliver(p, "103", "104")
	deliver(p, "105")
	e.sink.ack(t, "103", "104", "105") // later deliveries commit first
	e.sink.ack(t, "101")               // the first one only in part
	deliver(p)                         // an empty read checkpoints too
	e.wantCheckpoint(shard, "", "the first delivery is not fully acknowledged")
	e.sink.ack(t, "102")
	deliver(p)
	e.wantCheckpoint(shard, "105", "every delivery acknowledged")
	if got, _, _, _ := e.metrics.counts(); !slices.Equal(got, []string{"105"}) {
		t.Fatalf("Checkpointed metrics %v, want [105]", got)
	}
}

// A processor that resumes from a checkpoint never writes one at or below it.
func TestProcessorResumesAfterItsCheckpoint(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.stream.first = "100"
	e.take(e.leases, shard, me)
	if err := e.leases.Checkpoint(t.Context(), shard, e.leases.Epoch(shard), "200"); err != nil {
		t.Fatal(err)
	}
	p := e.start(shard, "200")
	e.sink.autoAck = true
	deliver(p, "150") // a replayed record at or below the checkpoint
	e.wantCheckpoint(shard, "200", "after a delivery below the checkpoint")
	deliver(p, "201")
	e.wantCheckpoint(shard, "201", "after the resumed delivery")
	if _, _, _, trimmed := e.metrics.counts(); trimmed != 0 {
		t.Fatalf("a readable checkpoint was reported as trimmed past (%d)", trimmed)
	}
}

// A checkpoint older than the stream's oldest record is reported (records may have been lost
// upstream), and the processor continues.
func TestProcessorReportsACheckpointTrimmedPast(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.stream.first = "300"
	p := e.start(shard, "150")
	if _, _, _, trimmed := e.metrics.counts(); trimmed != 1 {
		t.Fatalf("TrimmedPast reported %d times, want 1", trimmed)
	}
	e.sink.autoAck = true
	deliver(p, "300")
	e.wantCheckpoint(shard, "300", "after the first delivery")
}

// gatedChild starts the processor of shard, a child of parent (leased by worker "old", not
// finished), delivers seqs to it on another goroutine and returns once the processor reports
// waiting for the parent (failing if it hands on a record first). done closes when the delivery
// returns.
func gatedChild(t *testing.T, e *procEnv, seqs ...string) (p *processor, old *checkpoint.MemLeases, parent string, done chan struct{}) {
	t.Helper()
	parent = "shardId-000000000000"
	old = e.table.Worker("old", 0)
	e.stream.shards[parent] = nil
	e.take(old, parent, "old")
	p = e.start(shard, "", parent)
	done = make(chan struct{})
	go func() { defer close(done); deliver(p, seqs...) }()
	select {
	case w := <-e.metrics.waiting:
		if !w {
			t.Fatal("WaitingForParents(false) before (true)")
		}
	case seq := <-e.sink.submitted:
		t.Fatalf("record %s handed on while the parent is unfinished", seq)
	}
	return p, old, parent, done
}

// A child shard hands on nothing until its parent is finished (SHARD_END).
func TestProcessorWaitsForParentsBeforeHandingOn(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	_, old, parent, done := gatedChild(t, e, "201", "202")
	if got := e.sink.seqs(); len(got) != 0 {
		t.Fatalf("handed on %v while the parent is unfinished", got)
	}
	if err := old.Checkpoint(t.Context(), parent, old.Epoch(parent), checkpoint.ShardEnd); err != nil {
		t.Fatal(err)
	}
	<-done
	if w := <-e.metrics.waiting; w {
		t.Fatal("still reported waiting after the parent finished")
	}
	if got := e.sink.seqs(); !slices.Equal(got, []string{"201", "202"}) {
		t.Fatalf("handed on %v after the parent finished, want [201 202]", got)
	}
}

// A parent that left the stream (trimmed away) does not hold its child back.
func TestProcessorHandsOnWhenTheParentLeftTheStream(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	const parent = "shardId-000000000000"
	e.stream.shards[parent] = nil
	p := e.start(shard, "", parent)
	e.stream.remove(parent)
	deliver(p, "201")
	if got := e.sink.seqs(); !slices.Equal(got, []string{"201"}) {
		t.Fatalf("handed on %v, want [201]", got)
	}
}

// Shut down while waiting for a parent: nothing is handed on or checkpointed, then or later,
// and the shard is not marked finished.
func TestProcessorStoppedWhileGatedHandsOnNothing(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p, _, _, done := gatedChild(t, e, "201")
	e.cancel()
	<-done
	deliver(p, "202")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	if got := e.sink.seqs(); len(got) != 0 {
		t.Fatalf("handed on %v while gated", got)
	}
	e.wantCheckpoint(shard, "", "after a shutdown while gated")
}

// A processor that goes stale while it waits for its parent (a newer processor of the shard, or
// its lease fenced) stops waiting at once and hands on nothing, then or after the parent
// finishes: its KCL consumer must get back to its loop, see the refused renewal and end, instead
// of feeding a fenced processor once the parent is done.
func TestProcessorGoingStaleWhileGatedStopsWaiting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		stale func(e *procEnv)
	}{
		{"SupersededByANewerProcessor", func(e *procEnv) { e.initialize(shard, "") }},
		{"LeaseTakenWhileHeld", func(e *procEnv) { e.c.leaseLost(shard) }}, // Leases.OnLeaseLost
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			staleWhileGated(t, c.stale)
		})
	}
}

func staleWhileGated(t *testing.T, stale func(e *procEnv)) {
	e := newProcEnv(t)
	p, old, parent, done := gatedChild(t, e, "201")
	stale(e)
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang, not a speed bound: the wait polls every second
		t.Fatal("the stale processor still waits for its parent")
	}
	if err := old.Checkpoint(t.Context(), parent, old.Epoch(parent), checkpoint.ShardEnd); err != nil {
		t.Fatal(err)
	}
	deliver(p, "202")
	if got := e.sink.seqs(); len(got) != 0 {
		t.Fatalf("the stale processor handed on %v", got)
	}
}

// After another worker took the lease over, this processor's checkpoint (under the old epoch)
// is refused; it never tries again and never writes SHARD_END.
func TestProcessorIsFencedAfterATakeover(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	e.table.Expire(shard)
	other := e.table.Worker("other", 0)
	e.take(other, shard, "other")
	e.sink.autoAck = true
	deliver(p, "101")
	deliver(p, "102")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	r := e.row(shard)
	if r.Owner != "other" || r.Checkpoint != "" {
		t.Fatalf("row after the fenced processor: %+v", r)
	}
	if got, fenced, _, _ := e.metrics.counts(); fenced != 1 || len(got) != 0 {
		t.Fatalf("fenced %d times (want 1: a fenced processor stops checkpointing), checkpointed %v", fenced, got)
	}
}

// A newer processor of the same shard in this worker makes the older one stale: only the newer
// one checkpoints.
func TestProcessorSupersededByANewerOneStopsCheckpointing(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	older := e.start(shard, "")
	newer := e.initialize(shard, "")
	e.sink.autoAck = true
	deliver(older, "101")
	e.wantCheckpoint(shard, "", "after the superseded processor's delivery")
	deliver(newer, "101")
	e.wantCheckpoint(shard, "101", "after the newer processor's delivery")
}

// A graceful shutdown flushes the sink until every delivery is committed, then checkpoints; a
// requested shutdown does not mark the shard finished.
func TestProcessorDrainsAtShutdown(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	deliver(p, "101", "102")
	deliver(p, "103")
	e.wantCheckpoint(shard, "", "before the shutdown")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.REQUESTED})
	if e.sink.flushes == 0 {
		t.Fatal("the shutdown did not flush the sink")
	}
	e.wantCheckpoint(shard, "103", "after the drained shutdown")
}

// A graceful stop has one deadline: a processor's drain during it ends by the consumer's stop
// deadline (WithShutdownDeadline), not ShutdownTimeout after the KCL got round to it; a
// processor shut down while the consumer runs (a lost lease) keeps ShutdownTimeout.
func TestProcessorShutdownSharesTheStopDeadline(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.sink.flushErr = errors.New("commit refused") // the drain gives up after the first flush
	p := e.start(shard, "")
	deliver(p, "101")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.REQUESTED})
	stopBy := time.Now().Add(time.Second) // well before ShutdownTimeout (a minute)
	WithShutdownDeadline(func() time.Time { return stopBy })(e.c)
	if got := e.c.beginStop(); !got.Equal(stopBy) {
		t.Fatalf("beginStop = %v, want the injected deadline %v", got, stopBy)
	}
	p = e.initialize(shard, "")
	deliver(p, "102")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.REQUESTED})
	e.sink.mu.Lock()
	dls := slices.Clone(e.sink.deadlines)
	e.sink.mu.Unlock()
	if len(dls) != 2 {
		t.Fatalf("flushes with deadlines %v, want one per shutdown", dls)
	}
	if !dls[0].After(stopBy) {
		t.Errorf("shutdown while running: drain deadline %v, want ShutdownTimeout from then (after %v)", dls[0], stopBy)
	}
	if !dls[1].Equal(stopBy) {
		t.Errorf("shutdown during the graceful stop: drain deadline %v, want the stop deadline %v", dls[1], stopBy)
	}
}

// SHARD_END is written only after everything read from the shard is committed and
// checkpointed.
func TestProcessorWritesShardEndOnlyAfterDraining(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	deliver(p, seqs(101, 3)...)
	var atFlush []string
	e.sink.onFlush = func() { atFlush = append(atFlush, e.row(shard).Checkpoint) }
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	if len(atFlush) == 0 || slices.Contains(atFlush, checkpoint.ShardEnd) {
		t.Fatalf("checkpoints seen by the drain's flushes: %v, want some and no SHARD_END", atFlush)
	}
	e.wantCheckpoint(shard, checkpoint.ShardEnd, "after the terminating shutdown")
	if got, _, _, _ := e.metrics.counts(); !slices.Equal(got, []string{"103"}) {
		t.Fatalf("checkpoints written %v, want the last record [103] before SHARD_END", got)
	}
}

// When the drain fails the shard is not finished and nothing uncommitted is checkpointed.
func TestProcessorWritesNoShardEndWhenTheDrainFails(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	deliver(p, "101")
	deliver(p, "102")
	e.sink.ack(t, "101")
	deliver(p) // checkpoints 101
	e.sink.flushErr = errors.New("catalog down")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	e.wantCheckpoint(shard, "101", "after a failed drain")
}

// A delivery the sink refused part of is abandoned: the deliveries before it are drained and
// checkpointed, nothing at or after it is, the shard is not finished, and the failure is fatal.
func TestProcessorAbandonsADeliveryTheSinkRefused(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	e.sink.failAt = 4
	deliver(p, "101", "102")
	deliver(p, "103", "104", "105") // 104 is refused
	deliver(p, "106")               // never handed on: the processor halted
	if got := e.sink.seqs(); !slices.Equal(got, []string{"101", "102", "103"}) {
		t.Fatalf("handed on %v, want [101 102 103]", got)
	}
	if e.fatal() == nil {
		t.Fatal("a refused hand-over is not fatal")
	}
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	e.wantCheckpoint(shard, "102", "after the shutdown")
}

// An undecodable record goes to the dead letters with its position and reason, and the
// checkpoint moves past it once the rest of its delivery is committed.
func TestProcessorDeadLettersUndecodableRecords(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	p.ProcessRecords(&kcl.ProcessRecordsInput{Records: []ktypes.Record{
		{SequenceNumber: new("101"), Data: goodRecord},
		{SequenceNumber: new("102"), Data: badRecord},
		{SequenceNumber: new("103"), Data: goodRecord},
	}})
	if len(e.dlq.dead) != 1 || e.dlq.dead[0].Seq != "102" || e.dlq.dead[0].Shard != shard || e.dlq.dead[0].Reason == "" || string(e.dlq.dead[0].Raw) != string(badRecord) {
		t.Fatalf("dead letters %+v, want record 102 with a reason and its raw bytes", e.dlq.dead)
	}
	if _, _, dead, _ := e.metrics.counts(); dead != 1 {
		t.Fatalf("DeadLettered counted %d, want 1", dead)
	}
	e.sink.ack(t, "101")
	deliver(p)
	e.wantCheckpoint(shard, "", "before the whole delivery is committed")
	e.sink.ack(t, "103")
	deliver(p)
	e.wantCheckpoint(shard, "103", "after the delivery is committed")
}

// If a dead letter cannot be stored, the record is never checkpointed past: the processor halts
// before handing anything of the delivery on, and the failure is fatal.
func TestProcessorHaltsWhenADeadLetterFails(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start(shard, "")
	e.sink.autoAck = true
	e.dlq.err = errors.New("disk full")
	p.ProcessRecords(&kcl.ProcessRecordsInput{Records: []ktypes.Record{
		{SequenceNumber: new("101"), Data: goodRecord},
		{SequenceNumber: new("102"), Data: badRecord},
	}})
	deliver(p, "103")
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	if got := e.sink.seqs(); len(got) != 0 {
		t.Fatalf("handed on %v after a failed dead letter", got)
	}
	if e.fatal() == nil {
		t.Fatal("a failed dead letter is not fatal")
	}
	e.wantCheckpoint(shard, "", "after a failed dead letter")
}

// The reads of a shard are spaced so that the KCL never makes a sixth call within its
// one-second window (which makes it sleep out the window): a delivery waits out readSpacing
// from the start of its read, an empty read at the tip counts the KCL's own idle sleep, and a
// slow delivery waits for nothing.
func TestReadsAreSpaced(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		after time.Duration // from the read's start to the end of ProcessRecords
		idle  time.Duration
		idles bool
		want  time.Duration
	}{
		{"records, handed on at once", 5 * time.Millisecond, 250 * time.Millisecond, false, readSpacing - 5*time.Millisecond},
		{"empty at the tip, the KCL idles longer than the spacing", 5 * time.Millisecond, 250 * time.Millisecond, true, readSpacing - 255*time.Millisecond},
		{"empty at the tip, a short idle", 5 * time.Millisecond, 50 * time.Millisecond, true, readSpacing - 55*time.Millisecond},
		{"a delivery slower than the spacing", time.Second, 250 * time.Millisecond, false, readSpacing - time.Second},
	} {
		if got := paceWait(start, start.Add(tc.after), tc.idle, tc.idles); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
	// Five calls spaced so fit in a window of one second, a sixth does not (the KCL starts a
	// new window only once more than a second has passed).
	if 5*readSpacing <= time.Second {
		t.Fatalf("readSpacing %s lets a sixth call into the KCL's window", readSpacing)
	}

	// The processor waits it out after a delivery with records (the clock stands still: the
	// whole spacing), and not after an empty read at the tip, after which the KCL idles longer.
	e := newProcEnv(t)
	begin := sec(100)
	e.c.clock = func() time.Time { return begin }
	e.c.cfg.IdleBetweenReads = 250 * time.Millisecond
	p := e.start(shard, "")
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 0, CacheEntryTime: &begin,
		Records: []ktypes.Record{{SequenceNumber: aws.String("101"), Data: goodRecord}}})
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 0, CacheEntryTime: &begin})
	if got := e.slept(); !slices.Equal(got, []time.Duration{readSpacing}) {
		t.Fatalf("waits %v, want one of %s (after the delivery with records only)", got, readSpacing)
	}
}
