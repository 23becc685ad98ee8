package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The table writer, one per target table: a loop over its queue (writer, this file) that hands
// each event to the part that owns it. Each part is a type with its own fields; they share the
// read-only tableScope:
//
//	writer          writer.go      the queue loop, intake of one event, the flush's walk over held events
//	controlApplier  control.go     control records: schema changes, drop, their guards (and truncate.go:
//	                               truncate, rename-table), re-checked on every refreshed table
//	schemaApplier   evolve.go      opening, creating and evolving the table; its owner (owner.go), its
//	                               key (key.go), the record identity of keyless tables (identity.go)
//	committer       flush.go       the commit path of rows: files, row delta and watermarks through
//	                               commit.Run; partial images (partial.go), contention (contention.go)
//	reloadTracker   reload.go      a DMS table reload: its start, its load rows, the replacing snapshot
//	planner         planner.go     the buffer (buffer.go), its order and the commit bound (order.go),
//	                               an event's images to a row (convert.go), the buffer's gauge
//	targetTable     state.go       the loaded table, its layout, table-def and status; adopting tables
//	deadLetters     writer_dlq.go  dead letters of the writer and waiting for them before a commit
//
// Calls go down that list (intake → control records → schema → commit path → reload, planner,
// state), never back up. A table is loaded again after a failed commit attempt ("refreshed",
// commit.Op.Reloaded); "reload" means a DMS table reload only.

// item is what a table writer's queue carries: an event, or a flush request.
type item struct {
	ev    *change.Event
	flush chan error
}

// writerEnv holds the collaborators a writer is built with; it never reaches back into the sink.
type writerEnv struct {
	cat     catalog.Catalog
	dlq     change.DeadLetterer
	metrics Metrics
	// onCommit is told of every table commit (the commit listener; never nil).
	onCommit func(CommitInfo)
	// defs shares the table-defs seen in control records between the sink's writers.
	defs *tableDefs
	// stream is the Kinesis stream the watermarks are kept for; retries bounds commit attempts,
	// attemptTimeout each of them (sink.commit_timeout); dropMark is sink.drop_table mark.
	stream         string
	retries        int
	attemptTimeout time.Duration
	dropMark       bool
	// bound is the commit bound provider (WithCommitBound); nil: no bound, everything may commit.
	bound func() Bound
	// boundChanged is WithBoundsChanged (nil: none).
	boundChanged func() <-chan struct{}
	// shards notes the shards the sink has seen (risk detection with ordering shard).
	shards *shardSeen
	// fileSlots bounds how many writers of the sink write data and delete files at once (nil:
	// no bound).
	fileSlots chan struct{}
	// mem builds the batches' Arrow data (WithAllocator; nil: memory.DefaultAllocator).
	mem memory.Allocator
}

// allocator is the Arrow allocator of the writer's batches.
func (e *writerEnv) allocator() memory.Allocator {
	if e.mem == nil {
		return memory.DefaultAllocator
	}
	return e.mem
}

// tableScope is what every part of one table's writer shares and none of them changes after
// the writer is built: the sink's collaborators, the table's names, its resolved configuration
// and its log.
type tableScope struct {
	env   writerEnv
	src   string // source "schema.table"
	ident table.Identifier
	name  string    // target "namespace.table" for logs and metrics
	set   *settings // resolved table configuration
	log   *zap.Logger
}

// guarded reports whether the ordering guard holds events back: ordering arrival with a commit
// bound provider. Without a provider (tests, dlq replay, decode) nothing is held and every row
// may commit, still ordered by arrival and source position.
func (s *tableScope) guarded() bool { return s.set.arrival && s.env.bound != nil }

