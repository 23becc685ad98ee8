package sink

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// The ordering guard's vocabulary (ordering arrival, design.md §4): arrivals, source positions,
// the limit of one commit, and the events held until their turn.
//
// Every buffered change has an arrival: its Kinesis arrival time in unix ms, raised to the
// latest arrival its shard had before (so arrivals never go back within a shard and "arrived at
// or before the bound" is always a prefix of the shard in sequence order). A zero Arrival counts
// as arrived before any bound. A commit takes, per shard, the rows with arrival <= its bound
// that precede its cut (the first held control record due), and decides the last change per
// key in (load before CDC, arrival, DMS source position, buffer order) order.

// unbounded is the bound of a writer without a commit bound provider, or with ordering shard:
// every row may commit.
const unbounded = math.MaxInt64

// srcPos is the DMS source position of a change: load marks a full-load row (older than any
// CDC change of its key); the rest is the source position (change.SourcePos).
type srcPos struct {
	load bool
	change.SourcePos
}

func sourcePos(ev *change.Event) srcPos {
	return srcPos{load: ev.Op == change.OpLoad, SourcePos: change.SourcePosOf(ev)}
}

// cmpRows is the order a commit's rows are planned in: lexicographic on (a load before any CDC
// change, arrival, shard, sequence number), so within a shard the shard's order. It must be a
// total order (the sort relies on transitivity); the source position, which is not one across
// rows that lack some of its fields, decides only between two changes of the same key from
// different shards in one commit (laterAcross, in plan).
func cmpRows(a, b *row) int {
	if a.src.load != b.src.load {
		if a.src.load {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.shard, b.shard); c != 0 {
		return c
	}
	if a.replay || b.replay {
		return 0
	}
	return change.CompareSeq(a.seq, b.seq)
}

// laterAcross reports whether p, planned before q, is nevertheless the later change of their
// key: they came from different shards and p's DMS source position is later. Where both records
// carry one, the source position is the source's commit order; arrival is not, for records of
// one PutRecords call on different shards (DMS batches its puts), so it decides only when the
// source position cannot (within a commit; across commits the bound orders by arrival).
func laterAcross(p, q *row) bool {
	return p.shard != q.shard && p.src.load == q.src.load && p.src.Compare(&q.src.SourcePos) > 0
}

// movedAfter reports whether the key change p, which moved key away (encoded: moved), is the
// later change of key than q, a change of it from another shard in the same millisecond that
// their source positions cannot order: q does not create the key (an insert, or a key change to
// it). An update or delete of a key cannot follow the key's move at the source without a
// re-creation in between, so it is the older one.
func movedAfter(p, q *row, moved, key []byte) bool {
	return p.oldKey != nil && p.shard != q.shard && p.at == q.at && !q.creates() &&
		p.src.Compare(&q.src.SourcePos) == 0 && string(moved) == string(key)
}

// creates reports whether r creates its key at the source: an insert, or a key change to it.
func (r *row) creates() bool { return r.ins || r.oldKey != nil }

// limit is what one commit may take: rows with arrival <= bound that precede cut (nil: no cut)
// and pass the cross-process gates (admits), ordered (ordering arrival) or in buffer order
// (ordering shard: as the shard delivered them). through is the commit bound as a time, zero
// without one.
type limit struct {
	bound int64
	// The cross-process gates of the writer's table in unix ms (0: none; design.md §4): the
	// arrival of the oldest load row, control record and CDC change (key changes included)
	// another process holds uncommitted.
	loadGate, ctlGate, chGate int64
	// strayLoadGate is the arrival of the oldest load row another process holds uncommitted that
	// is not routed by its key (checkpoint.KindLoadNotByKey; 0: none): the only load rows a CDC
	// change routed by its key waits for, since the others of its key share its shard.
	strayLoadGate int64
	// chPos is the source position of the record chGate names.
	chPos change.SourcePos
	// waitFrom is the earliest arrival of a buffered record within the bound that the gates hold
	// back (0: none): a held control record that arrived after it waits too, and a commit is
	// complete only up to just before it.
	waitFrom int64
	cut      *held
	ordered  bool
	through  time.Time
	// moved are the old keys of the key changes committed to the table (nil: none known): a
	// surviving image they overtake is not written (batch.overtaken).
	moved *movedKeys
	// moves are the key changes other processes hold uncommitted (the move gate, movegate.go).
	moves checkpoint.Moves
	// supersede is the metadata.timestamp of the create-table of the reload in progress (empty:
	// none): a CDC change built before it is superseded by the reload's load (batch.superseded).
	supersede string
}

// limitKey is what decides which rows a limit admits, to tell whether a limit moved.
type limitKey struct {
	bound, loadGate, ctlGate, chGate, strayLoadGate int64
	chPos                                           change.SourcePos
	moves                                           uint64
}

func (l limit) gates() limitKey {
	return limitKey{l.bound, l.loadGate, l.ctlGate, l.chGate, l.strayLoadGate, l.chPos, movesPrint(&l.moves)}
}

// movesPrint tells whether the moves changed between two limits: their keys and arrivals.
func movesPrint(m *checkpoint.Moves) uint64 {
	p := uint64(m.Unknown.At.UnixMilli()) + uint64(len(m.Unknown.Pos.TxID))
	for h, g := range m.Keys {
		p += h ^ uint64(g.At.UnixMilli())
	}
	return p
}

// gateKind is what the cross-process gates see of a record (the consumer's checkpoint.Kind; a
// key change is a CDC change to them: what it moves is the move gate's, movegate.go).
type gateKind uint8

const (
	kindChange gateKind = iota
	kindLoad
	kindControl
	// kindKeyRoutedChange is a CDC change routed by its key (change.RoutedByKey, DMS
	// ParallelApply): the load rows of its key routed the same way share its shard, so it waits
	// only for the other load rows (limit.strayLoadGate). The load row of the key a key change
	// moves away is moved.go's: it is not written back over the move.
	kindKeyRoutedChange
)

func gateKindOf(ev *change.Event) gateKind {
	switch {
	case ev.Op == change.OpLoad:
		return kindLoad
	case ev.Op == change.OpControl:
		return kindControl
	case change.RoutedByKey(ev):
		return kindKeyRoutedChange
	}
	return kindChange
}

// admits reports whether a record of kind k that arrived at at passes the bound and the gates:
// a control record the bound alone; a load row also the control gate (no older control record
// of its table pending elsewhere); a CDC change, key changes included, also the load gate (one
// routed by its key only strayLoadGate, the load rows that may sit on another shard). Waits
// go one way by kind (CDC change, load, control record), so they never form a cycle. A key
// change waits for no other worker's changes: the keys it moves away are written with its
// commit, and a later commit of an older change of such a key does not write it back
// (moved.go).
func (l *limit) admits(at int64, k gateKind) bool {
	switch {
	case at > l.bound:
		return false
	case k == kindControl:
		return true
	case l.ctlGate != 0 && at >= l.ctlGate:
		return false
	case k == kindLoad:
		return true
	case k == kindKeyRoutedChange:
		return l.strayLoadGate == 0 || at < l.strayLoadGate
	}
	return l.loadGate == 0 || at < l.loadGate
}

// completeThrough is what a commit within lim is complete through: the bound, or just before the
// cut or the first record the gates hold back; zero without a bound.
func (l limit) completeThrough() time.Time {
	if l.through.IsZero() {
		return time.Time{}
	}
	t := l.through.UnixMilli()
	if l.cut != nil && l.cut.at > 0 && l.cut.at-1 < t {
		t = l.cut.at - 1
	}
	if l.waitFrom > 0 && l.waitFrom-1 < t {
		t = l.waitFrom - 1
	}
	if t == l.through.UnixMilli() {
		return l.through
	}
	return time.UnixMilli(t).UTC()
}

// gatedFrom is limit.waitFrom for the buffer: the earliest arrival of a row or held data record
// within lim's bound that lim's gates hold back (0: none).
func (b *buffer) gatedFrom(lim limit) int64 {
	var from int64
	note := func(at int64, k gateKind) {
		if at <= lim.bound && !lim.admits(at, k) && (from == 0 || at < from) {
			from = at
		}
	}
	for i := range b.rows.len() {
		if r := b.rows.at(i); r.at <= lim.bound && !lim.admitsRow(r) && (from == 0 || r.at < from) {
			from = r.at
		}
	}
	for i := range b.held {
		if h := &b.held[i]; !h.ctl {
			note(h.at, h.kind)
		}
	}
	return from
}

// selectRows returns the indexes of the rows within lim, in lim's order: per shard the longest
// prefix (in buffer order, which is sequence order) of rows with arrival <= bound that precede
// the cut.
func (b *buffer) selectRows(lim limit) []int {
	sel := make([]int, 0, b.rows.len())
	var stopped map[string]bool
	for i := range b.rows.len() {
		r := b.rows.at(i)
		if stopped[r.shard] {
			continue
		}
		if !lim.admitsRow(r) || (lim.cut != nil && !lim.cut.after(r)) {
			if stopped == nil {
				stopped = make(map[string]bool)
			}
			stopped[r.shard] = true
			continue
		}
		sel = append(sel, i)
	}
	if lim.ordered {
		less := func(x, y int) int { return cmpRows(b.rows.at(x), b.rows.at(y)) }
		if !slices.IsSortedFunc(sel, less) {
			slices.SortStableFunc(sel, less)
		}
	}
	return sel
}

// held is an event waiting for its turn: a control record (ctl), or a data record kept raw
// (not converted) because its table does not exist yet or a control record is held before it.
type held struct {
	ev  *change.Event
	at  int64
	ctl bool
	// kind is what the gates see of it (gateKindOf).
	kind gateKind
	// reload: the table's create-table records may start a reload (sink.reload replace), which
	// makes them wait for other processes' older data (waitsForData), as a truncate does.
	reload bool
}

// truncate reports whether h is a truncate control record (dms.IsTruncate).
func (h *held) truncate() bool {
	return h.ctl && h.ev.Control != nil && dms.IsTruncate(h.ev.Control.Op)
}

// waitsForData reports whether the held control record h waits for the strictly older data of
// its table that another process holds (limit.olderData): a truncate, which removes the rows
// before it, and a create-table, which may start a reload whose replace removes them (reload.go).
func (h *held) waitsForData() bool {
	return h.truncate() || h.reload && h.createTable()
}

// olderData reports whether another process holds uncommitted data of the table (a load row or
// a CDC change, key changes included) that arrived before at. A truncate waits for it, as data
// waits for older control records, so that it removes exactly the rows before it; strictly
// older only (data of the same millisecond waits for the truncate), so the waits never cycle.
func (l *limit) olderData(at int64) bool {
	return l.loadGate != 0 && l.loadGate < at || l.chGate != 0 && l.chGate < at
}

// firstCtl returns the first held control record, or nil: while it waits, a commit takes only
// the rows before it (the rows that arrived after it wait with it).
func (b *buffer) firstCtl() *held {
	for i := range b.held {
		if b.held[i].ctl {
			h := b.held[i]
			return &h
		}
	}
	return nil
}

// after reports whether row r precedes h, so that it may commit before h applies: it arrived
// earlier, or at the same time on h's shard before it. At the same time on another shard the
// held event goes first. (A CDC change built before a reload's create-table that arrives with or
// after it, on another shard or another worker, is superseded by the reload: batch.superseded.)
func (h *held) after(r *row) bool {
	switch {
	case r.at < h.at:
		return true
	case r.shard == h.ev.Pos.Shard:
		return r.at == h.at && change.CompareSeq(r.seq, h.ev.Pos.Seq) < 0
	}
	return false
}

// createTable reports whether h is a create-table control record.
func (h *held) createTable() bool {
	return h.ctl && h.ev.Control != nil && h.ev.Control.Op == "create-table"
}

// heldBefore orders held events: by arrival, within a shard by sequence, at the same time
// control records first, else in the order they came.
func heldBefore(a, b *held) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.ev.Pos.Shard == b.ev.Pos.Shard {
		return change.CompareSeq(a.ev.Pos.Seq, b.ev.Pos.Seq) < 0
	}
	return a.ctl && !b.ctl
}

