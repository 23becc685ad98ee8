package consumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Unit tests of the horizons (horizon.go) over the in-memory lease store: what a processor
// publishes, when its publish is refused, and read-ahead alignment. The clock is fake; the
// synthetic arrival times (t0 = 2020) lie before any real listing time.

type rec struct {
	seq     string
	arrival time.Time
}

// deliverAt hands p one delivery; behind is its MillisBehindLatest, readTime its read time.
func deliverAt(p *processor, behind int64, readTime time.Time, recs ...rec) {
	in := &kcl.ProcessRecordsInput{MillisBehindLatest: behind, CacheEntryTime: &readTime}
	for _, r := range recs {
		in.Records = append(in.Records, ktypes.Record{SequenceNumber: aws.String(r.seq), Data: goodRecord, ApproximateArrivalTimestamp: aws.Time(r.arrival)})
	}
	p.ProcessRecords(in)
}

func (e *procEnv) wantHorizon(shard string, read, pending time.Time, when string) checkpoint.LeaseRow {
	e.t.Helper()
	r := e.row(shard)
	if !r.ReadHorizon.Equal(read) || !r.PendingFrom.Equal(pending) {
		e.t.Fatalf("%s: row horizon %v pending %v, want %v and %v", when, r.ReadHorizon, r.PendingFrom, read, pending)
	}
	return r
}

// A processor's horizon and oldest pending arrival reach its row; acknowledgements remove the
// pending; a read at the tip advances the horizon to read time - margin; once the lease is taken
// the row's horizon is gone, the old processor's publish is refused and it stops, and W holds
// at the shard's last safe point.
func TestHorizonIsPublishedAndFencedAfterTakeover(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	now := sec(100)
	e.c.clock = func() time.Time { return now }
	e.c.cfg.ArrivalMargin = 2 * time.Second
	p := e.start(shard, "")
	loop := newHorizonLoop(e.c)

	loop.tick(e.ctx)
	if r := e.row(shard); !r.ReadHorizon.IsZero() || !e.c.Watermark().IsZero() || !e.c.CommitBound().IsZero() {
		t.Fatalf("before any record: row horizon %v, W %v, bound %v; want all unknown", r.ReadHorizon, e.c.Watermark(), e.c.CommitBound())
	}
	deliverAt(p, 5000, now, rec{"101", sec(10)}, rec{"102", sec(11)})
	loop.tick(e.ctx)
	r := e.wantHorizon(shard, sec(11).Add(-ms), sec(10), "two records handed on")
	if !r.HorizonAt.Equal(now) {
		t.Fatalf("HorizonAt %v, want %v", r.HorizonAt, now)
	}
	if w := e.c.Watermark(); !w.Equal(sec(11).Add(-ms)) || !e.c.CommitBound().Equal(w) {
		t.Fatalf("W %v bound %v, want both %v (own pending does not lower the bound)", w, e.c.CommitBound(), sec(11).Add(-ms))
	}
	e.sink.ack(t, "101", "102")
	loop.tick(e.ctx)
	e.wantHorizon(shard, sec(11).Add(-ms), time.Time{}, "everything committed")

	deliverAt(p, 0, sec(50)) // an empty read at the tip
	loop.tick(e.ctx)
	e.wantHorizon(shard, sec(48), time.Time{}, "at the tip")

	deliverAt(p, 5000, now, rec{"103", sec(51)})
	e.table.Expire(shard)
	other := e.table.Worker("w2", time.Hour)
	e.take(other, shard, "w2")
	e.wantHorizon(shard, time.Time{}, time.Time{}, "the lease was taken")
	loop.tick(e.ctx)
	e.wantHorizon(shard, time.Time{}, time.Time{}, "after the old owner's tick")
	if !p.stale.Load() {
		t.Fatal("the fenced processor is not stale")
	}
	if _, fenced, _, _ := e.metrics.counts(); fenced != 1 || e.metrics.publishFailed != 1 {
		t.Fatalf("fenced %d, publish failures %d; want 1 and 1", fenced, e.metrics.publishFailed)
	}
	// The taken shard holds W where this process last knew it safe (its horizon at the last
	// tick); record 103 (handed on since, never committed) is read again by w2.
	if w := e.c.Watermark(); !w.Equal(sec(48)) || !e.c.CommitBound().Equal(sec(48)) {
		t.Fatalf("W %v bound %v after the takeover, want both held at %v", w, e.c.CommitBound(), sec(48))
	}
	if err := other.PublishHorizon(e.ctx, shard, other.Epoch(shard), checkpoint.Horizon{Read: sec(45), PendingFrom: sec(49), At: now}); err != nil {
		t.Fatal(err)
	}
	loop.tick(e.ctx)
	if w, b := e.c.Watermark(), e.c.CommitBound(); !w.Equal(sec(45)) || !b.Equal(sec(45)) {
		t.Fatalf("W %v bound %v after the new owner published, want %v", w, b, sec(45))
	}
}

