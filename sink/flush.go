package sink

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The commit path of a table writer: the buffer's batch becomes data and equality-delete files
// and one row delta that also advances the watermarks, committed through commit.Run.

// staged holds the files written for a batch, reusable across commit attempts while the batch
// does not change.
type staged struct {
	data    []iceberg.DataFile
	deletes []iceberg.DataFile
}

// policy is how the writer's commits are tried: CommitRetries attempts after the first, and
// until the context ends in the final flush of a graceful stop.
func (w *writer) policy() commit.Policy {
	return commit.Policy{Retries: w.env.retries, Closing: func() bool { return w.closing }, AttemptTimeout: w.env.attemptTimeout}
}

// flushing is one commit of rows in progress: its limit, the batch being committed and the
// files written for it.
type flushing struct {
	w     *writer
	lim   limit
	b     batch
	files *staged
	// reload is what the commit does about a reload in progress (nil: none), removed the number
	// of files its replace removed.
	reload  *reloadStage
	removed int
	// token marks the batch's snapshot (tableprop.SummaryCommit), to tell after an unknown
	// outcome whether this commit landed or another worker's.
	token string
	// vectors: the last attempt committed the batch's deletes as deletion vectors (the
	// maintainer's WriterVectors), so its equality-delete files are referenced by nothing;
	// attemptVectors are the files of those vectors, removed if the attempt is refused.
	vectors        bool
	attemptVectors []iceberg.DataFile
}