// arrival is ev's arrival in unix ms, raised to the latest arrival of its shard taken in.
func (b *buffer) arrival(ev *change.Event) int64 {
	var at int64
	if !ev.Arrival.IsZero() {
		at = ev.Arrival.UnixMilli()
	}
	if last := b.lastAt[ev.Pos.Shard]; last >= at {
		return last
	}
	b.lastAt[ev.Pos.Shard] = at
	return at
}

// hold keeps ev, which arrived at at, until its turn. Events come mostly in arrival order, so
// the sorted insert searches from the end.
func (b *buffer) hold(ev *change.Event, at int64, kind gateKind) {
	h := held{ev: ev, at: at, ctl: ev.Op == change.OpControl, reload: b.reloadOrder, kind: kind}
	i := len(b.held)
	for i > 0 && heldBefore(&h, &b.held[i-1]) {
		i--
	}
	b.held = slices.Insert(b.held, i, h)
	if !ev.Replay && change.CompareSeq(ev.Pos.Seq, b.high[ev.Pos.Shard]) > 0 {
		b.high[ev.Pos.Shard] = ev.Pos.Seq
	}
	b.bytes += int64(len(ev.Raw)) + 64
	b.started()
}

// due returns the index of the next held event to take under lim, or -1. Held events are taken
// in their order, except that a data record the gates hold back holds back only the later held
// events of its own shard and every later control record: a held event of another shard does
// not wait for it (that coupling would let two processes wait for each other's records of one
// millisecond). A control record also waits for the buffered rows that arrived before it and
// that the gates hold back (lim.waitFrom), and a truncate for the strictly older data another
// process holds (limit.olderData).
func (b *buffer) due(lim limit) int {
	var sc dueScan
	return b.dueFrom(lim, &sc)
}