// At SHARD_END the final horizon is the last record's arrival (reading has stopped, so no record
// of that millisecond can follow), nothing is pending, and it is published before SHARD_END,
// after which nothing changes it.
func TestFinalHorizonAtShardEnd(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.c.clock = func() time.Time { return sec(100) }
	e.sink.autoAck = true
	p := e.start(shard, "")
	loop := newHorizonLoop(e.c)
	deliverAt(p, 5000, sec(100), rec{"101", sec(10)}, rec{"102", sec(12)})
	loop.tick(e.ctx)
	p.Shutdown(&kcl.ShutdownInput{ShutdownReason: kcl.TERMINATE})
	r := e.wantHorizon(shard, sec(12), time.Time{}, "at SHARD_END")
	if r.Checkpoint != checkpoint.ShardEnd {
		t.Fatalf("checkpoint %q, want SHARD_END", r.Checkpoint)
	}
	loop.tick(e.ctx)
	if got := e.row(shard); !got.HorizonAt.Equal(r.HorizonAt) || !got.ReadHorizon.Equal(r.ReadHorizon) {
		t.Fatalf("row changed after SHARD_END: %+v", got)
	}
}

// checkingSink checks, at every hand-over from a fast shard, that it is not further ahead of the
// slow shard than alignment allows.
type checkingSink struct {
	*fakeSink
	check func(ev *change.Event)
}

func (s checkingSink) Submit(ctx context.Context, ev *change.Event) error {
	s.check(ev)
	return s.fakeSink.Submit(ctx, ev)
}

