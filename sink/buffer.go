package sink

import (
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// The buffer of a table writer: the rows converted since its last commit, the events held for
// their turn (ordering guard), the acknowledgements waiting for commits, and the plan that turns
// the rows a commit may take into one batch. It is pure (no catalog, no I/O): the writer gives
// it the table's layout, watermarks and the limit of the commit (order.go).

// row is one buffered change, converted to the table's column types.
type row struct {
	del    bool
	vals   []dms.Datum // one per column; deletes fill only the key columns
	oldKey []dms.Datum // the old key of a primary-key change, else nil
	// absent lists, in column order, the live columns a partial update image left out
	// (absent_columns keep); nil for complete images, and always nil in the default null mode.
	absent []int32
	shard  string
	seq    string
	// replay marks a row re-applied from the dead-letter table: never trimmed by, and never
	// advancing, the watermarks.
	replay bool
	// at is the row's arrival (unix ms) made monotonic within its shard (order.go); src its DMS
	// source position; ack is told when the row is committed; size counts it in buffer.bytes.
	at   int64
	src  srcPos
	ack  change.Acker
	size int32
	// kind is what the cross-process gates see of it (order.go); kh the hash of the key it
	// writes, for the move gate (movegate.go; 0: none).
	kind gateKind
	kh   uint64
	// okh is the hash of the old key of a key change (0: none), whose move it publishes.
	okh uint64
	// ins: the change is an insert.
	ins bool
	// ts is the change's source time as DMS wrote it (sourceTime): fixed-width UTC text, so
	// that the newest compares as strings.
	ts string
	// built is its metadata.timestamp (when DMS built the message): a CDC change built before
	// the create-table of a reload in progress is superseded by it (batch.superseded).
	built string
}

// buffer holds what a table writer has taken in and not yet committed.
type buffer struct {
	rows  rowList
	bytes int64
	first time.Time         // when the oldest buffered event arrived (restarted by a partial commit)
	high  map[string]string // shard -> highest sequence number buffered (rows and held events)
	// held are the events waiting for their turn in arrival order, sorted (order.go): control
	// records, and data records of a table that does not exist yet or behind a held control.
	held []held
	// dups are acknowledgements of re-deliveries of buffered records: each is told when nothing
	// at or before its sequence number is buffered on its shard any more.
	dups []dup
	// reloadOrder: create-table records may start a reload (sink.reload replace): they wait for
	// older data like a truncate (held.reload), and rows keep their build time (row.built).
	reloadOrder bool
	// lastAt is, per shard, the latest arrival taken in (makes arrivals monotonic per shard).
	lastAt map[string]int64
	keyBuf []byte // plan's scratch for encoded keys
	// now is the clock that dates the oldest event (time.Now; tests set another).
	now func() time.Time
}

// dup is the acknowledgement of a re-delivered record of shard at seq.
type dup struct {
	shard, seq string
	ack        change.Acker
}

func newBuffer() buffer {
	return buffer{high: make(map[string]string), lastAt: make(map[string]int64), now: time.Now}
}

// pending reports whether the buffer holds anything waiting for a commit: rows, held events, or
// acknowledgements of re-deliveries.
func (b *buffer) pending() bool { return b.rows.len() > 0 || len(b.held) > 0 || len(b.dups) > 0 }

// holds reports whether a change of shard at seq is buffered already (a replay of something not
// yet committed).
func (b *buffer) holds(shard, seq string) bool { return checkpoint.Covered(b.high[shard], seq) }

// add appends r, which came from a record of size bytes, with its acknowledgement.
func (b *buffer) add(r row, size int) {
	if !r.replay && change.CompareSeq(r.seq, b.high[r.shard]) > 0 {
		b.high[r.shard] = r.seq
	}
	r.size = int32(size) + 64
	b.rows.push(r)
	b.bytes += int64(r.size)
	b.started()
}

func (b *buffer) started() {
	if b.first.IsZero() {
		b.first = b.now()
	}
}

// attach makes the acknowledgement of a re-delivered record of shard at seq wait until nothing
// at or before seq is buffered on that shard.
func (b *buffer) attach(shard, seq string, a change.Acker) {
	if a == nil {
		return
	}
	b.started()
	b.dups = append(b.dups, dup{shard: shard, seq: seq, ack: a})
}

// release acknowledges and removes the rows the committed batch took (bt.take; every row when
// bt is nil), then the re-deliveries nothing buffered precedes any more.
func (b *buffer) release(bt *batch) {
	// Consecutive rows usually share one acker: count runs, one Done per run.
	var ak change.Acker
	n := 0
	done := func(a change.Acker) {
		switch a {
		case nil:
		case ak:
			n++
		default:
			if n > 0 {
				ak.Done(n)
			}
			ak, n = a, 1
		}
	}
	if bt == nil {
		for i := range b.rows.len() {
			r := b.rows.at(i)
			done(r.ack)
			clear(r.vals) // its chunk (datums) may outlive it: let go of its strings
		}
		b.rows.truncate(0)
	} else if len(bt.take) > 0 {
		// A per-flush allocation, not per record.
		taken := make([]bool, b.rows.len())
		for _, i := range bt.take {
			taken[i] = true
		}
		kept := 0
		for i := range b.rows.len() {
			r := b.rows.at(i)
			if taken[i] {
				done(r.ack)
				clear(r.vals)
				b.bytes -= int64(r.size)
				continue
			}
			if kept != i {
				*b.rows.at(kept) = *r
			}
			kept++
		}
		b.rows.truncate(kept)
	}
	if n > 0 {
		ak.Done(n)
	}
	b.rebuild()
}

// rebuild recomputes what the buffer holds per shard after a release, acknowledges the
// re-deliveries nothing buffered precedes any more, and restarts the flush clock of what stays.
func (b *buffer) rebuild() {
	clear(b.high)
	low := map[string]string{} // shard -> lowest sequence number still buffered
	note := func(shard, seq string) {
		if change.CompareSeq(seq, b.high[shard]) > 0 {
			b.high[shard] = seq
		}
		if l, ok := low[shard]; !ok || change.CompareSeq(seq, l) < 0 {
			low[shard] = seq
		}
	}
	b.bytes = 0
	for i := range b.rows.len() {
		r := b.rows.at(i)
		b.bytes += int64(r.size)
		if !r.replay {
			note(r.shard, r.seq)
		}
	}
	for i := range b.held {
		b.bytes += int64(len(b.held[i].ev.Raw)) + 64
		if !b.held[i].ev.Replay {
			note(b.held[i].ev.Pos.Shard, b.held[i].ev.Pos.Seq)
		}
	}
	kept := b.dups[:0]
	for _, d := range b.dups {
		if l, ok := low[d.shard]; ok && change.CompareSeq(l, d.seq) <= 0 {
			kept = append(kept, d)
			continue
		}
		d.ack.Done(1)
	}
	clear(b.dups[len(kept):])
	b.dups = kept
	b.first = time.Time{}
	if b.pending() {
		b.first = b.now()
	}
}

// sourceTime is the source time of ev as DMS wrote it: the commit-timestamp when the record has
// one, else metadata.timestamp. Both are ISO-8601 UTC with six fractional digits.
func sourceTime(ev *change.Event) string {
	if ev.Meta.CommitTimestamp != "" {
		return ev.Meta.CommitTimestamp
	}
	return ev.Meta.Timestamp
}

// newestSource is the newest source time of the rows bt takes, replays aside
// (CommitInfo.SourceNewest): one string comparison per row, one parse per commit; zero when
// none has a readable one.
func (b *buffer) newestSource(bt *batch) time.Time {
	var newest string
	for _, i := range bt.take {
		// Only what starts like a date takes part: a garbled value never hides the others. A
		// row re-applied from the dead letters (dms2iceberg dlq replay) is as old as its record.
		r := b.rows.at(i)
		if ts := r.ts; !r.replay && ts > newest && len(ts) >= 20 && ts[0] >= '0' && ts[0] <= '9' {
			newest = ts
		}
	}
	if newest == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, newest)
	if err != nil {
		return time.Time{}
	}
	return t
}

