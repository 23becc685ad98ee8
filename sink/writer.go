package sink

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"strconv"
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
	shard  string
	seq    string
}

// writer owns one target table: its queue, buffer and commits.
type writer struct {
	s      *Iceberg
	src    string // source "schema.table"
	ident  table.Identifier
	name   string // target "namespace.table" for logs and metrics
	tc     TableConfig
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
}

func newWriter(s *Iceberg, src string, ident table.Identifier, tc TableConfig) *writer {
	name := ident[0] + "." + ident[len(ident)-1]
	return &writer{
		s: s, src: src, ident: ident, name: name, tc: tc,
		in:   make(chan item, s.cfg.QueueLength),
		log:  s.log.With(zap.String("table", name)),
		high: make(map[string]string),
		acks: make(map[change.Acker]int),
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
				timer.Reset(time.Until(w.first.Add(w.s.cfg.FlushInterval)))
				armed = true
			}
			if len(w.rows) >= w.s.cfg.FlushRows || w.bytes >= w.s.cfg.FlushBytes {
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

func (w *writer) deadLetter(ctx context.Context, ev *change.Event, reason string) error {
	err := w.s.dlq.DeadLetter(ctx, change.DeadLetter{Stream: ev.Pos.Stream, Shard: ev.Pos.Shard, Seq: ev.Pos.Seq,
		Table: w.src, Reason: reason, Raw: ev.Raw})
	if err != nil {
		return fmt.Errorf("dead-letter a record of %s: %w", w.src, err)
	}
	w.s.metrics.DeadLettered(w.name)
	w.log.Warn("dead-lettered record", zap.String("shard", ev.Pos.Shard), zap.String("seq", ev.Pos.Seq), zap.String("reason", reason))
	ack(ev)
	return nil
}

// add takes one event into the buffer (or acknowledges it when the table already holds it).
func (w *writer) add(ctx context.Context, ev *change.Event) error {
	if ev.Op == change.OpControl {
		return w.control(ctx, ev)
	}
	if w.lay == nil {
		if err := w.open(ctx, ev); err != nil {
			return err
		}
	}
	shard, seq := ev.Pos.Shard, ev.Pos.Seq
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
	if !w.lay.keyed() && ev.Op != change.OpLoad && ev.Op != change.OpInsert {
		return w.deadLetter(ctx, ev, fmt.Sprintf("%s on table %s, which has no primary key: only inserts can be applied (configure sink.tables[%q].primary_key)", ev.Op, w.src, w.src))
	}
	if unknown := w.unknownColumns(ev); len(unknown) > 0 {
		if err := w.addColumns(ctx, ev, unknown); err != nil {
			return err
		}
	}
	r, reason := w.convert(ev)
	if reason != "" {
		return w.deadLetter(ctx, ev, reason)
	}
	w.high[shard] = seq
	w.rows = append(w.rows, r)
	w.bytes += int64(len(ev.Raw)) + 64
	w.attach(ev)
	return nil
}

func (w *writer) unknownColumns(ev *change.Event) []change.Column {
	var out []change.Column
	for i, c := range ev.Columns {
		if _, ok := w.lay.index(i, c.Name); !ok {
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
	for pos, c := range ev.Columns {
		i, _ := l.index(pos, c.Name)
		if r.del && !isKey(l, i) {
			continue
		}
		d, err := dms.Convert(l.types[i], c.Value)
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
		for _, c := range ev.Before {
			if c.Name != l.names[i] {
				continue
			}
			d, err := dms.Convert(l.types[i], c.Value)
			if err != nil {
				return nil, false, fmt.Sprintf("before-image column %s: %v", c.Name, err)
			}
			old[ki] = d
			found++
			break
		}
	}
	if found == 0 {
		return nil, false, "" // pk-only before-image of an update that kept its key: {}
	}
	if found != len(l.keyIdx) {
		return nil, false, "before-image holds only part of the primary key"
	}
	for ki, i := range l.keyIdx {
		if old[ki] != vals[i] {
			return old, true, ""
		}
	}
	return nil, false, ""
}

// control applies a control record in order with this table's data.
func (w *writer) control(ctx context.Context, ev *change.Event) error {
	defer ack(ev)
	switch ev.Control.Op {
	case "create-table":
		if w.lay == nil && ev.Control.TableDef != nil {
			w.s.setDef(w.src, ev.Control.TableDef)
			return w.open(ctx, nil)
		}
		w.log.Debug("create-table for an existing table ignored")
	default:
		w.log.Info("control record not applied", zap.String("operation", ev.Control.Op))
	}
	return nil
}

// open loads the target table, creating it (and its namespace) on first sight.
func (w *writer) open(ctx context.Context, ev *change.Event) error {
	cat := w.s.cat
	tbl, err := cat.LoadTable(ctx, w.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		tbl, err = w.create(ctx, ev)
	}
	if err != nil {
		return fmt.Errorf("open table %s: %w", w.name, err)
	}
	return w.use(tbl)
}

func (w *writer) use(tbl *table.Table) error {
	lay, err := newLayout(tbl, w.s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.name, err)
	}
	w.tbl, w.lay = tbl, lay
	return nil
}

func (w *writer) create(ctx context.Context, ev *change.Event) (*table.Table, error) {
	cat := w.s.cat
	schema, source, err := buildSchema(w.s.def(w.src), w.tc, ev, dms.TypeOptions{TimestampTZ: w.s.cfg.TimestampTZ})
	if err != nil {
		return nil, fmt.Errorf("schema for %s: %w", w.src, err)
	}
	ns := w.ident[:len(w.ident)-1]
	if err := cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, fmt.Errorf("create namespace %v: %w", ns, err)
	}
	tbl, err := cat.CreateTable(ctx, w.ident, schema, catalog.WithProperties(tableProperties))
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		return cat.LoadTable(ctx, w.ident) // another worker was first
	}
	if err != nil {
		return nil, err
	}
	w.log.Info("created table", zap.String("schema_from", source), zap.Stringer("schema", tbl.Schema()))
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
		for _, c := range cols {
			if _, ok := w.lay.byName[c.Name]; ok {
				continue
			}
			us.AddColumn([]string{c.Name}, dms.InferType(c.Value), "", false, nil)
		}
		err := us.Commit()
		var tbl *table.Table
		if err == nil {
			tbl, err = txn.Commit(ctx)
		}
		if err == nil {
			w.log.Info("added columns seen in data", zap.Int("columns", len(cols)), zap.Stringer("schema", tbl.Schema()))
			return w.use(tbl)
		}
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("add columns to %s: %w", w.name, err)
		}
		if err := w.reload(ctx); err != nil {
			return err
		}
		if len(w.unknownColumns(ev)) == 0 {
			return nil // another worker added them
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

func (w *writer) reload(ctx context.Context) error {
	tbl, err := w.s.cat.LoadTable(ctx, w.ident)
	if err != nil {
		return fmt.Errorf("reload %s: %w", w.name, err)
	}
	return w.use(tbl)
}

// batch is the deduplicated content of one commit.
type batch struct {
	upserts []int         // indexes into w.rows of the surviving row images
	deletes [][]dms.Datum // keys to delete (every touched key, for upsert semantics)
	maxSeq  map[string]string
	trimmed int
}

// plan drops rows the table already holds and collapses the rest to the last change per key.
func (w *writer) plan() batch {
	l := w.lay
	b := batch{maxSeq: make(map[string]string)}
	if !l.keyed() {
		for i := range w.rows {
			r := &w.rows[i]
			if checkpoint.Covered(l.watermark[r.shard], r.seq) {
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
	}
	last := make(map[string]int, len(w.rows)) // key -> index into states
	var states []state
	set := func(key []dms.Datum, rowIdx int) {
		w.keyBuf = w.keyBuf[:0]
		for ki, i := range l.keyIdx {
			w.keyBuf = dms.AppendKey(w.keyBuf, l.types[i], key[ki])
		}
		if si, ok := last[string(w.keyBuf)]; ok {
			states[si].row = rowIdx
			return
		}
		last[string(w.keyBuf)] = len(states)
		states = append(states, state{row: rowIdx, key: key})
	}
	for i := range w.rows {
		r := &w.rows[i]
		if checkpoint.Covered(l.watermark[r.shard], r.seq) {
			b.trimmed++
			continue
		}
		b.noteSeq(r)
		if r.oldKey != nil {
			set(r.oldKey, -1)
		}
		key := make([]dms.Datum, len(l.keyIdx))
		for ki, ci := range l.keyIdx {
			key[ki] = r.vals[ci]
		}
		if r.del {
			set(key, -1)
		} else {
			set(key, i)
		}
	}
	for _, st := range states {
		b.deletes = append(b.deletes, st.key)
		if st.row >= 0 {
			b.upserts = append(b.upserts, st.row)
		}
	}
	return b
}

func (b *batch) noteSeq(r *row) {
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
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("commit %s: giving up after %d attempts: %w", w.name, attempt+1, err)
		}
		w.log.Warn("commit failed; reloading", zap.Int("attempt", attempt+1), zap.Error(err))
		if rerr := w.reload(ctx); rerr != nil {
			w.log.Warn("reload failed", zap.Error(rerr))
		} else if w.landed(b) {
			w.log.Info("commit outcome was unknown; the table already holds this batch")
			break
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
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
	}
	if b.trimmed > 0 {
		w.s.metrics.Skipped(w.name, b.trimmed)
	}
	fault.Hit(fault.AfterCommit)
	w.release()
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
			for ci, t := range l.types {
				dms.AppendDatum(rb.Field(ci), t, r.vals[ci])
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

func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 9)
	if d > 20*time.Second {
		d = 20 * time.Second
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
