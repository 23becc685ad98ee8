package consumer

import (
	"sync"
	"sync/atomic"
	"time"

	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The measured arrival margin (design.md §4). A caught-up shard's horizon is its read time
// minus the margin (ownHorizon), which must cover how long a record takes to become readable
// after its ApproximateArrivalTimestamp: Kinesis's propagation delay plus the skew between
// Kinesis's clock and this host's. AWS gives no bound ("typically under a second"), so the
// stream itself is asked: when a read at the tip returns a record that the shard's previous
// read, also at the tip, did not, that record was not readable when the previous read started,
// so its delay was at least that start minus its arrival (tipProbe). The largest of these lower
// bounds over marginWindow, doubled plus marginSlack and kept between
// consumer.arrival_margin_floor and consumer.arrival_margin (the cap), is this process's
// measured margin; without marginMinEvidence observations in the window it has none. A record
// handed on at or before its shard's horizon (late: the margin was too small) is counted,
// logged, and makes the measured margin the cap for the window.
//
// Each process publishes its measured margin on its lease rows (checkpoint.AttrArrivalMargin)
// and uses the largest of its own and the other workers' (marginMeter.use): a worker whose
// shards are quiet (one carrying only control records) measures nothing and would otherwise
// hold W at the cap; and a late record seen by one worker raises every worker's margin.

const (
	// DefaultArrivalMarginFloor is the least margin the measurement may give.
	DefaultArrivalMarginFloor = 250 * time.Millisecond
	// marginWindow is how long an observation (or a late record) counts, in marginBuckets
	// buckets of a minute each.
	marginWindow  = 10 * time.Minute
	marginBuckets = int(marginWindow / time.Minute)
	// marginMinEvidence is how many observations the window needs before the margin leaves
	// the cap.
	marginMinEvidence = 20
	// marginSlack is added to twice the largest delay observed.
	marginSlack = 100 * time.Millisecond
	// lateLogEvery bounds the late-record log lines.
	lateLogEvery = 10 * time.Second
)

// marginCount is one minute of evidence.
type marginCount struct {
	minute int64 // unix minute (0: empty)
	n      int
	max    time.Duration
	late   bool
}

// marginMeter keeps the evidence of one consumer's shards and gives the margin. Safe for
// concurrent use.
type marginMeter struct {
	floor, cap time.Duration
	mu         sync.Mutex
	buckets    [marginBuckets]marginCount
	lateLogged time.Time // guarded by mu
	lateQuiet  int       // late records not logged since lateLogged
	// shared is the measured margin to publish (a time.Duration; 0: no evidence).
	shared atomic.Int64
}

// marginReading is the meter's own measurement at one time.
type marginReading struct {
	// margin is the measured margin (the cap when late or without evidence); evidence is
	// false without marginMinEvidence observations in the window and no late record.
	margin   time.Duration
	evidence bool
	// n and largest are the observations in the window and the largest delay among them.
	n       int
	largest time.Duration
}

// newMarginMeter returns a meter whose margin stays within [floor, cap]; floor >= cap fixes it
// at cap.
func newMarginMeter(floor, cap time.Duration) *marginMeter {
	return &marginMeter{floor: min(floor, cap), cap: cap}
}

// at returns the bucket of now's minute, emptied if it held an older minute (mu held).
func (m *marginMeter) at(now time.Time) *marginCount {
	minute := now.Unix() / 60
	b := &m.buckets[minute%int64(marginBuckets)]
	if b.minute != minute {
		*b = marginCount{minute: minute}
	}
	return b
}

// observe adds a lower bound on one record's delay (negative: none, counted as 0).
func (m *marginMeter) observe(now time.Time, delay time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.at(now)
	b.n++
	b.max = max(b.max, delay)
}

// read returns the meter's own measurement at now.
func (m *marginMeter) read(now time.Time) marginReading {
	m.mu.Lock()
	defer m.mu.Unlock()
	minute := now.Unix() / 60
	late := false
	var r marginReading
	for _, b := range m.buckets {
		if b.minute == 0 || b.minute <= minute-int64(marginBuckets) || b.minute > minute {
			continue
		}
		r.n += b.n
		r.largest = max(r.largest, b.max)
		late = late || b.late
	}
	switch {
	case late:
		r.margin, r.evidence = m.cap, true
	case r.n < marginMinEvidence:
		r.margin = m.cap
	default:
		r.margin, r.evidence = m.clamp(2*r.largest+marginSlack), true
	}
	return r
}

func (m *marginMeter) clamp(d time.Duration) time.Duration { return min(max(d, m.floor), m.cap) }

// use returns the margin to use from this process's reading r and the largest margin other
// workers published (peers, 0: none), and notes what this process publishes.
func (m *marginMeter) use(r marginReading, peers time.Duration) time.Duration {
	shared := time.Duration(0)
	if r.evidence {
		shared = r.margin
	}
	m.shared.Store(int64(shared))
	switch {
	case r.evidence:
		return m.clamp(max(r.margin, peers))
	case peers > 0:
		return m.clamp(peers)
	default:
		return m.cap
	}
}

// published is the measured margin a publish puts on the lease rows (0: none; nil meter: none).
func (m *marginMeter) published() time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(m.shared.Load())
}

