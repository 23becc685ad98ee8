package sink

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
)

// item is what a table writer's queue carries: an event, or a flush request.
type item struct {
	ev    *change.Event
	flush chan error
}

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
}

// writer owns one target table: its queue, buffer and commits.
type writer struct {
	s      *Iceberg
	src    string // source "schema.table"
	ident  table.Identifier
	name   string // target "namespace.table" for logs and metrics
	tc     TableConfig
	set    *settings // resolved table configuration (tc is set.tc)
	in     chan item
	log    *zap.Logger
	tbl    *table.Table
	lay    *layout
	rows   []row
	bytes  int64
	first  time.Time         // when the oldest buffered event arrived
	high   map[string]string // shard -> highest sequence number buffered
	acks   map[change.Acker]int
	lastAk change.Acker
	lastN  int
	keyBuf []byte
	seen   []bool      // convert's scratch: the columns an update image carried (absent_columns keep)
	merged []dms.Datum // writeFiles' scratch: a partial image completed from the table
	maint  maintainer  // nil when maintenance is off
	// def is the latest table-def seen in a control record of this table, defTS that record's
	// metadata.timestamp.
	def   *change.TableDef
	defTS string
	// status is statusActive, statusPaused or statusDropped, with the reason when not active.
	status, reason string
	// dl counts dead letters handed to an AsyncDeadLetterer and not yet durable.
	dl dlWait
	// closing is set once the queue is closed: the final flush of a graceful stop.
	closing bool
	// pub is the published copy of the status for TableStatuses.
	pubMu sync.Mutex
	pub   TableStatus
}

func newWriter(s *Iceberg, src string, ident table.Identifier, tc TableConfig) *writer {
	name := ident[0] + "." + ident[len(ident)-1]
	set := s.cfg.settingsFor(src)
	set.tc = tc
	return &writer{
		s: s, src: src, ident: ident, name: name, tc: tc, set: set,
		in:     make(chan item, s.cfg.QueueLength),
		log:    s.log.With(zap.String("table", name)),
		high:   make(map[string]string),
		acks:   make(map[change.Acker]int),
		status: statusActive,
		dl:     newDLWait(),
		pub:    TableStatus{Source: src, Table: name, Status: statusActive},
	}
}

// run processes the queue until it is closed (graceful: flush and return) or ctx is done.
func (w *writer) run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it, ok := <-w.in:
			if !ok {
				w.closing = true
				return w.flush(ctx)
			}
			if it.flush != nil {
				it.flush <- w.flush(ctx)
				continue
			}
			if err := w.add(ctx, it.ev); err != nil {
				return err
			}
			if w.pending() && !armed {
				timer.Reset(time.Until(w.first.Add(w.set.flushInterval)))
				armed = true
			}
			if len(w.rows) >= w.set.flushRows || w.bytes >= w.set.flushBytes {
				if err := w.flush(ctx); err != nil {
					return err
				}
			}
		case <-timer.C:
			armed = false
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
		if armed && !w.pending() {
			timer.Stop()
			armed = false
		}
	}
}

func (w *writer) pending() bool { return len(w.rows) > 0 || len(w.acks) > 0 || w.lastN > 0 }

// attach makes ev's acknowledgement wait for the next commit of this table.
func (w *writer) attach(ev *change.Event) {
	if ev.Ack == nil {
		return
	}
	if w.first.IsZero() {
		w.first = time.Now()
	}
	if ev.Ack == w.lastAk {
		w.lastN++
		return
	}
	if w.lastN > 0 {
		w.acks[w.lastAk] += w.lastN
	}
	w.lastAk, w.lastN = ev.Ack, 1
}

func ack(ev *change.Event) {
	if ev.Ack != nil {
		ev.Ack.Done(1)
	}
}

