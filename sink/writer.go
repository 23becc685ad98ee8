package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The table writer, one per target table, split by concept:
//
//	writer.go        the queue loop and intake of one event (this file)
//	convert.go       an event's images to a typed row
//	buffer.go        the rows and acknowledgements since the last commit, and the dedupe plan (pure)
//	order.go         the ordering guard's order: arrivals, source positions, limits, held events
//	state.go         the loaded table, its layout and watermarks, the writer's status
//	flush.go         the commit path: files, row delta and watermarks through commit.Run
//	partial.go       partial update images completed from the table (absent_columns keep)
//	evolve.go        control records: opening and creating the table, schema changes, drop, key
//	control.go       the guards of control records: watermark and staleness, before and after reloads
//	key.go           the primary key: which columns may be key columns, giving a keyless table its key
//	identity.go      the DMS record identity of keyless tables: re-sent records replace their copy
//	truncate.go      control records on rows and names: truncate, rename-table
//	reload.go        a DMS table reload: its start, its load rows, the replacing snapshot at its end
//	writer_dlq.go    dead letters of the writer and waiting for them before a commit
//	owner.go         one source per target table: the owner property, claiming, refusing
//
// Calls go down that list (intake → control records → commit path → state and buffer), never
// back up.

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
}

// writer owns one target table: its queue, buffer and commits.
type writer struct {
	env   writerEnv
	src   string // source "schema.table"
	ident table.Identifier
	name  string    // target "namespace.table" for logs and metrics
	set   *settings // resolved table configuration
	in    chan item
	// nudge asks the writer to flush now: a shard reader waits for the memory budget
	// (Iceberg.relieve).
	nudge chan struct{}
	log   *zap.Logger
	buf   buffer
	st    targetTable
	// fsF is the file system of the table as opened from the catalog, for the tables the writer
	// keeps after its commits (commit.Detach).
	fsF table.FSysF
	// def is the latest table-def seen in a control record of this table, defTS that record's
	// metadata.timestamp.
	def   *change.TableDef
	defTS string
	// truncWM holds, per shard, the latest truncate that came before the table existed: the
	// table is created with it as its watermark (truncate.go).
	truncWM map[string]string
	// dl counts dead letters handed to an AsyncDeadLetterer and not yet durable.
	dl dlWait
	// refused is why the writer dead-letters every record of its source: another source owns the
	// target table (owner.go); "" when it does not.
	refused string
	// closing is set once the queue is closed: the final flush of a graceful stop.
	closing bool
	seen    []bool      // convert's scratch: the columns an update image carried (absent_columns keep)
	cols    []int32     // take's scratch: the layout index of each column of the event taken in (columnIndexes)
	slab    []dms.Datum // what is left of the chunk convert carves rows' values from (datums)
	merged  []dms.Datum // writeFiles' scratch: a partial image completed from the table
	maint   maintainer  // nil when maintenance is off
	// lim is the limit of the flush in progress (nil outside a flush); stuck is the bound at
	// which the last flush committed nothing while rows stayed (no size-triggered flush until
	// the bound moves), stuckSet whether it is set; fresh is when the last properties-only
	// freshness commit was made.
	lim   *limit
	stuck limitKey
	// gatedLogged is when logGated last logged.
	gatedLogged time.Time
	stuckSet    bool
	fresh       time.Time
	// contended is when a commit of this writer last lost a race (contention.go).
	contended time.Time
	// risk: the first shard this table's records came from, and which risks were reported
	// (ordering shard only).
	riskShard string
	risked    [2]bool
	// gauge is the buffer's size for Buffers (gauges.go).
	gauge bufferGauge
	// identityNoted: noteNoIdentity logged (identity.go).
	identityNoted bool
	// reloadLoaded is when this writer last committed load rows of a reload in progress (or
	// first saw one), for the quiet period; reloadShown: the reload metric shows a reload
	// (reload.go).
	reloadLoaded time.Time
	reloadShown  bool
}

