package sink

import (
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The move gate (design.md §4): a change that writes a key after an older key change on another
// process that moves that key away does not wait for it; its commit lists the key as re-created
// (batch.recreated), and the key change's commit, which reads the list (moved.go), does not
// delete the newer row. Only a pending move of an unknown key holds the table's later changes.
// The reverse case, an older change of the key committed after the key change, is moved.go's.
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
	return r.kh == 0 || !l.moves.Holds(r.at)
}

// recreates reports whether the surviving image r writes its key after a pending move of that
// key (another process's, or one of this writer's rows a plan leaves out): in a later
// millisecond, or in the move's own for a change that creates the key (an update there is the
// older one, as movedKeys.overtakes decides), so the batch lists the key as re-created.
func (l *limit) recreates(r *row) bool {
	if r.kh == 0 {
		return false
	}
	earlier, same := l.moves.Precedes(r.kh, r.at)
	return earlier || same && r.creates()
}

// withHeldMoves returns lim with the moves of the buffered rows it does not select added to its
// moves, and the rows it selects: within one writer, a key change left out of a plan (by the
// bound, a cut or a gate) is pending as another process's is, so a selected later write of the
// key it moves away is listed as re-created (recreates). Known moves hold nothing, so adding them
// selects the same rows.
func (b *buffer) withHeldMoves(lim limit) (limit, []int) {
	sel := b.selectRows(lim)
	if len(sel) == b.rows.len() {
		return lim, sel // every row selected: no move is held back
	}
	picked := make([]bool, b.rows.len())
	for _, i := range sel {
		picked[i] = true
	}
	own := false
	for i := range b.rows.len() {
		if r := b.rows.at(i); r.okh != 0 && !picked[i] {
			if !own { // the limit's moves may be the bound's: add to a copy, made once it is needed
				var m checkpoint.Moves
				m.Merge(lim.moves)
				lim.moves, own = m, true
			}
			lim.moves.Put(r.okh, checkpoint.Gate{At: time.UnixMilli(r.at), Pos: r.src.SourcePos})
		}
	}
	return lim, sel
}