// deadLetter stores a record that cannot be applied, with its class (see ClassConvert ...) and
// reason, and acknowledges it once the dead letter is durable. With an AsyncDeadLetterer the
// writer does not wait: the acknowledgement follows the dead-letter commit, and the writer's
// next commit waits for it (awaitDeadLetters).
func (w *writer) deadLetter(ctx context.Context, ev *change.Event, class, reason string) error {
	op := ev.Meta.Operation
	if op == "" {
		op = ev.Op.String()
	}
	dl := change.DeadLetter{Stream: ev.Pos.Stream, Shard: ev.Pos.Shard, Seq: ev.Pos.Seq,
		Table: w.src, Reason: reason, Raw: ev.Raw, Class: class, Op: op}
	w.s.metrics.DeadLettered(w.name)
	w.s.status().DeadLetterClass(w.name, class)
	w.log.Warn("dead-lettered record", zap.String("shard", ev.Pos.Shard), zap.String("seq", ev.Pos.Seq),
		zap.String("class", class), zap.String("reason", reason))
	if a, ok := w.s.dlq.(AsyncDeadLetterer); ok {
		w.dl.add()
		acker := ev.Ack
		err := a.DeadLetterAsync(ctx, dl, func(err error) {
			if err == nil && acker != nil {
				acker.Done(1)
			}
			w.dl.done(err)
		})
		if err != nil {
			w.dl.done(err)
			return fmt.Errorf("dead-letter a record of %s: %w", w.src, err)
		}
		return nil
	}
	if err := w.s.dlq.DeadLetter(ctx, dl); err != nil {
		return fmt.Errorf("dead-letter a record of %s: %w", w.src, err)
	}
	ack(ev)
	return nil
}

// add takes one event into the buffer (or acknowledges it when the table already holds it).
func (w *writer) add(ctx context.Context, ev *change.Event) error {
	if ev.Op == change.OpControl {
		return w.control(ctx, ev)
	}
	if w.lay == nil && w.status == statusActive {
		if err := w.open(ctx, ev); err != nil {
			return err
		}
	}
	shard, seq := ev.Pos.Shard, ev.Pos.Seq
	if w.lay != nil && !ev.Replay {
		if checkpoint.Covered(w.lay.watermark[shard], seq) {
			w.s.metrics.Skipped(w.name, 1)
			ack(ev)
			return nil
		}
		if checkpoint.Covered(w.high[shard], seq) {
			// A replay of something buffered but not yet committed: it is finished when that commit is.
			w.s.metrics.Skipped(w.name, 1)
			w.attach(ev)
			return nil
		}
	}
	switch w.status {
	case statusPaused:
		return w.deadLetter(ctx, ev, ClassPaused, fmt.Sprintf("table %s is paused: %s", w.name, w.reason))
	case statusDropped:
		return w.deadLetter(ctx, ev, ClassDropped, fmt.Sprintf("table %s was dropped at the source (%s) and sink.drop_table is mark: records are not written until a create-table", w.name, w.reason))
	}
	if !w.lay.keyed() && ev.Op != change.OpLoad && ev.Op != change.OpInsert {
		return w.deadLetter(ctx, ev, ClassKeyless, fmt.Sprintf("%s on table %s, which has no primary key: only inserts can be applied (configure sink.tables[%q].primary_key)", ev.Op, w.src, w.src))
	}
	if unknown := w.unknownColumns(ev); len(unknown) > 0 {
		if err := w.addColumns(ctx, ev, unknown); err != nil {
			return err
		}
	}
	r, reason := w.convert(ev)
	if reason != "" {
		return w.deadLetter(ctx, ev, ClassConvert, reason)
	}
	r.replay = ev.Replay
	if !ev.Replay {
		w.high[shard] = seq
	}
	w.rows = append(w.rows, r)
	w.bytes += int64(len(ev.Raw)) + 64
	w.attach(ev)
	return nil
}