// One slow shard and three fast ones, with a small read-ahead: the fast shards pause instead of
// running ahead of the slow one, the slow one always proceeds, and every record is handed on.
// The slow shard reads its next record only while no fast shard is running (each is paused or
// done), so without alignment the fast shards would finish first and the check would fail.
func TestReadAheadAlignmentOneSlowShardThreeFast(t *testing.T) {
	t.Parallel()
	const n = 60
	ahead, spacing := 2*time.Second, time.Second
	e := newProcEnv(t)
	e.c.clock = func() time.Time { return t0 }
	e.c.cfg.MaxReadAhead = ahead
	e.c.cfg.HorizonInterval = time.Millisecond
	e.sink.autoAck = true
	slow := e.start("shardId-slow", "")
	fast := []*processor{e.start("shardId-f1", ""), e.start("shardId-f2", ""), e.start("shardId-f3", "")}

	var violations atomic.Int32
	var firstViolation atomic.Value
	e.c.sink = checkingSink{fakeSink: e.sink, check: func(ev *change.Event) {
		if ev.Pos.Shard == slow.shard {
			return
		}
		limit := maxTime(sec(0), timeOf(slow.hz.lastArrival.Load())).Add(ahead + spacing)
		if ev.Arrival.After(limit) {
			if violations.Add(1) == 1 {
				firstViolation.Store(fmt.Sprintf("%s handed on a record of %v while the slow shard was at %v", ev.Pos.Shard, ev.Arrival, timeOf(slow.hz.lastArrival.Load())))
			}
		}
	}}
	loopCtx, stopLoop := context.WithCancel(e.ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); e.c.runHorizons(loopCtx) }()
	defer func() { stopLoop(); <-loopDone }()

	records := func(from int) []rec {
		out := make([]rec, 0, 10)
		for i := from; i < from+10 && i < n; i++ {
			out = append(out, rec{strconv.Itoa(1000 + i), sec(i)})
		}
		return out
	}
	var wg sync.WaitGroup
	done := make([]atomic.Bool, len(fast))
	for k, p := range fast {
		wg.Go(func() {
			defer done[k].Store(true)
			for i := 0; i < n; i += 10 {
				deliverAt(p, 5000, t0, records(i)...)
			}
		})
	}
	wg.Go(func() {
		for i := range n {
			for !allQuiet(fast, done) {
				select {
				case <-e.ctx.Done():
					return
				case <-e.c.wm.changedCh():
				}
			}
			deliverAt(slow, 5000, t0, rec{strconv.Itoa(1000 + i), sec(i)})
		}
	})
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute): // a deadlock, not a timing assertion
		e.cancel()
		<-finished
		t.Fatal("the shards did not all finish: alignment deadlocked")
	}
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d hand-overs ran ahead of alignment; first: %v", v, firstViolation.Load())
	}
	got := map[string]int{}
	for _, seq := range e.sink.seqs() {
		got[seq]++
	}
	for i := range n {
		if c := got[strconv.Itoa(1000+i)]; c != 4 {
			t.Fatalf("record %d handed on %d times, want 4 (once per shard)", 1000+i, c)
		}
	}
	e.metrics.mu.Lock()
	paused := e.metrics.paused
	e.metrics.mu.Unlock()
	if paused == 0 {
		t.Fatal("no fast shard ever paused")
	}
}

// allQuiet reports whether every fast processor is paused by alignment or done.
func allQuiet(fast []*processor, done []atomic.Bool) bool {
	for k, p := range fast {
		if !done[k].Load() && !p.hz.paused.Load() {
			return false
		}
	}
	return true
}

// The tick reads the other workers' rows: their horizons bound W (and so the commit bound; their
// pending changes do not); a shard at SHARD_END stops counting.
func TestTickBoundsByOtherWorkersRows(t *testing.T) {
	t.Parallel()
	e, a, other, pub := twoWorkers(t)
	loop := newHorizonLoop(e.c)
	deliverAt(a, 5000, sec(100), rec{"101", sec(3)}, rec{"102", sec(20)})
	pub(checkpoint.Horizon{Read: sec(30), PendingFrom: sec(5), At: sec(100)})
	loop.tick(e.ctx)
	// Another worker's pending change does not lower the bound (watermark.go says why).
	if w, b := e.c.Watermark(), e.c.CommitBound(); !w.Equal(sec(20).Add(-ms)) || !b.Equal(sec(20).Add(-ms)) {
		t.Fatalf("W %v bound %v, want both %v", w, b, sec(20).Add(-ms))
	}
	if e.metrics.holder != "shardId-a" {
		t.Fatalf("holder %q, want shardId-a", e.metrics.holder)
	}
	pub(checkpoint.Horizon{Read: sec(10), At: sec(101)})
	loop.tick(e.ctx)
	if w, b := e.c.Watermark(), e.c.CommitBound(); !w.Equal(sec(10)) || !b.Equal(sec(10)) {
		t.Fatalf("W %v bound %v, want both %v", w, b, sec(10))
	}
	e.stream.mu.Lock()
	e.stream.closed = map[string]bool{"shardId-b": true} // a shard reaches SHARD_END only once closed
	e.stream.mu.Unlock()
	if err := other.Checkpoint(e.ctx, "shardId-b", other.Epoch("shardId-b"), checkpoint.ShardEnd); err != nil {
		t.Fatal(err)
	}
	loop.tick(e.ctx)
	if w := e.c.Watermark(); !w.Equal(sec(20).Add(-ms)) {
		t.Fatalf("W %v after b's SHARD_END, want %v", w, sec(20).Add(-ms))
	}
}