// writer owns one target table: a thin loop over its queue that hands each event to the part
// that owns it. Each part has its own fields; they share the scope and the table's state.
type writer struct {
	*tableScope
	in chan item
	// nudge asks the writer to flush now: a shard reader waits for the memory budget
	// (Iceberg.relieve).
	nudge chan struct{}
	st    *targetTable    // the loaded table, its layout and status (state.go)
	pl    *planner        // the buffer, its order and the commit bound (planner.go)
	cm    *committer      // the commit path of rows (flush.go)
	sa    *schemaApplier  // opening, creating and evolving the table (evolve.go)
	ca    *controlApplier // control records (control.go)
	rt    *reloadTracker  // DMS table reloads (reload.go)
	dq    *deadLetters    // the writer's dead letters (writer_dlq.go)
}

func newWriter(env writerEnv, src string, ident table.Identifier, set *settings, queue int, log *zap.Logger) *writer {
	name := ident[0] + "." + ident[len(ident)-1]
	sc := &tableScope{env: env, src: src, ident: ident, name: name, set: set, log: log.With(zap.String("table", name))}
	st := &targetTable{tableScope: sc, status: tableprop.StatusActive,
		pub: TableStatus{Source: src, Table: name, Status: tableprop.StatusActive}}
	pl := newPlanner(sc, st)
	rt := &reloadTracker{tableScope: sc, st: st}
	st.buf, st.rt = &pl.buf, rt
	dq := &deadLetters{tableScope: sc, wait: newDLWait()}
	in := make(chan item, queue)
	cm := &committer{tableScope: sc, st: st, pl: pl, rt: rt, dq: dq, queued: func() int { return len(in) }, moved: newMovedKeys()}
	sa := &schemaApplier{tableScope: sc, st: st, pl: pl, cm: cm}
	ca := &controlApplier{tableScope: sc, st: st, pl: pl, cm: cm, sa: sa, rt: rt, dq: dq}
	return &writer{tableScope: sc, in: in, nudge: make(chan struct{}, 1),
		st: st, pl: pl, cm: cm, sa: sa, ca: ca, rt: rt, dq: dq}
}

// What the sink reads of and hands to a writer from other goroutines than the writer's: its
// queue (w.in), and these.

// useMaintainer hands the writer its table's maintainer, before run.
func (w *writer) useMaintainer(m maintainer) { w.cm.maint = m }

// status is the writer's status as last published (any goroutine).
func (w *writer) status() TableStatus { return w.st.published() }

// buffered is the size of the buffer as the writer last published it (any goroutine).
func (w *writer) buffered() (rows int, bytes int64) {
	return int(w.pl.gauge.rows.Load()), w.pl.gauge.bytes.Load()
}

// nudgeFlush asks the writer to flush now; it never blocks (a request already waiting is
// enough).
func (w *writer) nudgeFlush() {
	select {
	case w.nudge <- struct{}{}:
	default: // asked already
	}
}

// run processes the queue until it is closed (graceful: flush and return) or ctx is done.
func (w *writer) run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var fresh <-chan time.Time
	if w.guarded() && w.set.freshness > 0 {
		t := time.NewTicker(w.set.freshness)
		defer t.Stop()
		fresh = t.C
	}
	var quiet <-chan time.Time
	if w.set.reloadReplace && w.set.reloadQuiet > 0 {
		t := time.NewTicker(max(w.set.reloadQuiet/4, 100*time.Millisecond))
		defer t.Stop()
		quiet = t.C
	}
	for {
		// A buffer that the last flush could not commit (the bound or a gate holds it) is
		// flushed again as soon as they move.
		var moved <-chan struct{}
		if w.pl.waiting() && w.env.boundChanged != nil {
			moved = w.env.boundChanged()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
			if w.pl.waiting() && w.pl.boundMoved() {
				if err := w.flush(ctx); err != nil {
					return err
				}
			}
		case it, ok := <-w.in:
			if stop, err := w.receive(ctx, it, ok); stop {
				return err
			}
			// Take in what is queued already, a bounded run of it, without a select over every
			// channel each time (it locks them all: in BenchmarkPipeline's profile the loop's
			// select was 3 % of the process's CPU). The timers wait at most that run.
			for range drainItems {
				select {
				case it, ok := <-w.in:
					if stop, err := w.receive(ctx, it, ok); stop {
						return err
					}
					continue
				default:
				}
				break
			}
		case <-w.nudge:
			// Under memory pressure the buffer commits now rather than at its interval or
			// size, unless the bound that held it back the last time still holds it.
			if w.pl.buf.pending() && w.pl.boundMoved() {
				if err := w.flush(ctx); err != nil {
					return err
				}
			}
		case <-timer.C:
			armed = false
			if err := w.flush(ctx); err != nil {
				return err
			}
		case <-fresh:
			if err := w.cm.freshen(ctx); err != nil {
				return err
			}
		case <-quiet:
			if err := w.cm.reloadQuiet(ctx); err != nil {
				return err
			}
		}
		if err := w.sa.keyAfterReplace(ctx, w.rt); err != nil { // after a quiet reload end too
			return err
		}
		switch pending := w.pl.buf.pending(); {
		case armed && !pending:
			timer.Stop()
			armed = false
		case !armed && pending:
			timer.Reset(time.Until(w.pl.buf.first.Add(w.set.flushInterval)))
			armed = true
		}
		w.pl.publish()
	}
}