// ack acknowledges an event that waits for no commit: the table holds it already, it was
// dead-lettered, or it had nothing to apply.
func ack(ev *change.Event) {
	if ev.Ack != nil {
		ev.Ack.Done(1)
	}
}

// batch is the deduplicated content of one commit.
type batch struct {
	// take are the indexes into the buffer's rows of every row the commit takes (trimmed ones
	// too): a per-shard prefix of the rows within the commit's limit.
	take    []int
	upserts []int         // indexes into the buffer's rows of the surviving row images
	deletes [][]dms.Datum // keys to delete (every touched key, for upsert semantics)
	maxSeq  map[string]string
	trimmed int
	// loads and cdc count the rows the batch takes that the table does not hold yet, replays
	// aside: load rows, and CDC changes (inserts, updates, deletes). A reload in progress counts
	// the first and ends at the second (reload.go).
	loads, cdc int
	// superseded counts the CDC changes the batch takes without writing them: built before the
	// create-table of the reload in progress (limit.supersede, set by reloadTracker.plan once the
	// reload has load rows), they arrived after it started
	// (from another worker's shard, which the cross-process gates cannot order by build time),
	// and the reload's load rows, read from the source after they were captured, already
	// reflect them. Applied on the reload branch they would survive its replace and could bring
	// back a row deleted at the source, or win over their key's load row. Their sequence
	// numbers still advance the watermarks (maxSeq), so a replay skips them.
	superseded int
	// moves are the old keys of the key changes the batch writes (moved.go); overtaken counts
	// the surviving images it does not write because a newer key change, already committed,
	// moved their key away (limit.moved).
	moves     []move
	overtaken int
	// recreated are the keys the batch writes after a pending move of them (limit.recreates,
	// which does not hold them): that move's commit reads them and keeps the key (moved.go);
	// kept counts the keys of the batch's own moves it does not delete because a newer change
	// already re-created them.
	recreated []move
	kept      int
	// provisional counts the changes built before the create-table of a reload in progress that
	// the batch writes because the reload has no load row yet (reloadTracker.plan): they count
	// as neither loads nor CDC, and the replace removes the files of their commit.
	provisional int
	// Partial update images (absent_columns keep, partial.go): lookups are the surviving images
	// that need the table's row, fill the rows found (by row index) on snapshot fillSnap;
	// fromBuffer counts images completed within the batch, missing those of a key deleted
	// earlier in the batch.
	lookups             []lookup
	fill                map[int][]dms.Datum
	filled              bool
	fillSnap            int64
	fromBuffer, missing int
}