// unknownColumns lists the columns of an upsert that the table does not have (excluded columns
// are never unknown). Deletes are applied by key and never evolve the schema.
func (w *writer) unknownColumns(ev *change.Event) []change.Column {
	if ev.Op == change.OpDelete {
		return nil
	}
	var out []change.Column
	for i, c := range ev.Columns {
		if _, ok := w.lay.index(i, c.Name); !ok && !w.set.exclude[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// convert turns the event's images into typed values. A non-empty reason means the record
// cannot be applied and goes to the dead-letter place.
func (w *writer) convert(ev *change.Event) (row, string) {
	l := w.lay
	r := row{del: ev.Op == change.OpDelete, shard: ev.Pos.Shard, seq: ev.Pos.Seq, vals: make([]dms.Datum, len(l.types))}
	for i := range r.vals {
		r.vals[i].Null = true
	}
	// With absent_columns keep, an update notes which columns its image carried: the live ones
	// it leaves out keep their values (partial.go).
	keep := w.set.keepAbsent && ev.Op == change.OpUpdate && len(l.live) > 0 && l.keyed()
	if keep {
		if cap(w.seen) < len(l.types) {
			w.seen = make([]bool, len(l.types))
		}
		w.seen = w.seen[:len(l.types)]
		clear(w.seen)
	}
	for pos, c := range ev.Columns {
		i, ok := l.index(pos, c.Name)
		if !ok || (r.del && !isKey(l, i)) {
			continue // excluded, or a non-key column of a delete
		}
		if keep {
			w.seen[i] = true
		}
		v := c.Value
		if w.set.transformed() {
			v, _ = w.set.value(c.Name, v)
		}
		d, err := dms.Convert(l.types[i], v)
		if err != nil {
			return r, fmt.Sprintf("column %s: %v", c.Name, err)
		}
		r.vals[i] = d
	}
	for _, i := range l.keyIdx {
		if r.vals[i].Null {
			return r, fmt.Sprintf("%s without a value for key column %s", ev.Op, l.names[i])
		}
	}
	if ev.Op == change.OpUpdate && l.keyed() && len(ev.Before) > 0 {
		old, changed, reason := w.beforeKey(ev, r.vals)
		if reason != "" {
			return r, reason
		}
		if changed {
			r.oldKey = old
		}
	}
	if keep {
		r.absent = w.absentColumns()
	}
	return r, ""
}

func isKey(l *layout, i int) bool {
	for _, k := range l.keyIdx {
		if k == i {
			return true
		}
	}
	return false
}

// beforeKey reads the old key from the before-image; changed is true when it differs from the
// new key (a primary-key change).
func (w *writer) beforeKey(ev *change.Event, vals []dms.Datum) ([]dms.Datum, bool, string) {
	l := w.lay
	old := make([]dms.Datum, len(l.keyIdx))
	found := 0
	for ki, i := range l.keyIdx {
		old[ki] = vals[i] // a key column the before-image leaves out did not change (Oracle)
		for _, c := range ev.Before {
			if c.Name != l.names[i] {
				continue
			}
			v := c.Value
			if w.set.transformed() {
				v, _ = w.set.value(c.Name, v)
			}
			d, err := dms.Convert(l.types[i], v)
			if err != nil {
				return nil, false, fmt.Sprintf("before-image column %s: %v", c.Name, err)
			}
			if d.Null {
				return nil, false, fmt.Sprintf("before-image key column %s is null", c.Name)
			}
			old[ki] = d
			found++
			break
		}
	}
	if found == 0 {
		return nil, false, "" // pk-only before-image of an update that kept its key: {}
	}
	for ki, i := range l.keyIdx {
		if old[ki] != vals[i] {
			return old, true, ""
		}
	}
	return nil, false, ""
}

// control applies a control record in order with this table's data (see applyControl).
func (w *writer) control(ctx context.Context, ev *change.Event) error {
	return w.applyControl(ctx, ev)
}

// open loads the target table, creating it (and its namespace) on first sight. A table that
// cannot be created as configured (a key column it would not have, a floating-point key, an
// invalid partition spec) pauses the writer instead of failing the service: its records are
// dead-lettered with the reason until a table-def or a restart with fixed configuration lets it
// be created.
func (w *writer) open(ctx context.Context, ev *change.Event) error {
	cat := w.s.cat
	tbl, err := cat.LoadTable(ctx, w.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		var bad *schemaError
		tbl, err = w.create(ctx, ev)
		if errors.As(err, &bad) {
			w.pause(bad.Error())
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("open table %s: %w", w.name, err)
	}
	if err := w.use(tbl); err != nil {
		return err
	}
	return w.opened(ctx)
}

// schemaError is a table that cannot be created as defined and configured.
type schemaError struct{ err error }

func (e *schemaError) Error() string { return e.err.Error() }

func (w *writer) use(tbl *table.Table) error {
	lay, err := newLayout(tbl, w.s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.name, err)
	}
	if w.lay != nil && len(w.rows) > 0 {
		// A reload picked up another worker's schema change while rows are buffered.
		relayRows(w.rows, w.lay, lay)
	}
	w.tbl, w.lay = tbl, lay
	return nil
}

func (w *writer) create(ctx context.Context, ev *change.Event) (*table.Table, error) {
	cat := w.s.cat
	def := w.def
	if def == nil {
		def = w.s.def(w.src)
	}
	schema, source, err := buildSchema(def, w.set, ev)
	if err != nil {
		return nil, &schemaError{fmt.Errorf("schema for %s: %w", w.src, err)}
	}
	props := maps.Clone(tableProperties)
	maps.Copy(props, dictionaryProps(schema))
	if def != nil && w.defTS != "" {
		controlTSProp(props, nil, w.defTS)
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props)}
	spec, err := w.set.partitionSpec(schema)
	if err != nil {
		return nil, &schemaError{fmt.Errorf("table %s: %w", w.src, err)}
	}
	if spec != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec))
	}
	ns := w.ident[:len(w.ident)-1]
	if err := cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, fmt.Errorf("create namespace %v: %w", ns, err)
	}
	tbl, err := cat.CreateTable(ctx, w.ident, schema, opts...)
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		return cat.LoadTable(ctx, w.ident) // another worker was first
	}
	if err != nil {
		return nil, err
	}
	w.log.Info("created table", zap.String("schema_from", source), zap.Stringer("schema", tbl.Schema()))
	w.s.status().SchemaChanged(w.name, "create_table", 1)
	return tbl, nil
}