// drainItems is how many queued items the writer takes in after one, before it selects again.
const drainItems = 256

// receive takes in one item of the queue (ok false: the queue closed). stop is true when the
// writer must return err.
func (w *writer) receive(ctx context.Context, it item, ok bool) (stop bool, err error) {
	if !ok {
		w.cm.closing = true
		return true, w.flush(ctx)
	}
	if it.flush != nil {
		err := w.flush(ctx)
		w.pl.publish() // before the reply: a caller of Flush sees what it left
		it.flush <- err
		if stateversion.IsRefused(err) {
			return true, err // the table is refused for good: stop, like any other flush would
		}
		return false, nil
	}
	if err := w.add(ctx, it.ev); err != nil {
		return true, err
	}
	switch {
	case w.pl.full():
		if err := w.flush(ctx); err != nil {
			return true, err
		}
	case w.ctlDue(it.ev):
		if err := w.flushTo(ctx, false); err != nil {
			return true, err
		}
	}
	return false, nil
}

// ctlDue reports whether ev, just taken in, is a control record that the guard holds first
// and that the bound already lets apply: then the writer applies it at once (flushTo without
// the tail) rather than at its next flush, and the records after it are converted as they come
// instead of all being held until then. Not while the last flush left changes waiting for a
// bound and gates that have not moved since (boundMoved); the gates may still hold it back,
// and the flush reads the bound again.
func (w *writer) ctlDue(ev *change.Event) bool {
	if !w.guarded() || ev.Op != change.OpControl {
		return false
	}
	first := w.pl.buf.firstCtl()
	if first == nil || first.ev != ev || !w.pl.boundMoved() {
		return false
	}
	return first.at <= w.pl.limitNow().bound
}

// add takes one event in: guarded, a control record, or a data record of a table that does not
// exist yet or behind a held control record, is held for its turn (flush applies it in arrival
// order); everything else is converted into the buffer at once.
func (w *writer) add(ctx context.Context, ev *change.Event) error {
	at := w.pl.buf.arrival(ev)
	if !w.guarded() {
		return w.take(ctx, ev, at, false)
	}
	if !ev.Replay && w.pl.buf.holds(ev.Pos.Shard, ev.Pos.Seq) {
		w.env.metrics.Skipped(w.name, 1)
		w.pl.buf.attach(ev.Pos.Shard, ev.Pos.Seq, ev.Ack)
		return nil
	}
	if ev.Op == change.OpControl || len(w.pl.buf.held) > 0 {
		w.pl.buf.hold(ev, at, gateKindOf(ev))
		return nil
	}
	if !w.st.loaded() {
		found := false
		if w.st.status == tableprop.StatusActive {
			var err error
			if found, err = w.sa.load(ctx); err != nil {
				return err
			}
		}
		if !found {
			// Created (from a table-def if one comes first) when its turn comes; a paused or
			// dropped table's record is dead-lettered then unless a control record before it
			// changed that.
			w.pl.buf.hold(ev, at, gateKindOf(ev))
			return nil
		}
	}
	return w.take(ctx, ev, at, false)
}

