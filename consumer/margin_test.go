package consumer

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Unit tests of the measured arrival margin (margin.go): the meter alone on a fake clock, then
// through a processor and the horizon loop of the harness.

func wantMargin(t *testing.T, m *marginMeter, now time.Time, want time.Duration, when string) {
	t.Helper()
	if r := m.read(now); r.margin != want {
		t.Fatalf("%s: margin %s (from %d observations, largest %s), want %s", when, r.margin, r.n, r.largest, want)
	}
}

// The margin stays at the cap until the window holds marginMinEvidence observations; then it
// is twice the largest delay plus the slack, within [floor, cap]; evidence older than the
// window is forgotten.
func TestArrivalMarginNeedsEvidence(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := newMarginMeter(250*time.Millisecond, 2*time.Second)
	wantMargin(t, m, now, 2*time.Second, "no evidence")
	for range marginMinEvidence - 1 {
		m.observe(now, 30*time.Millisecond)
	}
	wantMargin(t, m, now, 2*time.Second, "one observation short")
	m.observe(now, -time.Second) // no bound: counts as evidence of 0
	wantMargin(t, m, now, 250*time.Millisecond, "enough evidence, small delays: the floor")
	m.observe(now.Add(time.Minute), 400*time.Millisecond)
	wantMargin(t, m, now.Add(time.Minute), 900*time.Millisecond, "a 400ms delay: 2x + 100ms")
	m.observe(now.Add(2*time.Minute), 5*time.Second)
	wantMargin(t, m, now.Add(2*time.Minute), 2*time.Second, "a 5s delay: the cap")
	wantMargin(t, m, now.Add(12*time.Minute), 2*time.Second, "the window passed: no evidence")
	for range marginMinEvidence {
		m.observe(now.Add(13*time.Minute), 0)
	}
	wantMargin(t, m, now.Add(13*time.Minute), 250*time.Millisecond, "new evidence")

	fixed := newMarginMeter(2*time.Second, 2*time.Second) // floor = cap: the margin as before
	for range marginMinEvidence {
		fixed.observe(now, 0)
	}
	wantMargin(t, fixed, now, 2*time.Second, "floor = cap")
}

// A late record is handed on, counted, and puts the margin back at the cap for the window;
// records after the horizon are not late.
func TestLateRecordRaisesTheMarginToTheCap(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := newMarginMeter(250*time.Millisecond, 2*time.Second)
	for range marginMinEvidence {
		m.observe(now, 10*time.Millisecond)
	}
	wantMargin(t, m, now, 250*time.Millisecond, "evidence")
	metrics := &fakeMetrics{}
	horizon := now.Add(-time.Second).UnixMilli()
	on := []change.Event{{Arrival: now.Add(-time.Second + time.Millisecond)}}
	if n := m.checkLate(zap.NewNop(), metrics, "s", horizon, on, now); n != 0 || metrics.lateCount() != 0 {
		t.Fatalf("a record after the horizon counted late: %d, metric %d", n, metrics.lateCount())
	}
	wantMargin(t, m, now, 250*time.Millisecond, "no late record")
	late := []change.Event{{Arrival: now.Add(-2 * time.Second)}, {Arrival: now.Add(-time.Second)}, {Arrival: now}}
	if n := m.checkLate(zap.NewNop(), metrics, "s", horizon, late, now); n != 2 || metrics.lateCount() != 2 {
		t.Fatalf("late records: %d, metric %d; want 2 (at and before the horizon)", n, metrics.lateCount())
	}
	wantMargin(t, m, now, 2*time.Second, "after a late record")
	for range marginMinEvidence {
		m.observe(now.Add(5*time.Minute), 0)
	}
	wantMargin(t, m, now.Add(5*time.Minute), 2*time.Second, "late record still in the window")
	for range marginMinEvidence {
		m.observe(now.Add(11*time.Minute), 0)
	}
	wantMargin(t, m, now.Add(11*time.Minute), 250*time.Millisecond, "late record out of the window")
}