func newWriter(env writerEnv, src string, ident table.Identifier, set *settings, queue int, log *zap.Logger) *writer {
	name := ident[0] + "." + ident[len(ident)-1]
	w := &writer{
		env: env, src: src, ident: ident, name: name, set: set,
		in: make(chan item, queue), nudge: make(chan struct{}, 1),
		log: log.With(zap.String("table", name)),
		buf: newBuffer(),
		dl:  newDLWait(),
	}
	w.buf.reloadOrder = set.reloadReplace
	w.st.status = tableprop.StatusActive
	w.st.pub = TableStatus{Source: src, Table: name, Status: tableprop.StatusActive}
	return w
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
		if w.stuckSet && w.env.boundChanged != nil {
			moved = w.env.boundChanged()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
			if w.stuckSet && w.limitNow().gates() != w.stuck {
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
			if w.buf.pending() && (!w.stuckSet || w.limitNow().gates() != w.stuck) {
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
			if err := w.freshen(ctx); err != nil {
				return err
			}
		case <-quiet:
			if err := w.reloadQuiet(ctx); err != nil {
				return err
			}
		}
		switch pending := w.buf.pending(); {
		case armed && !pending:
			timer.Stop()
			armed = false
		case !armed && pending:
			timer.Reset(time.Until(w.buf.first.Add(w.set.flushInterval)))
			armed = true
		}
		w.publish()
	}
}

// drainItems is how many queued items the writer takes in after one, before it selects again.
const drainItems = 256

// receive takes in one item of the queue (ok false: the queue closed). stop is true when the
// writer must return err.
func (w *writer) receive(ctx context.Context, it item, ok bool) (stop bool, err error) {
	if !ok {
		w.closing = true
		return true, w.flush(ctx)
	}
	if it.flush != nil {
		err := w.flush(ctx)
		w.publish() // before the reply: a caller of Flush sees what it left
		it.flush <- err
		if stateversion.IsRefused(err) {
			return true, err // the table is refused for good: stop, like any other flush would
		}
		return false, nil
	}
	if err := w.add(ctx, it.ev); err != nil {
		return true, err
	}
	if w.full() {
		if err := w.flush(ctx); err != nil {
			return true, err
		}
	}
	return false, nil
}

// full reports whether the buffer reached a flush threshold, unless the last flush could commit
// nothing at the bound that still holds (the flush interval retries then).
func (w *writer) full() bool {
	if w.buf.rows.len()+len(w.buf.held) < w.set.flushRows && w.buf.bytes < w.set.flushBytes {
		return false
	}
	return !w.stuckSet || w.limitNow().gates() != w.stuck
}

// guarded reports whether the ordering guard holds events back: ordering arrival with a commit
// bound provider. Without a provider (tests, dlq replay, decode) nothing is held and every row
// may commit, still ordered by arrival and source position.
func (w *writer) guarded() bool { return w.set.arrival && w.env.bound != nil }

// limitNow is the limit of a commit made now: the commit bound when guarded, else unbounded.
// A zero bound (nothing may commit yet) lets nothing commit.
func (w *writer) limitNow() limit {
	lim := limit{bound: unbounded, ordered: w.set.arrival}
	if w.guarded() {
		b := w.env.bound()
		t := b.At
		lim.bound, lim.through = -1, t
		if !t.IsZero() {
			lim.bound, lim.through = t.UnixMilli(), t.UTC()
			if len(b.Gates) > 0 {
				g := b.Gates.For(w.src)
				lim.loadGate, lim.ctlGate = msOrZero(g[checkpoint.KindLoad].At), msOrZero(g[checkpoint.KindControl].At)
				ch := g[checkpoint.KindChange]
				ch.Min(g[checkpoint.KindKeyChange]) // the change gate takes key changes too
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

// add takes one event in: guarded, a control record, or a data record of a table that does not
// exist yet or behind a held control record, is held for its turn (flush applies it in arrival
// order); everything else is converted into the buffer at once.
func (w *writer) add(ctx context.Context, ev *change.Event) error {
	at := w.buf.arrival(ev)
	if !w.guarded() {
		return w.take(ctx, ev, at, false)
	}
	if !ev.Replay && w.buf.holds(ev.Pos.Shard, ev.Pos.Seq) {
		w.env.metrics.Skipped(w.name, 1)
		w.buf.attach(ev.Pos.Shard, ev.Pos.Seq, ev.Ack)
		return nil
	}
	if ev.Op == change.OpControl || len(w.buf.held) > 0 {
		w.buf.hold(ev, at)
		return nil
	}
	if !w.st.loaded() {
		found := false
		if w.st.status == tableprop.StatusActive {
			var err error
			if found, err = w.load(ctx); err != nil {
				return err
			}
		}
		if !found {
			// Created (from a table-def if one comes first) when its turn comes; a paused or
			// dropped table's record is dead-lettered then unless a control record before it
			// changed that.
			w.buf.hold(ev, at)
			return nil
		}
	}
	return w.take(ctx, ev, at, false)
}

// take applies one event whose turn it is: a control record, or a data record converted into
// the buffer (or acknowledged when the table already holds it). wasHeld: it comes from the held
// events (its own sequence number is then in the buffer's range).
func (w *writer) take(ctx context.Context, ev *change.Event, at int64, wasHeld bool) error {
	if w.refused != "" {
		return w.deadLetter(ctx, ev, ClassTargetTaken, w.refused)
	}
	if ev.Op == change.OpControl {
		return w.applyControl(ctx, ev)
	}
	if !w.st.loaded() && w.st.status == tableprop.StatusActive {
		if err := w.open(ctx, ev); err != nil {
			return err
		}
	}
	if w.refused != "" {
		// Checked before the watermarks: they are the owner's, not this source's.
		return w.deadLetter(ctx, ev, ClassTargetTaken, w.refused)
	}
	shard, seq := ev.Pos.Shard, ev.Pos.Seq
	if w.st.loaded() && !ev.Replay {
		if w.st.covers(shard, seq) {
			w.env.metrics.Skipped(w.name, 1)
			ack(ev)
			return nil
		}
		if !wasHeld && w.buf.holds(shard, seq) {
			// A replay of something buffered but not yet committed: it is finished when that commit is.
			w.env.metrics.Skipped(w.name, 1)
			w.buf.attach(shard, seq, ev.Ack)
			return nil
		}
	}
	switch w.st.status {
	case tableprop.StatusPaused:
		return w.deadLetter(ctx, ev, ClassPaused, fmt.Sprintf("table %s is paused: %s", w.name, w.st.reason))
	case tableprop.StatusDropped:
		return w.deadLetter(ctx, ev, ClassDropped, fmt.Sprintf("table %s was dropped at the source (%s) and sink.drop_table is mark: records are not written until a create-table", w.name, w.st.reason))
	}
	if !w.st.lay.keyed() && ev.Op != change.OpLoad && ev.Op != change.OpInsert {
		return w.deadLetter(ctx, ev, ClassKeyless, fmt.Sprintf("%s on table %s, which has no primary key: only inserts can be applied (configure sink.tables[%q].primary_key)", ev.Op, w.src, w.src))
	}
	w.noteNoIdentity(ev)
	w.cols = w.st.lay.columnIndexes(ev.Columns, w.cols[:0])
	if unknown := w.unknownColumns(ev, w.cols); len(unknown) > 0 {
		if err := w.addColumns(ctx, ev, unknown); err != nil {
			return err
		}
		w.cols = w.st.lay.columnIndexes(ev.Columns, w.cols[:0]) // the layout now has them
	}
	r, reason := w.convert(ev, w.cols)
	if reason != "" {
		return w.deadLetter(ctx, ev, ClassConvert, reason)
	}
	r.replay, r.at, r.src, r.ack, r.kind, r.ts = ev.Replay, at, sourcePos(ev), ev.Ack, gateKindOf(ev), sourceTime(ev)
	if w.buf.reloadOrder {
		r.built = ev.Meta.Timestamp // only a reload's supersession reads it (batch.superseded)
	}
	if !w.set.arrival && !ev.Replay {
		w.noteRisk(&r)
	}
	w.buf.add(r, len(ev.Raw))
	return nil
}

// tableDefs holds the create-table definitions seen in control records, by source table, for
// every writer of the sink (a table re-created after a restart of its writer uses the last one).
type tableDefs struct {
	mu   sync.Mutex
	defs map[string]*change.TableDef
}

func newTableDefs() *tableDefs { return &tableDefs{defs: make(map[string]*change.TableDef)} }

func (d *tableDefs) set(src string, def *change.TableDef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.defs[src] = def
}

func (d *tableDefs) get(src string) *change.TableDef {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.defs[src]
}