// A processor that stops reading (a graceful stop) includes its last record's millisecond in its
// horizon before it drains: the commit bound can then pass every record it handed on, so the
// drain commits them instead of waiting for shutdown_timeout.
func TestStoppingProcessorsHorizonCoversItsLastRecord(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.c.clock = func() time.Time { return sec(100) }
	e.sink.autoAck = true
	p := e.start(shard, "")
	loop := newHorizonLoop(e.c)
	deliverAt(p, 5000, sec(100), rec{"101", sec(10)}, rec{"102", sec(12)})
	loop.tick(e.ctx)
	if w := e.c.Watermark(); !w.Before(sec(12)) {
		t.Fatalf("W %v while reading, want it short of the last record's %v", w, sec(12))
	}
	p.finalHorizon()
	loop.tick(e.ctx)
	if w := e.c.Watermark(); w.Before(sec(12)) {
		t.Fatalf("W %v after the processor stopped reading, want at least %v", w, sec(12))
	}
}

// Each kind's oldest pending arrival reaches the row, exactly per event (an acknowledged older
// event of the kind moves it to the next one of the same delivery), and arrivals are raised to
// the shard's latest so that they never go back within the shard.
func TestPendingKindsArePublishedPerEvent(t *testing.T) {
	t.Parallel()
	e, now, p, loop := clockedShard(t)
	rec := func(seq string, arrival time.Time, data string) ktypes.Record {
		return ktypes.Record{SequenceNumber: aws.String(seq), Data: []byte(data), ApproximateArrivalTimestamp: aws.Time(arrival)}
	}
	const meta = `"partition-key-type":"schema-table","schema-name":"public","table-name":"t"`
	load := `{"data":{"id":1},"metadata":{"record-type":"data","operation":"load",` + meta + `}}`
	keyChange := `{"data":{"id":2},"before-image":{"id":1},"metadata":{"record-type":"data","operation":"update",` + meta + `}}`
	update := `{"data":{"id":2},"before-image":{"id":2},"metadata":{"record-type":"data","operation":"update",` + meta + `}}`
	in := &kcl.ProcessRecordsInput{MillisBehindLatest: 5000, CacheEntryTime: now, Records: []ktypes.Record{
		rec("101", sec(10), load), rec("102", sec(12), load), rec("103", sec(11), keyChange), rec("104", sec(13), update)}}
	p.ProcessRecords(in)
	loop.tick(e.ctx)
	r := e.row(shard)
	g := r.Pending["public.t"]
	// 103 arrived before 102 on the same shard: it counts as arriving with 102 (raised).
	if !g.Kinds[checkpoint.KindLoad].At.Equal(sec(10)) || !g.Kinds[checkpoint.KindKeyChange].At.Equal(sec(12)) ||
		!g.Kinds[checkpoint.KindChange].At.Equal(sec(13)) || !g.Kinds[checkpoint.KindControl].At.IsZero() || len(r.Pending) != 1 {
		t.Fatalf("published %v; want load %v, key change %v, change %v, no control record", r.Pending, sec(10), sec(12), sec(13))
	}
	e.sink.ack(t, "101", "103")
	loop.tick(e.ctx)
	r = e.row(shard)
	g = r.Pending["public.t"]
	if !g.Kinds[checkpoint.KindLoad].At.Equal(sec(12)) || !g.Kinds[checkpoint.KindKeyChange].At.IsZero() || !r.PendingFrom.Equal(sec(10)) {
		t.Fatalf("after acknowledging 101 and 103: %v pending %v; want load %v, no key change, pending %v (the delivery is open)",
			r.Pending, r.PendingFrom, sec(12), sec(10))
	}
	e.sink.ack(t, "102", "104")
	loop.tick(e.ctx)
	r = e.row(shard)
	if r.Pending != nil || !r.PendingFrom.IsZero() {
		t.Fatalf("everything committed: %v pending %v; want none", r.Pending, r.PendingFrom)
	}
}

