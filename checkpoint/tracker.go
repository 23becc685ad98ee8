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
	// keys returns a source table's key columns, nil while unknown (WithKeyColumns; nil: none).
	keys func(schema, table string) []string
}

// WithKeyColumns gives the tracker the source tables' key columns as the table writers know
// them, so that PendingTables classifies a possible key change tracked before they were known
// (Tracked.Images) without waiting for its writer. Call it before the first registration.
func (s *Shard) WithKeyColumns(keys func(schema, table string) []string) *Shard {
	s.keys = keys
	return s
}

// resolveMove classifies e, a possible key change not yet told, from its images once its table's
// key columns are known: no key change, or the hash of the old key it moves away.
func (s *Shard) resolveMove(e *eventAck) {
	if s.keys == nil || e.move.Load() != 0 {
		return
	}
	img := e.images.Load()
	if img == nil {
		return
	}
	key := s.keys(e.schema, e.table)
	if key == nil {
		return
	}
	switch h, _ := change.KeyHash(img.Before, key); {
	case !change.ChangesKey(img, key):
		e.move.CompareAndSwap(0, noMove)
	case h == noMove:
		e.move.CompareAndSwap(0, 1) // as MovesKey
	case h != 0:
		e.move.CompareAndSwap(0, h)
	}
	e.images.Store(nil)
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
	// evs are the per-event acknowledgers of a delivery registered by BeginTracked (nil
	// otherwise).
	evs []eventAck
}

var _ change.Acker = (*Delivery)(nil)

// Kind is a kind of record the ordering guard's cross-process gates track apart (design.md §4).
type Kind uint8

const (
	// KindChange is a CDC change that is not a key change (insert, update, delete).
	KindChange Kind = iota
	// KindKeyChange is an update that may change its row's primary key (change.MayChangeKey).
	KindKeyChange
	// KindLoad is a full-load row routed by its primary key (change.RoutedByKey); as a published
	// gate, every full-load row (KindLoadNotByKey too).
	KindLoad
	// KindControl is a control record.
	KindControl
	// KindLoadNotByKey is a full-load row whose Kinesis partition key is not its primary key
	// (change.RoutedByKey false): it may sit on another shard than the CDC changes of its key even
	// when they are routed by key. Published under KindLoad as well, so every load gate sees it.
	KindLoadNotByKey
	numKinds
)

// Tracked is one event of a delivery registered by BeginTracked: its source schema and table,
// kind, arrival and DMS source position (which breaks ties of arrival). The "schema.table" key
// of PendingTables is built only when it is read, never per record.
type Tracked struct {
	Schema, Table string
	Kind          Kind
	At            time.Time
	Pos           change.SourcePos
	// Move is, for a KindKeyChange, the hash of the old key it moves away (change.KeyHash) when
	// the consumer knows it; 0: the table writer tells it later (change.KeyChangeNoter).
	Move uint64
	// Images is, for a KindKeyChange whose table's key columns were not known (Move 0), its
	// before- and after-image (a copy): PendingTables classifies it from them as soon as the
	// key columns are known (Shard.WithKeyColumns), before the table writer gets to it.
	Images *change.Event
}

// eventAck acknowledges one event of a delivery registered by BeginTracked.
type eventAck struct {
	d             *Delivery
	schema, table string
	at            time.Time
	pos           change.SourcePos
	kind          Kind
	done          atomic.Bool
	// move is what the table writer told of a possible key change (KindKeyChange): 0 nothing
	// yet, noMove no key change, else the hash of the old key it moves away.
	move atomic.Uint64
	// images are Tracked.Images until the move is known or the event acknowledged.
	images atomic.Pointer[change.Event]
}

// noMove is eventAck.move for an update the table writer found to keep its key.
const noMove = ^uint64(0)

var _ change.KeyChangeNoter = (*eventAck)(nil)

