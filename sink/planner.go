package sink

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// planner owns what a table writer holds and has not committed, and what of it may commit:
// the buffer (rows, held events, acknowledgements, the key index and the dedupe plan of
// buffer.go), the order of order.go, and the commit bound of this writer (the limit, its bound
// and gates). It also turns an event into a row (convert.go) and reports the buffer's size
// (gauges.go). It commits nothing: the committer takes its batches.
type planner struct {
	*tableScope
	st  *targetTable // read only: the layout rows are converted to
	buf buffer
	// lim is the limit of the flush in progress (nil outside a flush); stuck is the bound at
	// which the last flush committed nothing while rows stayed (no size-triggered flush until
	// the bound moves), stuckSet whether it is set.
	lim      *limit
	stuck    limitKey
	stuckSet bool
	// gatedLogged is when logGated last logged; gateWait measures the time gates hold rows back.
	gatedLogged time.Time
	gateWait    gateClock
	// risk: the first shard this table's records came from, and which risks were reported
	// (ordering shard only).
	riskShard string
	risked    [2]bool
	// gauge is the buffer's size for Buffers (gauges.go).
	gauge bufferGauge
	seen  []bool      // convert's scratch: the columns an update image carried (absent_columns keep)
	cols  []int32     // resolve's scratch: the layout index of each column of the event taken in (columnIndexes)
	slab  []dms.Datum // what is left of the chunk convert carves rows' values from (datums)
}

func newPlanner(sc *tableScope, st *targetTable) *planner {
	pl := &planner{tableScope: sc, st: st, buf: newBuffer()}
	pl.buf.reloadOrder = sc.set.reloadReplace
	return pl
}

// boundMoved reports whether a flush may commit more than the last one: no flush was held back
// by the bound, or the bound or a gate moved since (stick).
func (pl *planner) boundMoved() bool {
	return !pl.stuckSet || pl.limitNow().gates() != pl.stuck
}

// stick notes that a flush at lim left pending rows uncommitted (pending false: it did not):
// the next size-triggered flush waits until the bound moves.
func (pl *planner) stick(lim limit, pending bool) {
	pl.stuck, pl.stuckSet = lim.gates(), pending
}

// leftOver notes that a flush at lim left rows buffered: what stays waits another flush
// interval, and, guarded, until the bound or a gate moves (run).
func (pl *planner) leftOver(lim limit) {
	pl.buf.first = pl.buf.now()
	if pl.guarded() {
		pl.stick(lim, true)
	}
}

// unstick notes that a commit took rows: nothing waits for the bound to move.
func (pl *planner) unstick() { pl.stuckSet = false }

// waiting reports whether the last flush left rows that the bound or a gate holds back.
func (pl *planner) waiting() bool { return pl.stuckSet }

// full reports whether the buffer reached a flush threshold, unless the last flush could commit
// nothing at the bound that still holds (the flush interval retries then).
func (pl *planner) full() bool {
	if pl.buf.rows.len()+len(pl.buf.held) < pl.set.flushRows && pl.buf.bytes < pl.set.flushBytes {
		return false
	}
	return pl.boundMoved()
}

// limitNow is the limit of a commit made now: the commit bound when guarded, else unbounded.
// A zero bound (nothing may commit yet) lets nothing commit.
func (pl *planner) limitNow() limit {
	lim := limit{bound: unbounded, ordered: pl.set.arrival}
	if pl.guarded() {
		b := pl.env.bound()
		t := b.At
		lim.bound, lim.through = -1, t
		if !t.IsZero() {
			lim.bound, lim.through = t.UnixMilli(), t.UTC()
			if len(b.Gates) > 0 {
				g := b.Gates.For(pl.src)
				lim.loadGate, lim.ctlGate = msOrZero(g.Kinds[checkpoint.KindLoad].At), msOrZero(g.Kinds[checkpoint.KindControl].At)
				lim.strayLoadGate = msOrZero(g.Kinds[checkpoint.KindLoadNotByKey].At)
				ch := g.Kinds[checkpoint.KindChange]
				ch.Min(g.Kinds[checkpoint.KindKeyChange]) // the change gate takes key changes too
				lim.moves = g.Moves
				lim.chGate, lim.chPos = msOrZero(ch.At), ch.Pos
			}
		}
	}
	return lim
}