// take applies one event whose turn it is: a control record, or a data record converted into
// the buffer (or acknowledged when the table already holds it). wasHeld: it comes from the held
// events (its own sequence number is then in the buffer's range).
func (w *writer) take(ctx context.Context, ev *change.Event, at int64, wasHeld bool) error {
	if w.st.refused != "" {
		return w.dq.deadLetter(ctx, ev, ClassTargetTaken, w.st.refused)
	}
	if ev.Op == change.OpControl {
		return w.ca.applyControl(ctx, ev)
	}
	if !w.st.loaded() && w.st.status == tableprop.StatusActive {
		if err := w.sa.open(ctx, ev); err != nil {
			return err
		}
	}
	if w.st.refused != "" {
		// Checked before the watermarks: they are the owner's, not this source's.
		return w.dq.deadLetter(ctx, ev, ClassTargetTaken, w.st.refused)
	}
	shard, seq := ev.Pos.Shard, ev.Pos.Seq
	if w.st.loaded() && !ev.Replay {
		if w.st.covers(shard, seq) {
			w.env.metrics.Skipped(w.name, 1)
			ack(ev)
			return nil
		}
		if !wasHeld && w.pl.buf.holds(shard, seq) {
			// A replay of something buffered but not yet committed: it is finished when that commit is.
			w.env.metrics.Skipped(w.name, 1)
			w.pl.buf.attach(shard, seq, ev.Ack)
			return nil
		}
	}
	switch w.st.status {
	case tableprop.StatusPaused:
		return w.dq.deadLetter(ctx, ev, ClassPaused, fmt.Sprintf("table %s is paused: %s", w.name, w.st.reason))
	case tableprop.StatusDropped:
		return w.dq.deadLetter(ctx, ev, ClassDropped, fmt.Sprintf("table %s was dropped at the source (%s) and sink.drop_table is mark: records are not written until a create-table", w.name, w.st.reason))
	}
	if !w.st.lay.keyed() && ev.Op != change.OpLoad && ev.Op != change.OpInsert {
		return w.dq.deadLetter(ctx, ev, ClassKeyless, fmt.Sprintf("%s on table %s, which has no primary key: only inserts can be applied (configure sink.tables[%q].primary_key)", ev.Op, w.src, w.src))
	}
	w.sa.noteNoIdentity(ev)
	if unknown := w.pl.resolve(ev); len(unknown) > 0 {
		if err := w.sa.addColumns(ctx, ev, unknown); err != nil {
			return err
		}
		w.pl.resolve(ev) // the layout now has them
	}
	if reason := w.pl.admit(ev, at); reason != "" {
		return w.dq.deadLetter(ctx, ev, ClassConvert, reason)
	}
	return nil
}

// flush commits what may commit now. Guarded (ordering arrival with a commit bound), that is per
// shard the changes that arrived at or before the bound, in arrival order with the held events:
// the rows before the first held control record commit, the control record applies, and so on;
// a held data record is converted when its turn comes (creating its table from the record only
// if by then no table-def created it). What arrived after the bound stays buffered, with its
// acknowledgements, for a later flush; the final flush of a graceful stop too never commits past
// the bound. Without the guard everything buffered commits.
func (w *writer) flush(ctx context.Context) error { return w.flushTo(ctx, true) }