// A read gives evidence only when it and the shard's previous read were complete at the tip.
func TestTipProbe(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var p tipProbe
	steps := []struct {
		start  time.Duration
		atTip  bool
		oldest time.Duration // -1: no records
		want   time.Duration
		ok     bool
	}{
		{0, true, -1, 0, false}, // first read
		{200 * time.Millisecond, true, 150 * time.Millisecond, 0, true},                       // arrived after the previous read started
		{400 * time.Millisecond, true, 150 * time.Millisecond, 50 * time.Millisecond, true},   // 50ms before it: not readable then
		{600 * time.Millisecond, false, 100 * time.Millisecond, 0, false},                     // behind the tip
		{800 * time.Millisecond, true, 100 * time.Millisecond, 0, false},                      // the previous read was behind
		{time.Second, true, -1, 0, false},                                                     // no records
		{1200 * time.Millisecond, true, 900 * time.Millisecond, 100 * time.Millisecond, true}, // evidence again
	}
	for i, s := range steps {
		oldest := time.Time{}
		if s.oldest >= 0 {
			oldest = t0.Add(s.oldest)
		}
		got, ok := p.next(t0.Add(s.start), s.atTip, oldest)
		if got != s.want || ok != s.ok {
			t.Fatalf("read %d: %s %v, want %s %v", i, got, ok, s.want, s.ok)
		}
	}
}

// Rounds start at wall-clock multiples of the interval, and W is computed a fixed delay later.
func TestHorizonRoundsAreAligned(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 12, 0, 0, 300*int(time.Millisecond), time.UTC)
	if got, want := nextRound(at, time.Second), at.Truncate(time.Second).Add(time.Second); !got.Equal(want) {
		t.Fatalf("nextRound(%v) = %v, want %v", at, got, want)
	}
	if got := nextRound(at.Truncate(time.Second), time.Second); !got.Equal(at.Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("nextRound of a round's start = %v, want the next one", got)
	}
	if d := computeDelay(time.Second); d != 250*time.Millisecond {
		t.Fatalf("computeDelay(1s) = %s", d)
	}
	if d := computeDelay(400 * time.Millisecond); d != 100*time.Millisecond {
		t.Fatalf("computeDelay(400ms) = %s", d)
	}
}

// Through a processor: reads at the tip feed the meter, the horizon loop puts the horizon at
// read time minus the measured margin once there is evidence (the cap before), and a record
// that arrives at or before that horizon is handed on, counted late, and raises the margin.
func TestProcessorMeasuresTheArrivalMargin(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	e.sink.autoAck = true
	e.c.cfg.ArrivalMargin = 2 * time.Second
	e.c.margin = newMarginMeter(250*time.Millisecond, 2*time.Second)
	p := e.start("shard-0", "")
	loop := newHorizonLoop(e.c)
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	read := func(i int) time.Time { return t0.Add(time.Duration(i) * 200 * time.Millisecond) }
	seq := 100
	deliverRead := func(i int) { // a record that arrived 40ms before the previous read started
		seq++
		deliverAt(p, 0, read(i), rec{strconv.Itoa(seq), read(i - 1).Add(-40 * time.Millisecond)})
	}
	for i := 1; i <= 5; i++ {
		deliverRead(i)
	}
	deliverAt(p, 0, read(20)) // an empty read at the tip, well after the last record
	loop.tick(e.ctx)
	if got, want := timeOf(p.hz.horizon.Load()), read(20).Add(-2*time.Second); !got.Equal(want) {
		t.Fatalf("horizon without enough evidence: %v, want read time - cap %v", got, want)
	}
	for i := 21; i <= 21+marginMinEvidence; i++ {
		deliverRead(i)
	}
	deliverAt(p, 0, read(60))
	loop.tick(e.ctx)
	if got, want := timeOf(p.hz.horizon.Load()), read(60).Add(-250*time.Millisecond); !got.Equal(want) {
		t.Fatalf("horizon with evidence of 40ms delays: %v, want read time - floor %v", got, want)
	}
	if m := e.metrics.marginNow(); m != 250*time.Millisecond {
		t.Fatalf("ArrivalMargin reported %s, want 250ms", m)
	}
	if n := e.metrics.lateCount(); n != 0 {
		t.Fatalf("%d records counted late before any was", n)
	}
	drain(e.sink.submitted)
	deliverAt(p, 0, read(61), rec{"900", read(60).Add(-time.Second)}) // before the horizon: late
	if n := e.metrics.lateCount(); n != 1 {
		t.Fatalf("late records counted: %d, want 1", n)
	}
	if got := drain(e.sink.submitted); len(got) != 1 || got[0] != "900" {
		t.Fatalf("the late record was not handed on: %v", got)
	}
	loop.tick(e.ctx)
	if m := e.metrics.marginNow(); m != 2*time.Second {
		t.Fatalf("ArrivalMargin after a late record %s, want the cap", m)
	}
}