// dueScan carries a flush's walk over the held events from one due event to the next: within
// a flush the limit is fixed, so what was held back stays held back, and the walk resumes where
// it stopped instead of re-judging every held-back event before it (quadratic in them).
type dueScan struct {
	next    int             // the index to judge next (the due event, once popped, is gone)
	blocked map[string]bool // shards whose held events wait behind a held-back one
}

// dueFrom is due for a walk that pops every event it returns before asking again.
func (b *buffer) dueFrom(lim limit, sc *dueScan) int {
	for i := sc.next; i < len(b.held); i++ {
		h := &b.held[i]
		if h.at > lim.bound {
			return -1 // held events are sorted by arrival: every later one is past the bound too
		}
		if h.ctl {
			if len(sc.blocked) > 0 || lim.waitFrom > 0 && lim.waitFrom < h.at || h.waitsForData() && lim.olderData(h.at) {
				return -1
			}
			sc.next = i
			return i
		}
		if sc.blocked[h.ev.Pos.Shard] {
			continue
		}
		if lim.admits(h.at, h.kind) {
			sc.next = i
			return i
		}
		if sc.blocked == nil {
			sc.blocked = make(map[string]bool, 2)
		}
		sc.blocked[h.ev.Pos.Shard] = true
	}
	return -1
}