// addColumns evolves the schema for columns that appear in data but not in the table: they are
// added as optional columns with a type inferred from the value. The buffer is committed first,
// because its rows were built for the old schema.
func (w *writer) addColumns(ctx context.Context, ev *change.Event, cols []change.Column) error {
	if err := w.flush(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		txn := w.tbl.NewTransaction()
		us := txn.UpdateSchema(true, false)
		added := map[string]bool{}
		for _, c := range cols {
			if _, ok := w.lay.byName[c.Name]; ok || added[c.Name] {
				continue
			}
			added[c.Name] = true
			us.AddColumn([]string{c.Name}, w.set.inferType(c), "", false, nil)
		}
		err := us.Commit()
		var tbl *table.Table
		if err == nil {
			tbl, err = txn.Commit(ctx)
		}
		if err == nil {
			w.log.Info("added columns seen in data", zap.Int("columns", len(cols)), zap.Stringer("schema", tbl.Schema()))
			w.s.status().SchemaChanged(w.name, "add_column", len(added))
			return w.use(tbl)
		}
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("add columns to %s: %w", w.name, err)
		}
		moved, rerr := w.reload(ctx)
		if rerr != nil {
			return rerr
		}
		if len(w.unknownColumns(ev)) == 0 {
			return nil // another worker added them
		}
		if err := w.retryWait(ctx, attempt, err, moved); err != nil {
			return err
		}
	}
}

// reload loads the table again after a failed commit. moved reports whether another commit
// landed since the writer's table was loaded (its metadata location changed): the failed commit
// lost a race. The SQL and Glue catalogs report most lost races as a failed requirement
// ("branch main has changed") without table.ErrCommitFailed, so this is the reliable sign.
func (w *writer) reload(ctx context.Context) (moved bool, err error) {
	tbl, err := w.s.cat.LoadTable(ctx, w.ident)
	if err != nil {
		return false, fmt.Errorf("reload %s: %w", w.name, err)
	}
	moved = w.tbl == nil || tbl.MetadataLocation() != w.tbl.MetadataLocation()
	return moved, w.use(tbl)
}

// retryWait waits before attempt+1 of a commit that failed with err; moved is what reload
// reported.
func (w *writer) retryWait(ctx context.Context, attempt int, err error, moved bool) error {
	return sleep(ctx, retryDelay(attempt, moved || errors.Is(err, table.ErrCommitFailed), w.closing))
}