// empty reports whether the batch has nothing the table does not already hold.
func (b *batch) empty() bool { return len(b.upserts) == 0 && len(b.deletes) == 0 && b.superseded == 0 }

// supersedes reports whether the batch planned under lim takes r without writing it: a CDC
// change built before the create-table of the reload in progress (batch.superseded).
func (l *limit) supersedes(r *row) bool {
	return l.supersede != "" && !r.replay && !r.src.load && r.built != "" && builtBefore(r.built, l.supersede)
}

// builtBefore reports whether metadata.timestamp a is strictly before b. DMS writes it with
// six fractional digits and "Z" (dms-format.md), which compares as text; any other form is
// parsed (RFC 3339), and one that does not parse is not before anything (the change is
// written rather than dropped).
func builtBefore(a, b string) bool {
	const dmsLen = len("2006-01-02T15:04:05.000000Z")
	if len(a) == dmsLen && len(b) == dmsLen && a[dmsLen-1] == 'Z' && b[dmsLen-1] == 'Z' {
		return a < b
	}
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.Before(tb)
}

// noteSuperseded counts r, a superseded change, and advances the batch's watermarks over it.
func (b *batch) noteSuperseded(r *row) {
	b.superseded++
	if change.CompareSeq(r.seq, b.maxSeq[r.shard]) > 0 {
		b.maxSeq[r.shard] = r.seq
	}
}

// lookup is a surviving partial image that needs the stored row of key.
type lookup struct {
	row int         // index into the buffer's rows
	key []dms.Datum // the key whose stored row completes it (the old key of a key change)
}