// A loop with a cached shard list (the service's, async) goes on with it when its ListShards
// call is slow, and uses the call's list once it answers; a list that predates a reshard the
// rows already show (a shard it lists open is at SHARD_END) is listed again before W is
// computed, so the ended shard's child, which the old list lacks, holds W at its parent's final
// horizon.
func TestCachedShardListIsRelistedAfterAReshard(t *testing.T) {
	t.Parallel()
	e, a, other, pub := twoWorkers(t)
	loop := newHorizonLoop(e.c)
	loop.async = true
	deliverAt(a, 5000, sec(100), rec{"101", sec(20)})
	pub(checkpoint.Horizon{Read: sec(10), At: sec(100)})
	loop.tick(e.ctx) // no list cached yet: listed now
	if w := e.c.Watermark(); !w.Equal(sec(10)) {
		t.Fatalf("W %v, want b's %v", w, sec(10))
	}

	// w2 finishes b (its final horizon, then SHARD_END) while ListShards still shows b open:
	// W stays where it was.
	pub(checkpoint.Horizon{Read: sec(15), At: sec(101)})
	if err := other.Checkpoint(e.ctx, "shardId-b", other.Epoch("shardId-b"), checkpoint.ShardEnd); err != nil {
		t.Fatal(err)
	}
	loop.tick(e.ctx)
	if w := e.c.Watermark(); !w.Equal(sec(10)) {
		t.Fatalf("W %v while ListShards lags b's SHARD_END, want the last W %v kept", w, sec(10))
	}

	// b is split into c; w2 had read b to its end. The cached list still shows b open and
	// lacks c, and the round's own ListShards call does not answer in time.
	release := make(chan struct{})
	e.stream.mu.Lock()
	e.stream.closed = map[string]bool{"shardId-b": true}
	e.stream.shards["shardId-c"] = []string{"shardId-b"}
	e.stream.hold = release
	e.stream.mu.Unlock()
	if !listingBehind(e.c.shards.cached(), map[string]checkpoint.LeaseRow{"shardId-b": e.row("shardId-b")}) {
		t.Fatal("the cached list shows b open while its row is at SHARD_END: want it behind")
	}
	loop.tick(e.ctx)
	if w := e.c.Watermark(); !w.Equal(sec(15)) {
		t.Fatalf("W %v after b's SHARD_END, want its final horizon %v (its child c, unread, holds W there)", w, sec(15))
	}
	if _, ok := e.c.shards.cached()["shardId-c"]; !ok {
		t.Fatal("the shard list was not listed again")
	}
	close(release) // the slow call answers; its older list never replaces the newer one
	if !loop.refreshing {
		t.Fatal("the slow call was not left running in the background")
	}
	loop.collect(<-loop.refreshed)
	if _, ok := e.c.shards.cached()["shardId-c"]; !ok {
		t.Fatal("the slow call's list replaced a newer one")
	}

	// A round whose call answers in time uses its list.
	e.stream.mu.Lock()
	e.stream.shards["shardId-d"] = nil
	e.stream.mu.Unlock()
	for i := 0; ; i++ { // a call answers within listingWait unless the machine is very busy
		loop.tick(e.ctx)
		if _, ok := e.c.shards.cached()["shardId-d"]; ok {
			break
		}
		if i == 50 {
			t.Fatal("no round used its ListShards call's list")
		}
	}
	loop.bg.Wait()
}

// twoWorkers is a consumer (worker "me") at clock sec(100) reading shardId-a, beside worker w2
// that holds shardId-b (listed, then handed over); pub publishes b's horizon as w2.
func twoWorkers(t *testing.T) (e *procEnv, a *processor, other *checkpoint.MemLeases, pub func(checkpoint.Horizon)) {
	t.Helper()
	e = newProcEnv(t)
	e.c.clock = func() time.Time { return sec(100) }
	a = e.start("shardId-a", "")
	other = e.table.Worker("w2", time.Hour)
	e.start("shardId-b", "") // listed, then handed to w2
	e.table.Expire("shardId-b")
	e.take(other, "shardId-b", "w2")
	pub = func(h checkpoint.Horizon) {
		t.Helper()
		if err := other.PublishHorizon(e.ctx, "shardId-b", other.Epoch("shardId-b"), h); err != nil {
			t.Fatal(err)
		}
	}
	return e, a, other, pub
}