// drain returns what ch holds now.
func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// A worker that measures nothing (quiet shards) uses the margin another worker published on
// its lease row, and publishes its own once it has evidence; the larger of the two wins.
func TestQuietWorkerUsesTheOtherWorkersMargin(t *testing.T) {
	t.Parallel()
	e, a, _, pub := twoWorkers(t)
	e.c.margin = newMarginMeter(250*time.Millisecond, 2*time.Second)
	loop := newHorizonLoop(e.c)
	deliverAt(a, 0, sec(50)) // one empty read at the tip: no evidence
	pub(checkpoint.Horizon{Read: sec(30), At: sec(100)})
	loop.tick(e.ctx)
	loop.tick(e.ctx) // the margin of a round is from the previous round's scan
	if m := e.metrics.marginNow(); m != 2*time.Second {
		t.Fatalf("margin %s without evidence anywhere, want the cap", m)
	}
	if got, want := timeOf(a.hz.horizon.Load()), sec(48); !got.Equal(want) {
		t.Fatalf("horizon %v, want read time - cap %v", got, want)
	}
	pub(checkpoint.Horizon{Read: sec(30), At: sec(101), Margin: 400 * time.Millisecond})
	loop.tick(e.ctx)
	loop.tick(e.ctx)
	if m := e.metrics.marginNow(); m != 400*time.Millisecond {
		t.Fatalf("margin %s, want the other worker's 400ms", m)
	}
	if got, want := timeOf(a.hz.horizon.Load()), sec(50).Add(-400*time.Millisecond); !got.Equal(want) {
		t.Fatalf("horizon %v, want read time - 400ms %v", got, want)
	}
	if m := e.row("shardId-a").Margin; m != 0 {
		t.Fatalf("published margin %s without evidence of its own, want none", m)
	}
	for range marginMinEvidence {
		e.c.margin.observe(sec(100), 0)
	}
	loop.tick(e.ctx)
	if m := e.metrics.marginNow(); m != 400*time.Millisecond {
		t.Fatalf("margin %s with own evidence of 250ms and the other's 400ms, want the larger", m)
	}
	if m := e.row("shardId-a").Margin; m != 250*time.Millisecond {
		t.Fatalf("published margin %s, want the own measurement 250ms", m)
	}
}

// A shard list that answered after the round's publish (a ListShards call slower than the round
// waits for it) caps the own shards' tip rule when W is computed.
func TestComputeUsesAShardListNewerThanThePublish(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	p := e.start("shard-0", "")
	loop := newHorizonLoop(e.c)
	deliverAt(p, 0, time.Now().Add(time.Hour)) // a read at the tip after every listing: the list caps it
	r := loop.publishPhase(e.ctx)
	if got, want := p.hz.horizon.Load(), r.listedAt.Add(-DefaultArrivalMargin).UnixMilli(); got != want {
		t.Fatalf("published horizon %d, want the round's list time - margin %d", got, want)
	}
	time.Sleep(5 * time.Millisecond)
	if err := e.c.shards.refresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	_, newer := e.c.shards.cachedAt()
	loop.computePhase(e.ctx, r)
	if got, want := p.hz.horizon.Load(), newer.Add(-DefaultArrivalMargin).UnixMilli(); got != want || !newer.After(r.listedAt) {
		t.Fatalf("horizon at compute %d, want the newer list's time - margin %d (newer list %v, round's %v)", got, want, newer, r.listedAt)
	}
}