// checkLate is a delivery's check against its shard's horizon (unix ms, 0: unknown) before its
// events are handed on: events that arrived at or before it are late, which the margin should
// have prevented. They are handed on all the same (dropping them would lose changes); they are
// counted and logged, and the margin goes back to the cap for the window. It returns how many
// were late.
func (m *marginMeter) checkLate(log *zap.Logger, metrics Metrics, shard string, horizon int64, events []change.Event, now time.Time) int {
	if m == nil || horizon == 0 || len(events) == 0 || events[0].Arrival.UnixMilli() > horizon {
		return 0
	}
	n := 0
	for i := range events {
		if events[i].Arrival.UnixMilli() <= horizon {
			n++
		}
	}
	by := time.Duration(horizon-events[0].Arrival.UnixMilli()) * time.Millisecond
	metrics.LateRecords(shard, n, by)
	m.mu.Lock()
	m.at(now).late = true
	logNow := now.Sub(m.lateLogged) >= lateLogEvery
	quiet := m.lateQuiet
	if logNow {
		m.lateLogged, m.lateQuiet = now, 0
	} else {
		m.lateQuiet += n
	}
	m.mu.Unlock()
	if logNow {
		log.Warn("late records: arrived at or before the shard's read horizon (Kinesis delayed them longer than the arrival margin); handed on, and the margin is back at consumer.arrival_margin",
			zap.String("shard", shard), zap.Int("records", n), zap.Duration("by", by), zap.Time("horizon", timeOf(horizon)),
			zap.Int("late_not_logged_since", quiet))
	}
	return n
}

// tipProbe is one shard's memory of its previous read, the evidence of the margin.
type tipProbe struct {
	// prev is when the previous read started if it was complete at the tip (zero: it was not).
	prev time.Time
}

// next notes a read that started at start (complete at the tip or not), whose records' oldest
// arrival is oldest (zero: none). When this read and the previous one were both complete at the
// tip and this one returned records, the oldest of them was not readable when the previous read
// started: it returns the delay that implies at least (ok).
func (t *tipProbe) next(start time.Time, atTip bool, oldest time.Time) (delay time.Duration, ok bool) {
	prev := t.prev
	t.prev = time.Time{}
	if atTip {
		t.prev = start
	}
	if !atTip || prev.IsZero() || oldest.IsZero() {
		return 0, false
	}
	return max(prev.Sub(oldest), 0), true
}

// oldestArrival is the earliest ApproximateArrivalTimestamp of records (zero: none).
func oldestArrival(records []ktypes.Record) time.Time {
	var oldest time.Time
	for i := range records {
		if a := records[i].ApproximateArrivalTimestamp; a != nil && (oldest.IsZero() || a.Before(oldest)) {
			oldest = *a
		}
	}
	return oldest
}