// With the table's key columns known to the sink, an update with a full before-image (MySQL's
// ColumnFilter all) is published as a possible key change only when its key columns differ.
func TestFullBeforeImagesArePublishedByTheirKey(t *testing.T) {
	t.Parallel()
	e, now, p, loop := clockedShard(t)
	e.sink.mu.Lock()
	e.sink.keys = map[string][]string{"public.t": {"id"}}
	e.sink.mu.Unlock()
	rec := func(seq string, arrival time.Time, data string) ktypes.Record {
		return ktypes.Record{SequenceNumber: aws.String(seq), Data: []byte(data), ApproximateArrivalTimestamp: aws.Time(arrival)}
	}
	const meta = `"partition-key-type":"primary-key","schema-name":"public","table-name":"t"`
	same := `{"data":{"id":2,"name":"b"},"before-image":{"id":2,"name":"a"},"metadata":{"record-type":"data","operation":"update",` + meta + `}}`
	moved := `{"data":{"id":3,"name":"b"},"before-image":{"id":2,"name":"b"},"metadata":{"record-type":"data","operation":"update",` + meta + `}}`
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, CacheEntryTime: now, Records: []ktypes.Record{
		rec("101", sec(10), same), rec("102", sec(11), moved)}})
	loop.tick(e.ctx)
	g := e.row(shard).Pending["public.t"]
	if !g.Kinds[checkpoint.KindChange].At.Equal(sec(10)) || !g.Kinds[checkpoint.KindKeyChange].At.Equal(sec(11)) {
		t.Fatalf("published %+v; want the update at %v a change, the key change at %v", g.Kinds, sec(10), sec(11))
	}
	// The key change is published by its old key's hash at once, not as a move of an unknown key.
	old, _ := change.KeyHash([]change.Column{{Name: "id", Value: change.Value{Kind: change.KindNumber, Text: "2"}}}, []string{"id"})
	if !g.Moves.Keys[old].At.Equal(sec(11)) || len(g.Moves.Keys) != 1 || !g.Moves.Unknown.At.IsZero() {
		t.Fatalf("published moves %+v; want the old key 2 at %v", g.Moves, sec(11))
	}
	// A keyless table (known as such: an empty key) has no key changes: its updates are CDC
	// changes, and no copy of their images is kept for later.
	e.sink.mu.Lock()
	e.sink.keys["public.k"] = []string{}
	e.sink.mu.Unlock()
	const kmeta = `"partition-key-type":"schema-table","schema-name":"public","table-name":"k"`
	keyless := `{"data":{"a":1,"b":"y"},"before-image":{"a":1,"b":"x"},"metadata":{"record-type":"data","operation":"update",` + kmeta + `}}`
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, CacheEntryTime: now, Records: []ktypes.Record{rec("103", sec(12), keyless)}})
	if len(p.tracked) != 1 || p.tracked[0].Kind != checkpoint.KindChange || p.tracked[0].Images != nil {
		t.Fatalf("tracked %+v; want a CDC change without images", p.tracked)
	}
	loop.tick(e.ctx)
	if k := e.row(shard).Pending["public.k"]; !k.Kinds[checkpoint.KindChange].At.Equal(sec(12)) || !k.Moves.Unknown.At.IsZero() {
		t.Fatalf("keyless update published as %+v, moves %+v; want a CDC change at %v", k.Kinds, k.Moves, sec(12))
	}
	// A key change read before its table's key is known is a move of an unknown key until the
	// sink knows the key; the next publish then names its old key.
	const umeta = `"partition-key-type":"primary-key","schema-name":"public","table-name":"u"`
	unknown := `{"data":{"id":7,"name":"b"},"before-image":{"id":6,"name":"b"},"metadata":{"record-type":"data","operation":"update",` + umeta + `}}`
	p.ProcessRecords(&kcl.ProcessRecordsInput{MillisBehindLatest: 5000, CacheEntryTime: now, Records: []ktypes.Record{rec("104", sec(13), unknown)}})
	loop.tick(e.ctx)
	if u := e.row(shard).Pending["public.u"]; !u.Moves.Unknown.At.Equal(sec(13)) || len(u.Moves.Keys) != 0 {
		t.Fatalf("before the key is known: moves %+v; want an unknown move at %v", u.Moves, sec(13))
	}
	e.sink.mu.Lock()
	e.sink.keys["public.u"] = []string{"id"}
	e.sink.mu.Unlock()
	loop.tick(e.ctx)
	six, _ := change.KeyHash([]change.Column{{Name: "id", Value: change.Value{Kind: change.KindNumber, Text: "6"}}}, []string{"id"})
	if u := e.row(shard).Pending["public.u"]; !u.Moves.Keys[six].At.Equal(sec(13)) || !u.Moves.Unknown.At.IsZero() {
		t.Fatalf("once the key is known: moves %+v; want the old key 6 at %v", u.Moves, sec(13))
	}
}