// MovesKey records that the event is a key change moving away the key whose encoding hashes to
// h (change.KeyChangeNoter).
func (e *eventAck) MovesKey(h uint64) {
	if h == 0 || h == noMove {
		h = 1 // 0 and noMove have their own meaning; a collision only makes a change wait
	}
	e.move.Store(h)
}

// MovesNoKey records that the event changes no key (change.KeyChangeNoter).
func (e *eventAck) MovesNoKey() { e.move.Store(noMove) }

// Done acknowledges the event (n must be 1: one acknowledgement per event).
func (e *eventAck) Done(n int) {
	if n != 1 || e.done.Swap(true) {
		panic("checkpoint: an event acknowledged more than once")
	}
	e.images.Store(nil)
	e.d.Done(1)
}

// Event returns the acknowledger of the delivery's i-th event (BeginTracked), which must be
// told Done(1) exactly once.
func (d *Delivery) Event(i int) change.Acker { return &d.evs[i] }

// Begin registers a delivery whose highest sequence number is last and that fans out into n
// events. Deliveries must be registered in sequence order. A delivery with n == 0 is finished at
// once. After Abandon, a delivery is never registered: it can never be committed.
func (s *Shard) Begin(last string, n int) *Delivery {
	return s.BeginAt(last, time.Time{}, n)
}

// BeginAt is Begin for a delivery whose first record arrived (Kinesis
// ApproximateArrivalTimestamp) at first: Oldest reports it while the delivery is pending.
func (s *Shard) BeginAt(last string, first time.Time, n int) *Delivery {
	d := &Delivery{shard: s, last: last, first: first}
	d.remaining.Store(int64(n))
	return s.register(d, n)
}

// BeginTracked is BeginAt for a delivery of len(events) events whose tables, kinds, arrivals and
// source positions are given, acknowledged one by one through Event(i): PendingTables reports the
// oldest of its unacknowledged events per table and kind. first is the arrival of the
// delivery's first record.
func (s *Shard) BeginTracked(last string, first time.Time, events []Tracked) *Delivery {
	d := &Delivery{shard: s, last: last, first: first, evs: make([]eventAck, len(events))}
	d.remaining.Store(int64(len(events)))
	for i, e := range events {
		d.evs[i] = eventAck{d: d, schema: e.Schema, table: e.Table, at: e.At, pos: e.Pos, kind: e.Kind}
		if e.Move != 0 {
			d.evs[i].MovesKey(e.Move)
		} else if e.Images != nil {
			d.evs[i].images.Store(e.Images)
		}
	}
	return s.register(d, len(events))
}

// register appends d, which holds n events, to the pending deliveries.
func (s *Shard) register(d *Delivery, n int) *Delivery {
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

// PendingTables returns, per source table and kind, the oldest unacknowledged event (by arrival, then
// source position) of the pending deliveries registered by BeginTracked; nil when there is none.
func (s *Shard) PendingTables() PendingTables {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p PendingTables
	names := map[[2]string]string{} // "schema.table", built once per table
	for _, d := range s.pending {
		if len(d.evs) == 0 || d.remaining.Load() <= 0 {
			continue
		}
		for i := range d.evs {
			e := &d.evs[i]
			if e.done.Load() {
				continue
			}
			if p == nil {
				p = make(PendingTables)
			}
			name, ok := names[[2]string{e.schema, e.table}]
			if !ok {
				name = e.schema + "." + e.table
				names[[2]string{e.schema, e.table}] = name
			}
			g := p[name]
			kind := e.kind
			if kind == KindKeyChange {
				s.resolveMove(e)
				switch h := e.move.Load(); h {
				case 0:
					g.Moves.AddUnknown(Gate{At: e.at, Pos: e.pos})
				case noMove:
					kind = KindChange
				default:
					g.Moves.Add(h, Gate{At: e.at, Pos: e.pos})
				}
			}
			g.Kinds[kind].Min(Gate{At: e.at, Pos: e.pos})
			if kind == KindLoadNotByKey {
				g.Kinds[KindLoad].Min(Gate{At: e.at, Pos: e.pos})
			}
			p[name] = g
		}
	}
	return p
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