// plan takes the rows within lim (a per-shard prefix, see limit.selects), drops those the table
// already holds (l.watermark) and collapses the rest to the last change per key (l.keyIdx),
// deciding "last" in lim's order. Keyless tables keep every row, except that rows with a DMS
// record identity (l.identified, identity.go) collapse to the last copy per identity, each with
// an equality delete of it: a re-send replaces the copy an earlier batch wrote.
func (b *buffer) plan(l *layout, lim limit) batch {
	out := batch{maxSeq: make(map[string]string)}
	lim, sel := b.withHeldMoves(lim)
	out.take = sel
	if l.keyed() {
		b.planKeyed(&out, l, &lim, sel)
	} else {
		b.planKeyless(&out, l, &lim, sel)
	}
	return out
}

// writes reports whether the batch writes r: not a change the table already holds (trimmed)
// nor a superseded one (counted, its watermark advanced); a written row advances the
// watermarks too (noteSeq).
func (b *batch) writes(l *layout, lim *limit, r *row) bool {
	if !r.replay && checkpoint.Covered(l.watermark[r.shard], r.seq) {
		b.trimmed++
		return false
	}
	if lim.supersedes(r) {
		b.noteSuperseded(r)
		return false
	}
	b.noteSeq(r)
	return true
}

// planKeyless plans the rows sel of a keyless table into out: every row, one copy per DMS
// record identity.
func (b *buffer) planKeyless(out *batch, l *layout, lim *limit, sel []int) {
	var byID map[string]int // identity -> index into out.upserts
	for _, i := range sel {
		r := b.rows.at(i)
		if !out.writes(l, lim, r) {
			continue
		}
		if l.identified() && !r.vals[l.idIdx].Null {
			id := r.vals[l.idIdx]
			if byID == nil {
				byID = make(map[string]int)
			}
			if u, ok := byID[id.S]; ok {
				out.upserts[u] = i // the same record again: one copy
				continue
			}
			byID[id.S] = len(out.upserts)
			out.deletes = append(out.deletes, []dms.Datum{id})
		}
		out.upserts = append(out.upserts, i)
	}
}

// keyState is what a keyed plan decided for one key so far.
type keyState struct {
	row int // index of the surviving image, -1 for a delete
	key []dms.Datum
	// src is the key whose stored row completes the surviving image when it is partial
	// (absent_columns keep); nil when nothing can: the key was deleted in this batch.
	src []dms.Datum
	// by is the row whose change set the state.
	by int
}

// planKeyed plans the rows sel of a keyed table into out: the last change per key, a partial
// image completed from the latest earlier image of its key in the batch where there is one.
func (b *buffer) planKeyed(out *batch, l *layout, lim *limit, sel []int) {
	last := newKeyIndex(l, len(sel), &b.keyBuf) // key -> index into states
	var states []keyState
	nk := len(l.keyIdx)
	keys := make([]dms.Datum, b.rows.len()*nk) // every row's key, one allocation per plan
	// set makes the change of row by (rowIdx: the surviving image, -1 for a delete) the key's
	// state, unless the key's current state came from a change that is later although it was
	// planned first (laterAcross).
	var mb, kb []byte
	set := func(key []dms.Datum, rowIdx int, src []dms.Datum, by int) {
		if si, ok := last.get(key); ok {
			p, q := b.rows.at(states[si].by), b.rows.at(by)
			if lim.ordered && laterAcross(p, q) {
				return
			}
			if lim.ordered && p.oldKey != nil && p.at == q.at {
				mb, kb = encodeKey(l, mb[:0], p.oldKey), encodeKey(l, kb[:0], key)
				if movedAfter(p, q, mb, kb) {
					return
				}
			}
			states[si].row, states[si].src, states[si].by = rowIdx, src, by
			return
		}
		last.put(key, len(states))
		states = append(states, keyState{row: rowIdx, key: key, src: src, by: by})
	}
	for _, i := range sel {
		r := b.rows.at(i)
		if !out.writes(l, lim, r) {
			continue
		}
		key := keys[i*nk : (i+1)*nk : (i+1)*nk]
		for ki, ci := range l.keyIdx {
			key[ki] = r.vals[ci]
		}
		var src []dms.Datum
		if len(r.absent) > 0 {
			// A partial image keeps the values of the row it updates: the latest earlier image
			// of that key (the old key of a key change) in this batch, else the table's row.
			from := key
			if r.oldKey != nil {
				from = r.oldKey
			}
			si, ok := last.get(from)
			switch {
			case !ok:
				src = from
			case states[si].row >= 0:
				mergeEarlier(r, b.rows.at(states[si].row))
				src = states[si].src
			}
		}
		if r.oldKey != nil {
			set(r.oldKey, -1, nil, i)
			out.moves = append(out.moves, move{key: string(encodeKey(l, nil, r.oldKey)), at: r.at, pos: r.src.SourcePos})
		}
		if r.del {
			set(key, -1, nil, i)
		} else {
			set(key, i, src, i)
		}
	}
	out.takeStates(&b.rows, states, l, lim)
}

