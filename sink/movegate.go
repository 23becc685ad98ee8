package sink

import (
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The move gate (design.md §4): a change that writes a key waits for an older key change on
// another process that moves that key away, so that the key change's delete of it, committed
// later, does not remove the newer row. The reverse case, an older change of the key committed
// after the key change, is moved.go's.
//
// Each process publishes its pending key changes by the hash of the old key (change.KeyHash,
// checkpoint.Moves): the consumer computes it with the key columns the sink knows, else the
// planner tells it as it converts the change (noteMove); until then the change counts as a
// move of an unknown key.

// noteMove tells ev's tracker (change.KeyChangeNoter, when it has one) what the converted row r
// moves: the old key of a key change, or nothing for an update that keeps its key; and gives
// r the hash of the key it writes when the move gate may hold it.
func (pl *planner) noteMove(ev *change.Event, r *row) {
	if !pl.guarded() || !pl.st.lay.keyed() {
		return
	}
	key := pl.st.lay.keyNames
	if r.oldKey != nil {
		r.okh, _ = change.KeyHash(ev.Before, key) // 0 when the before-image lacks a key column
	}
	if ev.Op == change.OpUpdate {
		if n, ok := ev.Ack.(change.KeyChangeNoter); ok {
			switch {
			case r.oldKey == nil:
				n.MovesNoKey()
			case r.okh != 0:
				n.MovesKey(r.okh)
			} // else it stays a move of an unknown key
		}
	}
	if r.del || r.src.load {
		return // a delete removes nothing a later move removes too; a load is older than any move
	}
	r.kh, _ = change.KeyHash(ev.Columns, key)
}

// admitsRow reports whether r passes lim: its bound and gates (admits), and the move gate.
func (l *limit) admitsRow(r *row) bool {
	if !l.admits(r.at, r.kind) {
		return false
	}
	return r.kh == 0 || !l.moves.Holds(r.kh, r.at)
}

// withHeldMoves returns lim with the moves of the buffered rows it does not select added to its
// moves, and the rows selected then, to a fixpoint: within one writer, a key change held back on
// its shard (by the move gate, the bound or a cut) holds back a later write of the key it moves
// away on another shard, as another process's pending key change does. Each round selects
// fewer rows, so it ends.
func (b *buffer) withHeldMoves(lim limit) (limit, []int) {
	sel := b.selectRows(lim)
	if len(sel) == b.rows.len() {
		return lim, sel // every row selected: no move is held back
	}
	own := false
	picked := make([]bool, b.rows.len())
	for {
		clear(picked)
		for _, i := range sel {
			picked[i] = true
		}
		added := false
		for i := range b.rows.len() {
			if r := b.rows.at(i); r.okh != 0 && !picked[i] {
				if !own { // the limit's moves may be the bound's: add to a copy
					var m checkpoint.Moves
					m.Merge(lim.moves)
					lim.moves, own = m, true
				}
				lim.moves.Add(r.okh, checkpoint.Gate{At: time.UnixMilli(r.at), Pos: r.src.SourcePos})
				added = true
			}
		}
		if !added {
			return lim, sel
		}
		next := b.selectRows(lim)
		if len(next) == len(sel) {
			return lim, next
		}
		sel = next
	}
}