// batch is the deduplicated content of one commit.
type batch struct {
	upserts []int         // indexes into w.rows of the surviving row images
	deletes [][]dms.Datum // keys to delete (every touched key, for upsert semantics)
	maxSeq  map[string]string
	trimmed int
	// Partial update images (absent_columns keep, partial.go): lookups are the surviving images
	// that need the table's row, fill the rows found (by index into w.rows) on snapshot fillSnap;
	// fromBuffer counts images completed within the batch, missing those of a key deleted
	// earlier in the batch.
	lookups             []lookup
	fill                map[int][]dms.Datum
	filled              bool
	fillSnap            int64
	fromBuffer, missing int
}

// plan drops rows the table already holds and collapses the rest to the last change per key.
func (w *writer) plan() batch {
	l := w.lay
	b := batch{maxSeq: make(map[string]string)}
	if !l.keyed() {
		for i := range w.rows {
			r := &w.rows[i]
			if !r.replay && checkpoint.Covered(l.watermark[r.shard], r.seq) {
				b.trimmed++
				continue
			}
			b.upserts = append(b.upserts, i)
			b.noteSeq(r)
		}
		return b
	}
	type state struct {
		row int // index of the surviving image, -1 for a delete
		key []dms.Datum
		// src is the key whose stored row completes the surviving image when it is partial
		// (absent_columns keep); nil when nothing can: the key was deleted in this batch.
		src []dms.Datum
	}
	last := make(map[string]int, len(w.rows)) // key -> index into states
	var states []state
	nk := len(l.keyIdx)
	keys := make([]dms.Datum, len(w.rows)*nk) // every row's key, one allocation per plan
	set := func(key []dms.Datum, rowIdx int, src []dms.Datum) {
		w.keyBuf = w.encodeKey(w.keyBuf[:0], key)
		if si, ok := last[string(w.keyBuf)]; ok {
			states[si].row, states[si].src = rowIdx, src
			return
		}
		last[string(w.keyBuf)] = len(states)
		states = append(states, state{row: rowIdx, key: key, src: src})
	}
	for i := range w.rows {
		r := &w.rows[i]
		if !r.replay && checkpoint.Covered(l.watermark[r.shard], r.seq) {
			b.trimmed++
			continue
		}
		b.noteSeq(r)
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
			w.keyBuf = w.encodeKey(w.keyBuf[:0], from)
			si, ok := last[string(w.keyBuf)]
			switch {
			case !ok:
				src = from
			case states[si].row >= 0:
				mergeEarlier(r, &w.rows[states[si].row])
				src = states[si].src
			}
		}
		if r.oldKey != nil {
			set(r.oldKey, -1, nil)
		}
		if r.del {
			set(key, -1, nil)
		} else {
			set(key, i, src)
		}
	}
	for _, st := range states {
		b.deletes = append(b.deletes, st.key)
		if st.row < 0 {
			continue
		}
		b.upserts = append(b.upserts, st.row)
		switch r := &w.rows[st.row]; {
		case r.absent == nil:
		case len(r.absent) == 0:
			b.fromBuffer++
		case st.src != nil:
			b.lookups = append(b.lookups, lookup{row: st.row, key: st.src})
		default:
			b.missing++
		}
	}
	return b
}

func (b *batch) noteSeq(r *row) {
	if r.replay {
		return
	}
	if change.CompareSeq(r.seq, b.maxSeq[r.shard]) > 0 {
		b.maxSeq[r.shard] = r.seq
	}
}

// staged holds the files written for a batch, reusable across commit attempts while the batch
// does not change.
type staged struct {
	data    []iceberg.DataFile
	deletes []iceberg.DataFile
}