// takeStates adds the keys' final states to the batch: a delete of every key, but not of a key
// a key change moved away that a newer change already re-created (moved.go); an upsert of every
// surviving image that no committed key change overtook, noting those written after a pending
// move of their key (movegate.go); and what completes a partial image.
func (b *batch) takeStates(rows *rowList, states []keyState, l *layout, lim *limit) {
	var kb []byte
	for _, st := range states {
		by := rows.at(st.by)
		if st.row < 0 && by.oldKey != nil && !lim.moved.empty() {
			// The old key of the key change by.
			if kb = encodeKey(l, kb[:0], st.key); lim.moved.recreatedAfter(kb, by) {
				b.kept++
				continue
			}
		}
		b.deletes = append(b.deletes, st.key)
		if st.row < 0 {
			continue
		}
		if !lim.moved.empty() {
			if kb = encodeKey(l, kb[:0], st.key); lim.moved.overtakes(kb, by) {
				b.overtaken++
				continue
			}
		}
		if lim.recreates(by) {
			b.recreated = append(b.recreated, move{key: string(encodeKey(l, nil, st.key)), at: by.at, pos: by.src.SourcePos})
		}
		b.upserts = append(b.upserts, st.row)
		switch r := rows.at(st.row); {
		case r.absent == nil:
		case len(r.absent) == 0:
			b.fromBuffer++
		case st.src != nil:
			b.lookups = append(b.lookups, lookup{row: st.row, key: st.src})
		default:
			b.missing++
		}
	}
}

func (b *batch) noteSeq(r *row) {
	if r.replay {
		return
	}
	if r.src.load {
		b.loads++
	} else {
		b.cdc++
	}
	if change.CompareSeq(r.seq, b.maxSeq[r.shard]) > 0 {
		b.maxSeq[r.shard] = r.seq
	}
}

// mergeEarlier completes r from prev, the latest earlier image of the same row in the batch:
// every column r lacks and prev has is copied. r.absent keeps the columns both lack; it stays
// non-nil (empty when complete), so the row still counts as a partial image. Both absent lists
// are in column order.
func mergeEarlier(r, prev *row) {
	out := r.absent[:0]
	j := 0
	for _, c := range r.absent {
		for j < len(prev.absent) && prev.absent[j] < c {
			j++
		}
		if j < len(prev.absent) && prev.absent[j] == c {
			out = append(out, c) // prev lacks it too
			continue
		}
		r.vals[c] = prev.vals[c]
	}
	r.absent = out
}

// encodeKey appends the encoding of key (the values of l's key columns) to buf.
func encodeKey(l *layout, buf []byte, key []dms.Datum) []byte {
	for ki, i := range l.keyIdx {
		buf = dms.AppendKey(buf, l.types[i], key[ki])
	}
	return buf
}

// landedIn reports whether watermarks cover every shard range of the batch: a commit whose
// outcome was unknown did land, or another worker committed the same records.
func (b *batch) landedIn(watermarks map[string]string) bool {
	if len(b.maxSeq) == 0 {
		return false // only replayed rows: no watermark tells whether they landed
	}
	for shard, seq := range b.maxSeq {
		if !checkpoint.Covered(watermarks[shard], seq) {
			return false
		}
	}
	return true
}