// msOrZero is t in unix ms, 0 for the zero time.
func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// noteGated reports to the metrics the time since the previous flush during which a gate held
// rows back, after a flush at lim (whose waitFrom says whether a gate holds rows back).
func (pl *planner) noteGated(lim limit) {
	if d := pl.gateWait.note(lim.waitFrom != 0, time.Now()); d > 0 {
		pl.env.metrics.GateWait(pl.name, d)
	}
}

// logGated logs, at most once per 30 s per table, what the cross-process gates still hold back
// after a flush: the first such row or held record and the gates.
func (pl *planner) logGated(lim limit) {
	if !pl.guarded() || time.Since(pl.gatedLogged) < 30*time.Second {
		return
	}
	from := pl.buf.gatedFrom(lim)
	if from == 0 {
		return
	}
	pl.gatedLogged = time.Now()
	n := 0
	var first string
	for i := range pl.buf.rows.len() {
		r := pl.buf.rows.at(i)
		if r.at <= lim.bound && !lim.admitsRow(r) {
			if n == 0 {
				first = fmt.Sprintf("row %s/%s at %d kind %d pos %+v", r.shard, r.seq, r.at, r.kind, r.src.SourcePos)
			}
			n++
		}
	}
	for i := range pl.buf.held {
		h := &pl.buf.held[i]
		pos := change.SourcePosOf(h.ev)
		if !h.ctl && h.at <= lim.bound && !lim.admits(h.at, h.kind) {
			if n == 0 {
				first = fmt.Sprintf("held %s/%s at %d kind %d pos %+v", h.ev.Pos.Shard, h.ev.Pos.Seq, h.at, h.kind, pos)
			}
			n++
		}
	}
	pl.log.Info("ordering guard: changes wait for older changes another worker has not committed",
		zap.Int("waiting", n), zap.String("first", first), zap.Int64("bound", lim.bound),
		zap.Int64("load_gate", lim.loadGate), zap.Int64("control_gate", lim.ctlGate),
		zap.Int64("change_gate", lim.chGate), zap.String("change_gate_pos", lim.chPos.Encode()),
		zap.Int("moved_keys", len(lim.moves.Keys)), zap.Int64("unknown_move", msOrZero(lim.moves.Unknown.At)),
		zap.Int("rows", pl.buf.rows.len()), zap.Int("held", len(pl.buf.held)))
}

// resolve resolves ev's columns in the table's layout into the planner's scratch (the
// event admit converts next) and returns the columns the table does not have.
func (pl *planner) resolve(ev *change.Event) []change.Column {
	pl.cols = pl.st.lay.columnIndexes(ev.Columns, pl.cols[:0])
	return pl.unknownColumns(ev, pl.cols)
}

// admit converts ev, resolved by resolve, into a row of the buffer that arrived at at. A
// non-empty reason means the record cannot be applied (it is dead-lettered, not buffered).
func (pl *planner) admit(ev *change.Event, at int64) (reason string) {
	r, reason := pl.convert(ev, pl.cols)
	if reason != "" {
		return reason
	}
	r.replay, r.at, r.src, r.ack, r.kind, r.ts = ev.Replay, at, sourcePos(ev), ev.Ack, gateKindOf(ev), sourceTime(ev)
	r.ins = ev.Op == change.OpInsert
	pl.noteMove(ev, &r)
	if pl.buf.reloadOrder {
		r.built = ev.Meta.Timestamp // only a reload's supersession reads it (batch.superseded)
	}
	if !pl.set.arrival && !ev.Replay {
		pl.noteRisk(&r)
	}
	pl.buf.add(r, len(ev.Raw))
	return ""
}