// flush commits the buffer as one snapshot and then acknowledges every attached event.
func (w *writer) flush(ctx context.Context) error {
	if err := w.awaitDeadLetters(ctx); err != nil {
		return err
	}
	if !w.pending() {
		return nil
	}
	start := time.Now()
	var files *staged
	var b batch
	attempt := 0
	for ; ; attempt++ {
		nb := w.plan()
		if files == nil || nb.trimmed != b.trimmed {
			b, files = nb, nil
		}
		if len(b.upserts) == 0 && len(b.deletes) == 0 {
			break // nothing left that the table does not already hold
		}
		err := func() error {
			// Partial images keep values read from the snapshot the commit is staged on: read
			// them for new files, and again after a reload moved the table.
			if len(b.lookups) > 0 && (files == nil || !b.filled || b.fillSnap != snapshotID(w.tbl)) {
				changed, err := w.lookup(ctx, &b)
				if err != nil {
					return err
				}
				if changed {
					files = nil
				}
			}
			if files == nil {
				f, err := w.writeFiles(ctx, b)
				if err != nil {
					return err
				}
				files = f
				fault.Hit(fault.AfterDataFiles)
			}
			return w.commit(ctx, b, files)
		}()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.s.metrics.CommitFailed(w.name)
		// A closing writer keeps trying until its context ends (shutdown_timeout bounds it):
		// giving up would only leave the records for the next owner to read again.
		if attempt >= w.s.cfg.CommitRetries && !w.closing {
			return fmt.Errorf("commit %s: giving up after %d attempts: %w", w.name, attempt+1, err)
		}
		w.log.Warn("commit failed; reloading", zap.Int("attempt", attempt+1), zap.Error(err))
		moved, rerr := w.reload(ctx)
		if rerr != nil {
			w.log.Warn("reload failed", zap.Error(rerr))
		} else if w.landed(b) {
			w.log.Info("commit outcome was unknown; the table already holds this batch")
			break
		}
		if err := w.retryWait(ctx, attempt, err, moved); err != nil {
			return err
		}
	}
	took := time.Since(start)
	if len(b.upserts) > 0 || len(b.deletes) > 0 {
		wm := make(map[string]string, len(w.lay.watermark))
		for k, v := range w.lay.watermark {
			wm[k] = v
		}
		w.s.metrics.Committed(CommitInfo{Table: w.name, Source: w.src, SnapshotID: snapshotID(w.tbl),
			Rows: len(b.upserts), Deletes: len(b.deletes), Trimmed: b.trimmed, Attempts: attempt + 1,
			Took: took, Oldest: w.first, Watermarks: wm})
		w.log.Info("committed", zap.Int("rows", len(b.upserts)), zap.Int("deletes", len(b.deletes)),
			zap.Int("trimmed", b.trimmed), zap.Int64("snapshot", snapshotID(w.tbl)), zap.Int("attempts", attempt+1),
			zap.Duration("took", took))
		w.logPartial(&b)
	}
	if b.trimmed > 0 {
		w.s.metrics.Skipped(w.name, b.trimmed)
	}
	fault.Hit(fault.AfterCommit)
	committed := len(b.upserts) > 0 || len(b.deletes) > 0
	w.release()
	// Maintenance handed to the writer runs after the acknowledgements, so it never delays a
	// checkpoint, and not at all in the final flush of a graceful stop.
	if committed && !w.closing && w.maint != nil {
		w.maint.AfterCommit(ctx, w.tbl, w.use)
	}
	return nil
}

// release acknowledges everything attached to the committed batch and empties the buffer.
func (w *writer) release() {
	if w.lastN > 0 {
		w.acks[w.lastAk] += w.lastN
	}
	for a, n := range w.acks {
		a.Done(n)
	}
	clear(w.acks)
	w.lastAk, w.lastN = nil, 0
	clear(w.rows)
	w.rows = w.rows[:0]
	w.bytes = 0
	w.first = time.Time{}
	clear(w.high)
}

// landed reports whether the (reloaded) table already covers every shard range of the batch:
// a commit whose outcome was unknown did land, or another worker committed the same records.
func (w *writer) landed(b batch) bool {
	if len(b.maxSeq) == 0 {
		return false // only replayed rows: no watermark tells whether they landed
	}
	for shard, seq := range b.maxSeq {
		if !checkpoint.Covered(w.lay.watermark[shard], seq) {
			return false
		}
	}
	return true
}

func snapshotID(t *table.Table) int64 {
	if s := t.CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return 0
}

