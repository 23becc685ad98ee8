package sink

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
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
// CDC change of its key); the rest are the metadata fields as written ("" when absent).
type srcPos struct {
	load                               bool
	commitTS, txID, txRecord, position string
}

func sourcePos(ev *change.Event) srcPos {
	return srcPos{load: ev.Op == change.OpLoad, commitTS: ev.Meta.CommitTimestamp, txID: ev.Meta.TransactionID,
		txRecord: ev.Meta.TransactionRecordID, position: ev.Meta.StreamPosition}
}

// compare orders two source positions by the fields both have: commit-timestamp (fixed-width
// UTC text); within one transaction its transaction-record-id; then stream-position (the
// source log position, which follows commit order) and last transaction-id (numbers within
// compared as numbers). Transaction ids follow transaction start, not commit, so they only
// break what nothing else does. 0 when they cannot be told apart.
func (p *srcPos) compare(q *srcPos) int {
	if p.commitTS != "" && q.commitTS != "" {
		if c := strings.Compare(p.commitTS, q.commitTS); c != 0 {
			return c
		}
	}
	if p.txID != "" && p.txID == q.txID && p.txRecord != "" && q.txRecord != "" {
		if c := natCompare(p.txRecord, q.txRecord); c != 0 {
			return c
		}
	}
	for _, f := range [...][2]string{{p.position, q.position}, {p.txID, q.txID}} {
		if f[0] != "" && f[1] != "" {
			if c := natCompare(f[0], f[1]); c != 0 {
				return c
			}
		}
	}
	return 0
}

// natCompare compares a and b with every run of hex digits compared as a number, everything
// else byte by byte. Source positions mix bases: PostgreSQL LSNs ("00000002/0352A2F7") and SQL
// Server LSNs are hex, MySQL positions ("mysql-bin.000024:9812:...") and transaction ids decimal.
// Read as hex, decimal runs keep their order (without leading zeros a longer run is larger, and
// runs of one length order as strings in either base), so one rule serves both; a run of decimal
// digits alone would split "0352A2F7" and order it before "03523E78".
func natCompare(a, b string) int {
	for a != "" && b != "" {
		if isHex(a[0]) && isHex(b[0]) {
			da, db := hexRun(a), hexRun(b)
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(strings.ToUpper(na), strings.ToUpper(nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexRun(s string) int {
	i := 0
	for i < len(s) && isHex(s[i]) {
		i++
	}
	return i
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
	return p.shard != q.shard && p.src.load == q.src.load && p.src.compare(&q.src) > 0
}

// limit is what one commit may take: rows with arrival <= bound that precede cut (nil: no cut)
// and pass the cross-process gates (admits), ordered (ordering arrival) or in buffer order
// (ordering shard: as the shard delivered them). through is what a commit within the bound and
// the gates is complete through, zero without a bound.
type limit struct {
	bound int64
	// loadGate and ctlGate are the cross-process gates in unix ms (0: none): a CDC change
	// that arrived at or after loadGate, or a data record at or after ctlGate, waits.
	loadGate, ctlGate int64
	cut               *held
	ordered           bool
	through           time.Time
}

// limitKey is what decides which rows a limit admits, to tell whether a limit moved.
type limitKey struct{ bound, loadGate, ctlGate int64 }

func (l limit) gates() limitKey { return limitKey{l.bound, l.loadGate, l.ctlGate} }

// admits reports whether a record that arrived at at passes the bound and the gates: control
// records pass the bound alone, full-load rows also the control gate, CDC changes both gates.
func (l limit) admits(at int64, ctl, load bool) bool {
	switch {
	case at > l.bound:
		return false
	case ctl:
		return true
	case l.ctlGate != 0 && at >= l.ctlGate:
		return false
	}
	return load || l.loadGate == 0 || at < l.loadGate
}

// completeThrough is what a commit within lim is complete through: through, or just before
// the cut; zero without a bound.
func (l limit) completeThrough() time.Time {
	if l.through.IsZero() {
		return time.Time{}
	}
	if l.cut != nil && l.cut.at > 0 && l.cut.at-1 < l.through.UnixMilli() {
		return time.UnixMilli(l.cut.at - 1).UTC()
	}
	return l.through
}

// selectRows returns the indexes of the rows within lim, in lim's order: per shard the longest
// prefix (in buffer order, which is sequence order) of rows with arrival <= bound that precede
// the cut.
func (b *buffer) selectRows(lim limit) []int {
	sel := make([]int, 0, len(b.rows))
	var stopped map[string]bool
	for i := range b.rows {
		r := &b.rows[i]
		if stopped[r.shard] {
			continue
		}
		if !lim.admits(r.at, false, r.src.load) || (lim.cut != nil && !lim.cut.after(r)) {
			if stopped == nil {
				stopped = make(map[string]bool)
			}
			stopped[r.shard] = true
			continue
		}
		sel = append(sel, i)
	}
	if lim.ordered {
		less := func(x, y int) int { return cmpRows(&b.rows[x], &b.rows[y]) }
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
}

// after reports whether row r precedes h, so that it may commit before h applies: it arrived
// earlier, or at the same time on h's shard before it. At the same time on another shard the
// held event goes first.
func (h *held) after(r *row) bool {
	if r.at != h.at {
		return r.at < h.at
	}
	return r.shard == h.ev.Pos.Shard && change.CompareSeq(r.seq, h.ev.Pos.Seq) < 0
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
func (b *buffer) hold(ev *change.Event, at int64) {
	h := held{ev: ev, at: at, ctl: ev.Op == change.OpControl}
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

// due returns the first held event when lim admits it, else nil.
func (b *buffer) due(lim limit) *held {
	if len(b.held) > 0 {
		h := &b.held[0]
		if lim.admits(h.at, h.ctl, h.ev.Op == change.OpLoad) {
			return h
		}
	}
	return nil
}

// pop removes and returns the first held event.
func (b *buffer) pop() held {
	h := b.held[0]
	b.held[0] = held{}
	b.held = b.held[1:]
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

// noteRisk reports, once per table and kind, what ordering shard cannot order (issue 11 item 6):
// the table's records come from more than one shard, or a primary-key-changing update on a
// multi-shard stream (its old and new key may travel on different shards).
func (w *writer) noteRisk(r *row) {
	multi := w.env.shards.note(r.shard)
	if w.riskShard == "" {
		w.riskShard = r.shard
	}
	if r.shard != w.riskShard && !w.risked[0] {
		w.risked[0] = true
		w.env.metrics.OrderingRisk(w.name, RiskMultiShard)
		w.log.Warn("ordering shard: this table's records come from more than one shard, whose order is not kept across shards (set sink.ordering arrival)",
			zap.String("shard", w.riskShard), zap.String("other_shard", r.shard))
	}
	if r.oldKey != nil && multi && !w.risked[1] {
		w.risked[1] = true
		w.env.metrics.OrderingRisk(w.name, RiskKeyChange)
		w.log.Warn("ordering shard: a primary-key-changing update on a multi-shard stream; with primary-key partitioning its old key's records may be on another shard (set sink.ordering arrival)",
			zap.String("shard", r.shard), zap.String("seq", r.seq))
	}
}

// within reports whether any row may commit within lim (the first row of a shard decides).
func (b *buffer) within(lim limit) bool {
	for i := range b.rows {
		r := &b.rows[i]
		if lim.admits(r.at, false, r.src.load) && (lim.cut == nil || lim.cut.after(r)) {
			return true
		}
	}
	return false
}
