package checkpoint

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Shard tracks the deliveries of one shard lease (one shard processor).
type Shard struct {
	id string

	mu        sync.Mutex
	pending   []*Delivery // registered, not yet fully acknowledged prefix and beyond, in order
	committed string      // highest sequence number below which every delivery is finished
	changed   chan struct{}
	// abandoned is set by Abandon: no delivery is registered any more, and committed never
	// moves past the abandoned one.
	abandoned bool
}

// NewShard returns a tracker for a shard. start is the sequence number the processor resumes
// after (its checkpoint), or "" for none.
func NewShard(id, start string) *Shard {
	return &Shard{id: id, committed: start, changed: make(chan struct{})}
}

// ID returns the shard id.
func (s *Shard) ID() string { return s.id }

// Delivery is one batch of records of a shard. It implements change.Acker: every event of the
// batch that was handed to a table writer must be acknowledged exactly once.
type Delivery struct {
	shard     *Shard
	last      string
	first     time.Time // arrival of the delivery's first record (zero: unknown)
	remaining atomic.Int64
	finished  bool // guarded by shard.mu
	// kinds counts the delivery's full-load rows and control records apart (Kinds, OldestKind).
	kinds [numKinds]kindAcker
}

var _ change.Acker = (*Delivery)(nil)

// Kind is a kind of record the ordering guard's cross-process gates track apart (design.md §4):
// KindLoad (full-load rows) and KindControl (control records). Every other record is only a
// record of the delivery.
type Kind int

const (
	KindLoad Kind = iota
	KindControl
	numKinds
)

// Kinds says how many of a delivery's events are of each Kind and when the first of them
// arrived (BeginKinds).
type Kinds [numKinds]struct {
	N     int
	First time.Time
}

// kindAcker acknowledges the events of one Kind of a delivery: it counts them down, then
// acknowledges them on the delivery.
type kindAcker struct {
	d         *Delivery
	first     time.Time
	remaining atomic.Int64
}

// Done acknowledges n events of the kind (and of the delivery).
func (k *kindAcker) Done(n int) {
	if k.remaining.Add(int64(-n)) < 0 {
		panic("checkpoint: delivery acknowledged more events of a kind than it holds")
	}
	k.d.Done(n)
}

// Of returns the acknowledger of the delivery's events of kind k, which must be used for
// exactly the number of them given to BeginKinds.
func (d *Delivery) Of(k Kind) change.Acker { return &d.kinds[k] }

// Begin registers a delivery whose highest sequence number is last and that fans out into n
// events. Deliveries must be registered in sequence order. A delivery with n == 0 is finished at
// once. After Abandon, a delivery is never registered: it can never be committed.
func (s *Shard) Begin(last string, n int) *Delivery {
	return s.BeginAt(last, time.Time{}, n)
}

// BeginAt is Begin for a delivery whose first record arrived (Kinesis
// ApproximateArrivalTimestamp) at first: Oldest reports it while the delivery is pending.
func (s *Shard) BeginAt(last string, first time.Time, n int) *Delivery {
	return s.BeginKinds(last, first, n, Kinds{})
}

// BeginKinds is BeginAt for a delivery of which kinds[k].N events are of Kind k (acknowledged
// through Of(k)), the first of them arriving at kinds[k].First: OldestKind reports it while one
// of them is pending.
func (s *Shard) BeginKinds(last string, first time.Time, n int, kinds Kinds) *Delivery {
	d := &Delivery{shard: s, last: last, first: first}
	d.remaining.Store(int64(n))
	for k := range d.kinds {
		d.kinds[k].d, d.kinds[k].first = d, kinds[k].First
		d.kinds[k].remaining.Store(int64(kinds[k].N))
	}
	s.mu.Lock()
	if !s.abandoned {
		s.pending = append(s.pending, d)
	}
	s.mu.Unlock()
	if n == 0 {
		s.finish(d)
	}
	return d
}

// Done acknowledges n events of the delivery.
func (d *Delivery) Done(n int) {
	left := d.remaining.Add(int64(-n))
	if left < 0 {
		panic("checkpoint: delivery acknowledged more events than it holds")
	}
	if left == 0 {
		d.shard.finish(d)
	}
}

func (s *Shard) finish(d *Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d.finished = true
	advanced := false
	i := 0
	for ; i < len(s.pending) && s.pending[i].finished; i++ {
		if change.CompareSeq(s.pending[i].last, s.committed) > 0 {
			s.committed = s.pending[i].last
			advanced = true
		}
	}
	if i > 0 {
		clear(s.pending[:i])
		s.pending = s.pending[i:]
	}
	if advanced || len(s.pending) == 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// Abandon gives up d, a delivery that will never be finished because not all of its events
// were handed on (the processor stopped in the middle of it). d and every delivery after it
// leave the pending list, and Committed never moves past the deliveries before d: their records
// are read again by the shard's next processor. Pending and WaitIdle then count only the
// deliveries before d, so a shutdown can drain those and checkpoint them instead of waiting for
// events that will never be acknowledged. Acknowledgements of d's events that were handed on
// still arrive and change nothing.
func (s *Shard) Abandon(d *Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandoned = true
	for i, p := range s.pending {
		if p == d {
			clear(s.pending[i:])
			s.pending = s.pending[:i]
			break
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Committed returns the highest sequence number below which every registered delivery is
// finished. It never moves backwards.
func (s *Shard) Committed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// Pending returns how many registered deliveries are not finished yet.
func (s *Shard) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Oldest returns the arrival of the first record of the oldest registered delivery that is not
// finished (the delivery after Committed), and whether there is one. The arrival is zero when
// that delivery was registered by Begin (unknown). Deliveries are registered in sequence order,
// so no pending record arrived much before it (arrival follows sequence approximately).
func (s *Shard) Oldest() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return time.Time{}, false
	}
	return s.pending[0].first, true
}

// OldestKind returns the earliest arrival of the pending deliveries that hold an unacknowledged
// event of kind k, and whether there is one. A delivery counts with the arrival of its first
// event of the kind until all of them are acknowledged, so the answer may be earlier than the
// oldest such event still pending, never later.
func (s *Shard) OldestKind(k Kind) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	found := false
	for _, d := range s.pending {
		kd := &d.kinds[k]
		if kd.remaining.Load() <= 0 {
			continue
		}
		if !found || kd.first.Before(first) {
			first, found = kd.first, true
		}
	}
	return first, found
}

// Changed returns a channel that is closed the next time Committed advances or the last pending
// delivery finishes.
func (s *Shard) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// WaitIdle blocks until every registered delivery is finished or ctx is done.
func (s *Shard) WaitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch := len(s.pending), s.changed
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