// clockedShard is a consumer whose clock reads *now (sec(100) at first), a processor of shard
// and a synchronous horizon loop.
func clockedShard(t *testing.T) (*procEnv, *time.Time, *processor, *horizonLoop) {
	t.Helper()
	e := newProcEnv(t)
	now := new(time.Time)
	*now = sec(100)
	e.c.clock = func() time.Time { return *now }
	return e, now, e.start(shard, ""), newHorizonLoop(e.c)
}

// A round whose ListShards call outlasts the publish (listingWait) but answers soon after does
// not leave W capped at the round-old list: W waits for the call up to the loop's late bound
// after the round's start, so the own shard's tip rule reaches the read at the tip. With the
// call held past that bound, W keeps the older cap (the control). The bounds leave seconds of
// slack either side: the test checks the wait, not how fast a machine runs it.
func TestWWaitsBrieflyForALateShardList(t *testing.T) {
	t.Parallel()
	if l := listingLate(DefaultHorizonInterval); l <= listingWait || l > DefaultHorizonInterval {
		t.Fatalf("listingLate %v: want after the publish's wait (%v) and within the round", l, listingWait)
	}
	for _, c := range []struct {
		name           string
		late, answerIn time.Duration
		reaches        bool
	}{
		{"answers after the publish", 5 * time.Second, listingWait + 300*time.Millisecond, true},
		{"answers too late", listingWait + 100*time.Millisecond, 3 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newProcEnv(t)
			a := e.start("shardId-a", "")
			loop := newHorizonLoop(e.c)
			loop.async, loop.late = true, c.late
			t0 := time.Now()
			deliverAt(a, 0, t0, rec{"1", t0.Add(-time.Minute)})
			loop.tick(e.ctx) // no list cached yet: listed now
			if w := e.c.Watermark(); w.IsZero() {
				t.Fatal("no W after the first round")
			}
			time.Sleep(300 * time.Millisecond)
			tip := time.Now()
			deliverAt(a, 0, tip) // a read at the tip, well after the cached list
			release := make(chan struct{})
			e.stream.mu.Lock()
			e.stream.hold = release
			e.stream.mu.Unlock()
			timer := time.AfterFunc(c.answerIn, func() { close(release) })
			defer timer.Stop()
			loop.tick(e.ctx)
			want := timeOf(msOf(tip.Add(-DefaultArrivalMargin)))
			if w := e.c.Watermark(); !w.Before(want) != c.reaches {
				t.Fatalf("W %v, the tip rule at the read %v: reached %v, want %v", w, want, !w.Before(want), c.reaches)
			}
			<-release
			loop.bg.Wait()
		})
	}
}