// pop removes and returns the held event at index i.
func (b *buffer) pop(i int) held {
	h := b.held[i]
	if i == 0 {
		b.held[0] = held{}
		b.held = b.held[1:] // the usual case, O(1)
	} else {
		b.held = slices.Delete(b.held, i, i+1)
	}
	if len(b.held) == 0 {
		b.held = nil
	}
	b.bytes -= int64(len(h.ev.Raw)) + 64
	return h
}

// shardSeen notes whether the sink has seen records of more than one shard (a multi-shard
// stream); safe for concurrent use, lock-free once it knows.
type shardSeen struct {
	first atomic.Pointer[string]
	multi atomic.Bool
}

func (s *shardSeen) note(shard string) bool {
	if s.multi.Load() {
		return true
	}
	if f := s.first.Load(); f == nil {
		p := new(string) // only for the first record: taking &shard would move it to the heap on every call
		*p = shard
		s.first.CompareAndSwap(nil, p)
	} else if *f != shard {
		s.multi.Store(true)
	}
	return s.multi.Load()
}

// noteRisk reports, once per table and kind, what ordering shard cannot order:
// the table's records come from more than one shard, or a primary-key-changing update on a
// multi-shard stream (its old and new key may travel on different shards).
func (pl *planner) noteRisk(r *row) {
	multi := pl.env.shards.note(r.shard)
	if pl.riskShard == "" {
		pl.riskShard = r.shard
	}
	if r.shard != pl.riskShard && !pl.risked[0] {
		pl.risked[0] = true
		pl.env.metrics.OrderingRisk(pl.name, RiskMultiShard)
		pl.log.Warn("ordering shard: this table's records come from more than one shard, whose order is not kept across shards (set sink.ordering arrival)",
			zap.String("shard", pl.riskShard), zap.String("other_shard", r.shard))
	}
	if r.oldKey != nil && multi && !pl.risked[1] {
		pl.risked[1] = true
		pl.env.metrics.OrderingRisk(pl.name, RiskKeyChange)
		pl.log.Warn("ordering shard: a primary-key-changing update on a multi-shard stream; with primary-key partitioning its old key's records may be on another shard (set sink.ordering arrival)",
			zap.String("shard", r.shard), zap.String("seq", r.seq))
	}
}

// within reports whether any row may commit within lim (the first row of a shard decides).
func (b *buffer) within(lim limit) bool {
	for i := range b.rows.len() {
		r := b.rows.at(i)
		if lim.admitsRow(r) && (lim.cut == nil || lim.cut.after(r)) {
			return true
		}
	}
	return false
}

// gateClock measures how long a writer holds changes back for older changes another worker has
// not committed (the cross-process gates), from flush to flush: the time between two flushes
// counts when the first of them left changes a gate held back.
type gateClock struct {
	gated bool
	last  time.Time
}

// note records whether the flush at now left changes a gate holds back and returns the time to
// add since the previous flush.
func (c *gateClock) note(gated bool, now time.Time) time.Duration {
	var d time.Duration
	if c.gated {
		d = now.Sub(c.last)
	}
	c.gated, c.last = gated, now
	return d
}