// flush commits what may commit now. Guarded (ordering arrival with a commit bound), that is per
// shard the changes that arrived at or before the bound, in arrival order with the held events:
// the rows before the first held control record commit, the control record applies, and so on;
// a held data record is converted when its turn comes (creating its table from the record only
// if by then no table-def created it). What arrived after the bound stays buffered, with its
// acknowledgements, for a later flush; the final flush of a graceful stop too never commits past
// the bound. Without the guard everything buffered commits.
func (w *writer) flush(ctx context.Context) (err error) {
	if err := w.awaitDeadLetters(ctx); err != nil {
		return err
	}
	lim := w.limitNow()
	w.lim = &lim
	defer func() { w.lim = nil }()
	if w.guarded() {
		// Everything handed to the sink before the bound was read is in the queue or taken in:
		// take it in, so a commit complete through the bound holds it.
		var replies []chan error
		replies, err = w.drainQueue(ctx)
		defer func() {
			if len(replies) > 0 {
				w.publish() // before the replies: a caller of Flush sees what it left
			}
			for _, r := range replies {
				r <- err
			}
		}()
		if err != nil {
			return err
		}
	}
	if !w.buf.pending() {
		return nil
	}
	// What the gates hold back stays held back for the whole flush (its limit is fixed), and a
	// held data record that becomes due is admitted, so this is computed once.
	lim.waitFrom = w.buf.gatedFrom(lim)
	var sc dueScan
	for i := w.buf.dueFrom(lim, &sc); i >= 0; i = w.buf.dueFrom(lim, &sc) {
		hd := w.buf.pop(i)
		lim.cut = &hd
		if hd.ctl {
			if err := w.commitRows(ctx); err != nil {
				return err
			}
		}
		if err := w.take(ctx, hd.ev, hd.at, true); err != nil {
			return err
		}
	}
	// A control record still held (past the bound, or waiting for the gates) is a barrier:
	// the rows that arrived after it wait with it.
	lim.cut = w.buf.firstCtl()
	if err := w.commitRows(ctx); err != nil {
		return err
	}
	w.logGated(lim)
	if w.buf.pending() {
		w.buf.first = w.buf.now() // what stays waits another flush interval
		if w.guarded() {
			// ... or until the bound or a gate moves (run).
			w.stuck, w.stuckSet = lim.gates(), true
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

// commitRows commits, as one snapshot, the rows within the limit of the flush in progress (or,
// outside a flush, of a commit made now) and then acknowledges them.
func (w *writer) commitRows(ctx context.Context) error {
	if err := w.awaitDeadLetters(ctx); err != nil {
		return err
	}
	lim := w.limitNow()
	if w.lim != nil {
		lim = *w.lim
	} else {
		lim.waitFrom = w.buf.gatedFrom(lim)
	}
	if !w.buf.within(lim) {
		w.stuck, w.stuckSet = lim.gates(), w.buf.pending()
		if len(w.buf.dups) > 0 {
			w.buf.rebuild() // re-deliveries of rows no longer buffered
		}
		return nil
	}
	w.stuckSet = false
	start := time.Now()
	if err := w.refreshIfContended(ctx); err != nil {
		return err
	}
	f := &flushing{w: w, lim: lim, token: commit.NewToken()}
	res, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
		Name: "commit " + w.name, Stage: f.stage, Reloaded: f.reloaded, Failed: f.failed,
		Resolved: f.resolved,
		Mine:     func(since, fresh *table.Table) bool { return commit.CommittedBy(since, fresh, f.token) },
	})
	if err != nil {
		return err
	}
	if res.Landed {
		w.log.Info("the table already holds this batch after a failed attempt (the attempt landed, or another worker committed it)")
	}
	w.committed(ctx, f, res.Attempts, res.Landed, time.Since(start))
	return nil
}

// stage plans the batch on the writer's newest table and commits it; nil and nil when the
// table already holds everything the batch takes.
func (f *flushing) stage(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
	w := f.w
	lim := f.lim
	if m, ok := w.reloading(); ok && w.set.reloadReplace {
		lim.supersede = m.started
	}
	nb := w.buf.plan(w.st.lay, lim)
	if f.files == nil || nb.trimmed != f.b.trimmed || nb.superseded != f.b.superseded {
		f.b, f.files = nb, nil
	}
	if f.b.empty() {
		return nil, nil // nothing left that the table does not already hold
	}
	// Partial images keep values read from the snapshot the commit is staged on: read them for
	// new files, and again after a reload moved the table.
	if len(f.b.lookups) > 0 && (f.files == nil || !f.b.filled || f.b.fillSnap != w.dataSnapshotID()) {
		changed, err := w.lookup(ctx, &f.b)
		if err != nil {
			return nil, err
		}
		if changed {
			f.files = nil
		}
	}
	if f.files == nil {
		files, err := w.writeFiles(ctx, &f.b)
		if err != nil {
			return nil, err
		}
		f.files = files
		fault.Hit(fault.AfterDataFiles)
	}
	f.reload = w.reloadFor(&f.b) // on the table this attempt commits on
	vec, err := w.vectors(ctx, f)
	if err != nil {
		return nil, err
	}
	f.vectors, f.attemptVectors = vec != nil, nil
	if vec != nil {
		f.attemptVectors = vec.Add
	}
	tbl, removed, err := w.commitBatch(ctx, &f.b, f.files, vec, f.lim.completeThrough(), f.reload, f.token)
	f.removed = removed
	return tbl, err
}

// vectors asks the table's maintainer for the batch's deletes as deletion vectors on the table
// this attempt commits on (maintenance.Maintainer.Vectors): nil to commit the equality deletes.
// Never while a reload is in progress (the batch then commits on the reload branch).
func (w *writer) vectors(ctx context.Context, f *flushing) (*maintenance.WriterVectors, error) {
	if w.maint == nil || len(f.files.deletes) == 0 || f.reload != nil {
		return nil, nil
	}
	if _, ok := w.reloading(); ok {
		return nil, nil
	}
	vec, err := w.maint.Vectors(ctx, w.st.tbl, f.files.deletes)
	if err != nil {
		// The equality deletes are as right, and the maintainer converts them.
		w.log.Warn("planning deletion vectors failed; committing equality deletes", zap.Error(err))
		return nil, nil
	}
	return vec, nil
}

// reloaded adopts a table reloaded after a failed attempt and tells whether it already holds the
// batch (the watermarks cover it).
func (f *flushing) reloaded(tbl *table.Table) (bool, error) {
	if err := f.w.use(tbl); err != nil {
		if stateversion.IsRefused(err) {
			return false, err
		}
		f.w.log.Warn("reload failed", zap.Error(err))
		return false, nil
	}
	return f.b.landedIn(f.w.st.lay.watermark), nil
}

// resolved counts an attempt whose outcome was unknown, resolved by the reload after it.
func (f *flushing) resolved(o commit.Outcome) {
	f.w.env.metrics.CommitUnknown(f.w.name, string(o))
	f.w.log.Info("commit outcome was unknown; resolved", zap.String("resolution", string(o)))
}

func (f *flushing) failed(attempt int, err, reloadErr error) {
	if len(f.attemptVectors) > 0 && !commit.UnknownOutcome(err) {
		// Refused, or never sent: the attempt's vectors are referenced by nothing (the next
		// attempt plans its own). After an unknown outcome orphan cleanup removes them.
		f.w.removeUnreferenced(context.Background(), f.attemptVectors)
	}
	f.attemptVectors = nil
	f.w.env.metrics.CommitFailed(f.w.name)
	f.w.log.Warn("commit failed", zap.Int("attempt", attempt+1), zap.Error(err))
	if reloadErr != nil {
		f.w.log.Warn("reload failed", zap.Error(reloadErr))
	}
}

// committed reports a commit that ended, acknowledges the rows it took and runs the maintenance
// commit handed to the writer.
func (w *writer) committed(ctx context.Context, f *flushing, attempts int, landed bool, took time.Duration) {
	b := &f.b
	if !b.empty() {
		info := CommitInfo{Table: w.name, Source: w.src, SnapshotID: snapshotID(w.st.tbl),
			Rows: len(b.upserts), Deletes: len(b.deletes), Trimmed: b.trimmed, Attempts: attempts, Vectors: f.vectors,
			Took: took, Oldest: w.buf.first, Watermarks: maps.Clone(w.st.lay.watermark),
			CompleteThrough: f.lim.completeThrough(), SourceNewest: w.buf.newestSource(b)}
		w.env.metrics.Committed(info)
		w.env.onCommit(info)
		if attempts > 1 {
			w.contended = time.Now()
		}
		w.log.Info("committed", zap.Int("rows", len(b.upserts)), zap.Int("deletes", len(b.deletes)),
			zap.Int("trimmed", b.trimmed), zap.Int64("snapshot", info.SnapshotID), zap.Int("attempts", attempts),
			zap.Duration("took", took))
		w.logPartial(b)
	}
	if b.trimmed > 0 {
		w.env.metrics.Skipped(w.name, b.trimmed)
	}
	if b.superseded > 0 {
		w.env.metrics.Skipped(w.name, b.superseded)
		w.log.Info("reload: changes built before its create-table arrived after it started; its load rows already reflect them, so they are not written",
			zap.Int("superseded", b.superseded))
	}
	if rs := f.reload; rs != nil && !b.empty() {
		switch {
		case rs.end:
			w.reloadEnded(rs, f.removed, "first change after the load")
		case rs.loads > 0:
			w.reloadLoaded = time.Now()
		}
	}
	if f.vectors && !landed {
		w.removeUnreferenced(ctx, f.files.deletes)
	}
	fault.Hit(fault.AfterCommit)
	w.buf.release(b)
	// Maintenance handed to the writer runs after the acknowledgements, so it never delays a
	// checkpoint, and not at all in the final flush of a graceful stop.
	if !b.empty() && !w.closing && w.maint != nil {
		w.maint.AfterCommit(ctx, w.st.tbl, w.use)
	}
}

// removeUnreferenced deletes files no commit references: the equality-delete files of a batch
// committed as deletion vectors, the vectors of a refused attempt. It is not retried: orphan
// cleanup removes what it leaves (and the files of an attempt whose outcome was unknown).
func (w *writer) removeUnreferenced(ctx context.Context, files []iceberg.DataFile) {
	fs, err := w.st.tbl.FS(ctx)
	if err != nil {
		return
	}
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// writeFiles writes the data and equality-delete files of a batch (nothing is committed).
func (w *writer) writeFiles(ctx context.Context, b *batch) (*staged, error) {
	// The Arrow batch, Parquet pages and compressors of a flush are built here and released
	// after it; a few writers at a time build them, so that what they take does not grow with
	// the number of tables flushing at once (design.md §8).
	if w.env.fileSlots != nil {
		select {
		case w.env.fileSlots <- struct{}{}:
			defer func() { <-w.env.fileSlots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l := w.st.lay
	out := &staged{}
	mem := memory.DefaultAllocator
	if len(b.upserts) > 0 {
		rb := array.NewRecordBuilder(mem, l.arrow)
		rb.Reserve(len(b.upserts)) // sized once, not grown (and copied) while appending
		reserveText(rb, &w.buf.rows, b.upserts)
		for _, ri := range b.upserts {
			r := w.buf.rows.at(ri)
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
		for df, err := range table.WriteRecords(ctx, w.st.tbl, l.arrow, single(rec)) {
			if err != nil {
				return nil, fmt.Errorf("write data files for %s: %w", w.name, err)
			}
			out.data = append(out.data, df)
		}
	}
	if len(b.deletes) > 0 {
		// By key; in a keyless table by the DMS record identity (identity.go).
		cols, ids, sc := l.keyIdx, l.keyIDs, l.keyArrow
		if !l.keyed() {
			cols, ids, sc = []int{l.idIdx}, []int{l.idID}, l.idArrow
		}
		rb := array.NewRecordBuilder(mem, sc)
		rb.Reserve(len(b.deletes))
		for _, key := range b.deletes {
			for ki, ci := range cols {
				dms.AppendDatum(rb.Field(ki), l.types[ci], key[ki])
			}
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		files, err := w.st.tbl.NewTransaction().WriteEqualityDeletes(ctx, ids, single(rec))
		rec.Release() // WriteEqualityDeletes does not release its input
		if err != nil {
			return nil, fmt.Errorf("write equality deletes for %s: %w", w.name, err)
		}
		out.deletes = files
	}
	return out, nil
}

// reserveText sizes the data buffers of rb's string and binary builders for the values of the
// rows at idx, so that appending them does not grow (and copy) the buffers step by step.
func reserveText(rb *array.RecordBuilder, rows *rowList, idx []int) {
	for ci, f := range rb.Fields() {
		rd, ok := f.(interface{ ReserveData(int) })
		if !ok {
			continue
		}
		n := 0
		for _, ri := range idx {
			n += len(rows.at(ri).vals[ci].S)
		}
		rd.ReserveData(n)
	}
}

// commitBatch stages the files, the advanced watermarks and what the batch is complete through
// in one transaction on the current table, commits it and adopts the committed table.
func (w *writer) commitBatch(ctx context.Context, b *batch, f *staged, vec *maintenance.WriterVectors, through time.Time, rs *reloadStage, token string) (*table.Table, int, error) {
	props := tableprop.Stamp(iceberg.Properties{}, w.st.tbl.Properties())
	summary := iceberg.Properties{tableprop.SummaryRows: strconv.Itoa(len(b.upserts)), tableprop.SummaryDeletes: strconv.Itoa(len(b.deletes)),
		tableprop.SummaryCommit: token}
	if v, ok := completeThroughProp(w.st.tbl.Properties(), through); ok {
		props[tableprop.CompleteThrough] = v
		summary[tableprop.CompleteThrough] = v
	}
	for shard, seq := range b.maxSeq {
		if change.CompareSeq(seq, w.st.lay.watermark[shard]) > 0 {
			k := tableprop.Watermark(w.env.stream, shard)
			props[k] = seq
			summary[k] = seq
		}
	}
	txn := w.dataTxn() // on the reload branch while a reload is in progress
	if b.superseded > 0 {
		summary[tableprop.SummarySuperseded] = strconv.Itoa(b.superseded)
	}
	deletes := f.deletes
	if vec != nil {
		deletes = vec.Add
		summary[tableprop.SummaryVectors] = strconv.FormatInt(vec.Positions, 10)
	}
	if len(f.data)+len(deletes) > 0 {
		rd := txn.NewRowDelta(summary)
		rd.AddRows(f.data...)
		rd.AddDeletes(deletes...)
		if vec != nil && len(vec.Remove) > 0 {
			rd.RemoveDeletes(vec.Remove...)
		}
		if err := rd.Commit(ctx); err != nil {
			return nil, 0, fmt.Errorf("stage row delta: %w", err)
		}
	} // else only superseded changes: their watermarks alone
	removed := 0
	if rs != nil {
		// A reload in progress: count its load rows, or end it in this commit (the replacing
		// snapshot follows the batch's in the same catalog commit).
		var err error
		if removed, err = w.stageReload(ctx, txn, rs, props); err != nil {
			return nil, 0, err
		}
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, 0, fmt.Errorf("stage watermarks: %w", err)
		}
	}
	if w.st.tbl.Properties()[table.CommitNumRetriesKey] == "0" {
		// Tables created by earlier versions carry commit.retry.num-retries=0, which also took
		// Spark's and Glue's commit retries away; iceberg-go does not retry without it.
		if err := txn.RemoveProperties([]string{table.CommitNumRetriesKey}); err != nil {
			return nil, 0, fmt.Errorf("stage removal of %s: %w", table.CommitNumRetriesKey, err)
		}
	}
	do := txn.Commit
	if rs != nil && rs.end {
		do = func(ctx context.Context) (*table.Table, error) { return w.publishReload(ctx, txn) }
	}
	tbl, err := do(ctx)
	if err != nil {
		return nil, 0, commit.Sent(err) // it may have landed: the reload tells
	}
	return tbl, removed, w.adopt(tbl)
}

// adopt uses a table the writer just committed (detached from the commit's transaction, which
// it would otherwise keep alive with every earlier version: commit.Detach). Its failure is not
// retried: the commit landed, and a layout that cannot be built from the table will not be built
// on another attempt.
func (w *writer) adopt(tbl *table.Table) error {
	return commit.Permanent(w.use(commit.Detach(tbl, w.env.cat, w.fsF)))
}

// completeThroughProp is the value of tableprop.CompleteThrough for through when it advances the
// table's (never backwards: another worker may have committed a later bound).
func completeThroughProp(props iceberg.Properties, through time.Time) (string, bool) {
	if through.IsZero() || !through.After(completeThrough(props)) {
		return "", false
	}
	return through.UTC().Format(tableprop.CompleteThroughLayout), true
}

// completeThrough reads tableprop.CompleteThrough; zero when absent or unreadable.
func completeThrough(props iceberg.Properties) time.Time {
	t, _ := tableprop.ParseCompleteThrough(props[tableprop.CompleteThrough])
	return t
}

// freshen advances the complete-through of a quiet table: nothing buffered or queued, and the
// property lags the bound by more than sink.freshness_interval. A properties-only commit, made
// on the freshness ticker (one per interval; the half-interval check only absorbs tick jitter).
func (w *writer) freshen(ctx context.Context) error {
	lim := w.limitNow() // read before looking at the queue: what arrived before it is queued
	if lim.through.IsZero() || !w.st.loaded() || w.st.status != tableprop.StatusActive ||
		w.buf.pending() || len(w.in) > 0 || time.Since(w.fresh) < w.set.freshness/2 {
		return nil
	}
	if lim.through.Sub(completeThrough(w.st.tbl.Properties())) <= w.set.freshness {
		return nil
	}
	if err := w.awaitDeadLetters(ctx); err != nil {
		return err
	}
	w.fresh = time.Now()
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		v, ok := completeThroughProp(w.st.tbl.Properties(), lim.through)
		if !ok {
			return nil, nil
		}
		txn := w.st.tbl.NewTransaction()
		if err := txn.SetProperties(tableprop.Stamp(iceberg.Properties{tableprop.CompleteThrough: v}, w.st.tbl.Properties())); err != nil {
			return nil, fmt.Errorf("stage %s: %w", tableprop.CompleteThrough, err)
		}
		tbl, err := txn.Commit(ctx)
		if err != nil {
			return nil, err
		}
		return tbl, w.adopt(tbl)
	}
	_, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
		Name: "advance complete-through of " + w.name, Stage: stage,
		Reloaded: w.reloadedUse(func() bool { return !completeThrough(w.st.tbl.Properties()).Before(lim.through) }),
	})
	if err == nil {
		w.env.metrics.Fresh(w.name, completeThrough(w.st.tbl.Properties()))
	}
	return err
}

// logGated logs, at most once per 30 s per table, what the cross-process gates still hold back
// after a flush: the first such row or held record and the gates.
func (w *writer) logGated(lim limit) {
	if !w.guarded() || time.Since(w.gatedLogged) < 30*time.Second {
		return
	}
	from := w.buf.gatedFrom(lim)
	if from == 0 {
		return
	}
	w.gatedLogged = time.Now()
	n := 0
	var first string
	for i := range w.buf.rows.len() {
		r := w.buf.rows.at(i)
		if r.at <= lim.bound && !lim.admits(r.at, r.kind, &r.src.SourcePos) {
			if n == 0 {
				first = fmt.Sprintf("row %s/%s at %d kind %d pos %+v", r.shard, r.seq, r.at, r.kind, r.src.SourcePos)
			}
			n++
		}
	}
	for i := range w.buf.held {
		h := &w.buf.held[i]
		pos := change.SourcePosOf(h.ev)
		if !h.ctl && h.at <= lim.bound && !lim.admits(h.at, gateKindOf(h.ev), &pos) {
			if n == 0 {
				first = fmt.Sprintf("held %s/%s at %d kind %d pos %+v", h.ev.Pos.Shard, h.ev.Pos.Seq, h.at, gateKindOf(h.ev), pos)
			}
			n++
		}
	}
	w.log.Info("ordering guard: changes wait for older changes another worker has not committed",
		zap.Int("waiting", n), zap.String("first", first), zap.Int64("bound", lim.bound),
		zap.Int64("load_gate", lim.loadGate), zap.Int64("control_gate", lim.ctlGate),
		zap.Int64("change_gate", lim.chGate), zap.String("change_gate_pos", lim.chPos.Encode()),
		zap.Int("rows", w.buf.rows.len()), zap.Int("held", len(w.buf.held)))
}