// flushTo is flush; without tail it only applies the held events that are due, committing the
// rows before each control record as flush does, and leaves the rows after the last one
// buffered for the next flush (unless a flush request was queued: that one gets the whole flush).
func (w *writer) flushTo(ctx context.Context, tail bool) (err error) {
	if err := w.dq.awaitDeadLetters(ctx); err != nil {
		return err
	}
	stuck, stuckSet := w.pl.stuck, w.pl.stuckSet
	lim := w.pl.limitNow()
	w.pl.lim = &lim
	defer func() { w.pl.lim = nil }()
	if w.guarded() {
		// Everything handed to the sink before the bound was read is in the queue or taken in:
		// take it in, so a commit complete through the bound holds it.
		var replies []chan error
		replies, err = w.drainQueue(ctx)
		defer func() {
			if len(replies) > 0 {
				w.pl.publish() // before the replies: a caller of Flush sees what it left
			}
			for _, r := range replies {
				r <- err
			}
		}()
		if err != nil {
			return err
		}
		tail = tail || len(replies) > 0
	}
	if !w.pl.buf.pending() {
		return nil
	}
	if err := w.knowHeldKeys(ctx); err != nil {
		return err
	}
	// What the gates hold back stays held back for the whole flush (its limit is fixed), and a
	// held data record that becomes due is admitted, so this is computed once.
	lim.waitFrom = w.pl.buf.gatedFrom(lim)
	var sc dueScan
	// The cut is the last held event popped. One variable for the whole walk: lim.cut points
	// at it, so a variable per event escaped, one allocation per held record.
	hd := new(held)
	for i := w.pl.buf.dueFrom(lim, &sc); i >= 0; i = w.pl.buf.dueFrom(lim, &sc) {
		*hd = w.pl.buf.pop(i)
		lim.cut = hd
		if hd.ctl {
			if err := w.cm.commitRows(ctx); err != nil {
				return err
			}
		}
		if err := w.take(ctx, hd.ev, hd.at, true); err != nil {
			return err
		}
	}
	if !tail {
		// Nothing was tried for the rows after the last control record: whether they wait for
		// the bound to move is what the last whole flush found, not what a commit before a
		// control record that found nothing to take noted.
		w.pl.stuck, w.pl.stuckSet = stuck, stuckSet
		return nil
	}
	// A control record still held (past the bound, or waiting for the gates) is a barrier:
	// the rows that arrived after it wait with it.
	lim.cut = w.pl.buf.firstCtl()
	if err := w.cm.commitRows(ctx); err != nil {
		return err
	}
	if err := w.sa.keyAfterReplace(ctx, w.rt); err != nil { // a reload may have ended
		return err
	}
	w.pl.logGated(lim)
	w.pl.noteGated(lim)
	if w.pl.buf.pending() {
		w.pl.leftOver(lim)
	}
	return nil
}

// knowHeldKeys loads a table another worker created since its records were held (as add loads
// it), so that they convert when their turn comes.
func (w *writer) knowHeldKeys(ctx context.Context) error {
	if len(w.pl.buf.held) == 0 {
		return nil
	}
	if !w.st.loaded() && w.st.status == tableprop.StatusActive && w.pl.buf.firstCtl() == nil {
		if _, err := w.sa.load(ctx); err != nil {
			return err
		}
	}
	return nil
}

// drainQueue takes in the events already queued for the writer; the flush requests among them
// are answered by the caller once the flush is done.
func (w *writer) drainQueue(ctx context.Context) ([]chan error, error) {
	var replies []chan error
	for n := len(w.in); n > 0; n-- {
		it, ok := <-w.in
		if !ok {
			break // closed: the run loop sees it next
		}
		if it.flush != nil {
			replies = append(replies, it.flush)
			continue
		}
		if err := w.add(ctx, it.ev); err != nil {
			return replies, err
		}
	}
	return replies, nil
}

// tableDefs holds the create-table definitions seen in control records, by source table, for
// every writer of the sink (a table re-created after a restart of its writer uses the last one),
// and the key columns of the tables the writers have loaded.
type tableDefs struct {
	mu   sync.Mutex
	defs map[string]*change.TableDef
	keys keyColumns
}

func newTableDefs() *tableDefs { return &tableDefs{defs: make(map[string]*change.TableDef)} }

func (d *tableDefs) set(src string, def *change.TableDef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.defs[src] = def
	if len(def.PrimaryKey) > 0 {
		d.keys.set(src, def.PrimaryKey, false)
	}
}

func (d *tableDefs) get(src string) *change.TableDef {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.defs[src]
}