// writeFiles writes the data and equality-delete files of a batch (nothing is committed).
func (w *writer) writeFiles(ctx context.Context, b batch) (*staged, error) {
	l := w.lay
	out := &staged{}
	mem := memory.DefaultAllocator
	if len(b.upserts) > 0 {
		rb := array.NewRecordBuilder(mem, l.arrow)
		for _, ri := range b.upserts {
			r := &w.rows[ri]
			vals := r.vals
			if len(r.absent) > 0 {
				vals = w.completed(r, b.fill[ri])
			}
			for ci, t := range l.types {
				dms.AppendDatum(rb.Field(ci), t, vals[ci])
			}
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		for df, err := range table.WriteRecords(ctx, w.tbl, l.arrow, single(rec)) {
			if err != nil {
				return nil, fmt.Errorf("write data files for %s: %w", w.name, err)
			}
			out.data = append(out.data, df)
		}
	}
	if len(b.deletes) > 0 {
		rb := array.NewRecordBuilder(mem, l.keyArrow)
		for _, key := range b.deletes {
			for ki, ci := range l.keyIdx {
				dms.AppendDatum(rb.Field(ki), l.types[ci], key[ki])
			}
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		files, err := w.tbl.NewTransaction().WriteEqualityDeletes(ctx, l.keyIDs, single(rec))
		rec.Release() // WriteEqualityDeletes does not release its input
		if err != nil {
			return nil, fmt.Errorf("write equality deletes for %s: %w", w.name, err)
		}
		out.deletes = files
	}
	return out, nil
}

func single(rec arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }
}

// commit stages the files and the advanced watermarks in one transaction on the current table.
func (w *writer) commit(ctx context.Context, b batch, f *staged) error {
	props := iceberg.Properties{}
	summary := iceberg.Properties{"dms2iceberg.rows": strconv.Itoa(len(b.upserts)), "dms2iceberg.deletes": strconv.Itoa(len(b.deletes))}
	for shard, seq := range b.maxSeq {
		if change.CompareSeq(seq, w.lay.watermark[shard]) > 0 {
			k := checkpoint.WatermarkKey(w.s.cfg.Stream, shard)
			props[k] = seq
			summary[k] = seq
		}
	}
	txn := w.tbl.NewTransaction()
	rd := txn.NewRowDelta(summary)
	rd.AddRows(f.data...)
	rd.AddDeletes(f.deletes...)
	if err := rd.Commit(ctx); err != nil {
		return fmt.Errorf("stage row delta: %w", err)
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return fmt.Errorf("stage watermarks: %w", err)
		}
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return err
	}
	return w.use(tbl)
}

// backoff is the capped, jittered exponential wait before attempt+1 of work that failed for
// reasons other than losing a race to another writer (catalog or storage trouble, unknown
// outcomes), and of maintenance commits, which yield to the writers: 25–50 ms growing to 10–20 s.
func backoff(attempt int) time.Duration { return jitter(50*time.Millisecond, attempt, 20*time.Second) }

// retryDelay is the wait before re-staging a commit that failed, conflict telling whether it
// lost a race to another commit (see reload).
//
// A conflict (another writer moved the table first) is retried soon: the
// loser only has to re-stage on the new head, and every longer wait lets more commits land
// before it, so under contention an exponential wait made single commits take tens of seconds
// (a graceful stop overran shutdown_timeout that way). Conflicts wait 10–20 ms growing to
// 0.5–1 s; other failures use backoff. While the writer is closing, both are capped lower (250 ms
// and 2 s) so that the final commit keeps trying within shutdown_timeout.
func retryDelay(attempt int, conflict, closing bool) time.Duration {
	switch {
	case conflict && closing:
		return jitter(20*time.Millisecond, attempt, 250*time.Millisecond)
	case conflict:
		return jitter(20*time.Millisecond, attempt, time.Second)
	case closing:
		return jitter(50*time.Millisecond, attempt, 2*time.Second)
	}
	return backoff(attempt)
}

// jitter returns a random wait in [d/2, d] for d = base doubled attempt times, at most limit.
func jitter(base time.Duration, attempt int, limit time.Duration) time.Duration {
	d := base << min(attempt, 16)
	if d > limit || d <= 0 {
		d = limit
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
