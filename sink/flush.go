package sink

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
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
	// keys are the batch's deleted keys held in memory instead of an equality-delete file (for
	// deletion vectors: memoryKeys); deletes is
	// written from the batch only if no attempt commits them as vectors.
	keys []deletes.Keys
	// moved is the file listing the batch's moves (moved.go), "" when it has none.
	moved string
}

// committer is the commit path of a table writer's rows, and the only caller of the commit
// loop (commit.Run) for them: it writes a batch's data and delete files (deletion vectors in dv
// mode, partial images completed from the table: partial.go), stages them with the watermarks
// in one row delta, ends a reload in that commit when it is due (reload.go), refreshes the
// table first when its commits lost races (contention.go), and advances the complete-through of
// a quiet table (freshen).
type committer struct {
	*tableScope
	st *targetTable
	pl *planner       // the batches come from its buffer, within its limit
	rt *reloadTracker // where a commit goes while a reload is in progress
	dq *deadLetters   // awaited before every commit
	// queued is how many items wait in the writer's queue (a quiet table commits only when none).
	queued func() int
	// maint is the table's maintainer (nil when maintenance is off).
	maint maintainer
	// closing is set once the queue is closed: the final flush of a graceful stop.
	closing bool
	merged  []dms.Datum // writeFiles' scratch: a partial image completed from the table
	// fresh is when the last properties-only freshness commit was made.
	fresh time.Time
	// contended is when a commit of this writer last lost a race (contention.go).
	contended time.Time
	// moved are the key changes committed to the table, read before every attempt (moved.go).
	moved *movedKeys
}

// policy is how the writer's commits are tried: CommitRetries attempts after the first, and
// until the context ends in the final flush of a graceful stop.
func (cm *committer) policy() commit.Policy {
	return commit.Policy{Retries: cm.env.retries, Closing: func() bool { return cm.closing }, AttemptTimeout: cm.env.attemptTimeout}
}

// flushing is one commit of rows in progress: its limit, the batch being committed and the
// files written for it.
type flushing struct {
	cm    *committer
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
	// declined: the last attempt committed equality deletes where the writer writes vectors.
	declined bool
}

// commitRows commits, as one snapshot, the rows within the limit of the flush in progress (or,
// outside a flush, of a commit made now) and then acknowledges them.
func (cm *committer) commitRows(ctx context.Context) error {
	if err := cm.dq.awaitDeadLetters(ctx); err != nil {
		return err
	}
	lim := cm.pl.limitNow()
	if cm.pl.lim != nil {
		lim = *cm.pl.lim
	} else {
		lim.waitFrom = cm.pl.buf.gatedFrom(lim)
	}
	if !cm.pl.buf.within(lim) {
		cm.pl.stick(lim, cm.pl.buf.pending())
		if len(cm.pl.buf.dups) > 0 {
			cm.pl.buf.rebuild() // re-deliveries of rows no longer buffered
		}
		return nil
	}
	cm.pl.unstick()
	start := time.Now()
	if err := cm.refreshIfContended(ctx); err != nil {
		return err
	}
	f := &flushing{cm: cm, lim: lim, token: commit.NewToken()}
	res, err := commit.Run(ctx, cm.env.cat, cm.ident, cm.st.tbl, cm.policy(), commit.Op{
		Name: "commit " + cm.name, Stage: f.stage, Reloaded: f.refreshed, Failed: f.failed,
		Resolved: f.resolved,
		Mine:     func(since, fresh *table.Table) bool { return commit.CommittedBy(since, fresh, f.token) },
	})
	if err != nil {
		return err
	}
	if res.Landed {
		cm.log.Info("the table already holds this batch after a failed attempt (the attempt landed, or another worker committed it)")
	}
	cm.committed(ctx, f, res.Attempts, res.Landed, time.Since(start))
	return nil
}

// stage plans the batch on the writer's newest table and commits it; nil and nil when the
// table already holds everything the batch takes.
func (f *flushing) stage(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
	cm := f.cm
	lim := f.lim
	if cm.st.lay.keyed() {
		if err := cm.moved.update(ctx, cm.st.tbl, time.Now()); err != nil {
			return nil, err
		}
		lim.moved = cm.moved
	}
	nb := cm.rt.plan(&cm.pl.buf, cm.st.lay, lim)
	if f.files == nil || nb.trimmed != f.b.trimmed || nb.superseded != f.b.superseded || nb.provisional != f.b.provisional ||
		nb.overtaken != f.b.overtaken || nb.kept != f.b.kept || len(nb.recreated) != len(f.b.recreated) {
		f.b, f.files = nb, nil
	}
	if f.b.empty() {
		return nil, nil // nothing left that the table does not already hold
	}
	// Partial images keep values read from the snapshot the commit is staged on: read them for
	// new files, and again after a refresh moved the table.
	if len(f.b.lookups) > 0 && (f.files == nil || !f.b.filled || f.b.fillSnap != cm.rt.dataSnapshotID()) {
		changed, err := cm.lookup(ctx, &f.b)
		if err != nil {
			return nil, err
		}
		if changed {
			f.files = nil
		}
	}
	if f.files == nil {
		files, err := cm.writeFiles(ctx, &f.b)
		if err != nil {
			return nil, err
		}
		f.files = files
		fault.Hit(fault.AfterDataFiles)
	}
	if len(f.b.moves)+len(f.b.recreated) > 0 && f.files.moved == "" {
		path, err := cm.moved.write(ctx, cm.st.tbl, f.token, movedContent{moved: f.b.moves, recreated: f.b.recreated})
		if err != nil {
			return nil, fmt.Errorf("write moved keys for %s: %w", cm.name, err)
		}
		f.files.moved = path
	}
	f.reload = cm.rt.reloadFor(&f.b) // on the table this attempt commits on
	vec, declined, err := cm.vectors(ctx, f)
	if err != nil {
		return nil, err
	}
	f.declined = declined
	if vec == nil && len(f.files.keys) > 0 && len(f.files.deletes) == 0 {
		// The keys were kept in memory for vectors, and this attempt commits equality deletes.
		if f.files.deletes, err = cm.writeDeletes(ctx, &f.b); err != nil {
			return nil, err
		}
	}
	f.vectors, f.attemptVectors = vec != nil, nil
	if vec != nil {
		f.attemptVectors = vec.Add
	}
	tbl, removed, err := cm.commitBatch(ctx, &f.b, f.files, vec, f.lim.completeThrough(), f.reload, f.token)
	f.removed = removed
	return tbl, err
}

// vectors asks the table's maintainer for the batch's deletes as deletion vectors on the table
// this attempt commits on (maintenance.Maintainer.Vectors): nil to commit the equality deletes,
// declined when the table's writers write vectors and these deletes could not be (a key with a
// null value, a table partitioned by a column outside its key, a failed plan). Never while a
// reload is in progress (the batch then commits on the reload branch).
func (cm *committer) vectors(ctx context.Context, f *flushing) (*maintenance.WriterVectors, bool, error) {
	if cm.maint == nil || (len(f.files.deletes) == 0 && len(f.files.keys) == 0) || f.reload != nil {
		return nil, false, nil
	}
	if _, ok := cm.rt.reloading(); ok {
		return nil, false, nil
	}
	var vec *maintenance.WriterVectors
	var err error
	if len(f.files.keys) > 0 {
		vec, err = cm.maint.VectorsOfKeys(ctx, cm.st.tbl, cm.deleteIDs(), f.files.keys)
	} else {
		vec, err = cm.maint.Vectors(ctx, cm.st.tbl, f.files.deletes)
	}
	if err != nil {
		// The equality deletes are as right, and the maintainer converts them.
		cm.log.Warn("planning deletion vectors failed; committing equality deletes", zap.Error(err))
		vec = nil
	}
	return vec, vec == nil && cm.maint.WritesVectors(cm.st.tbl), nil
}

// refreshed adopts a table refreshed after a failed attempt and tells whether it already holds the
// batch (the watermarks cover it).
func (f *flushing) refreshed(tbl *table.Table) (bool, error) {
	if err := f.cm.st.use(tbl); err != nil {
		if stateversion.IsRefused(err) {
			return false, err
		}
		f.cm.log.Warn("reload failed", zap.Error(err))
		return false, nil
	}
	return f.b.landedIn(f.cm.st.lay.watermark), nil
}

// resolved counts an attempt whose outcome was unknown, resolved by the refresh after it.
func (f *flushing) resolved(o commit.Outcome) {
	f.cm.env.metrics.CommitUnknown(f.cm.name, string(o))
	f.cm.log.Info("commit outcome was unknown; resolved", zap.String("resolution", string(o)))
}

func (f *flushing) failed(attempt int, err, refreshErr error) {
	if len(f.attemptVectors) > 0 && !commit.UnknownOutcome(err) {
		// Refused, or never sent: the attempt's vectors are referenced by nothing (the next
		// attempt plans its own). After an unknown outcome orphan cleanup removes them.
		f.cm.removeUnreferenced(context.Background(), f.attemptVectors)
	}
	f.attemptVectors = nil
	f.cm.env.metrics.CommitFailed(f.cm.name)
	f.cm.log.Warn("commit failed", zap.Int("attempt", attempt+1), zap.Error(err))
	if refreshErr != nil {
		f.cm.log.Warn("reload failed", zap.Error(refreshErr))
	}
}

// committed reports a commit that ended, acknowledges the rows it took and runs the maintenance
// commit handed to the writer.
func (cm *committer) committed(ctx context.Context, f *flushing, attempts int, landed bool, took time.Duration) {
	b := &f.b
	if !b.empty() {
		info := CommitInfo{Table: cm.name, Source: cm.src, SnapshotID: snapshotID(cm.st.tbl),
			Rows: len(b.upserts), Deletes: len(b.deletes), Trimmed: b.trimmed, Attempts: attempts, Vectors: f.vectors, VectorsDeclined: f.declined,
			Took: took, Oldest: cm.pl.buf.first, Watermarks: maps.Clone(cm.st.lay.watermark),
			CompleteThrough: f.lim.completeThrough(), SourceNewest: cm.pl.buf.newestSource(b)}
		cm.env.metrics.Committed(info)
		cm.env.onCommit(info)
		if attempts > 1 {
			cm.contended = time.Now()
		}
		cm.log.Info("committed", zap.Int("rows", len(b.upserts)), zap.Int("deletes", len(b.deletes)),
			zap.Int("trimmed", b.trimmed), zap.Int64("snapshot", info.SnapshotID), zap.Int("attempts", attempts),
			zap.Duration("took", took))
		cm.logPartial(b)
	}
	if b.trimmed > 0 {
		cm.env.metrics.Skipped(cm.name, b.trimmed)
	}
	if b.superseded > 0 {
		cm.env.metrics.Skipped(cm.name, b.superseded)
		cm.log.Info("reload: changes built before its create-table arrived after it started; its load rows already reflect them, so they are not written",
			zap.Int("superseded", b.superseded))
	}
	if rs := f.reload; rs != nil && !b.empty() {
		switch {
		case rs.end:
			cm.rt.reloadEnded(rs, f.removed, "first change after the load")
		case rs.loads > 0:
			cm.rt.loaded = time.Now()
		}
	}
	if f.vectors && !landed {
		cm.removeUnreferenced(ctx, f.files.deletes)
	}
	fault.Hit(fault.AfterCommit)
	cm.pl.buf.release(b)
	// Maintenance handed to the writer runs after the acknowledgements, so it never delays a
	// checkpoint, and not at all in the final flush of a graceful stop.
	if !b.empty() && !cm.closing && cm.maint != nil {
		cm.maint.AfterCommit(ctx, cm.st.tbl, cm.st.use)
	}
}

// removeUnreferenced deletes files no commit references: the equality-delete files of a batch
// committed as deletion vectors, the vectors of a refused attempt. It is not retried: orphan
// cleanup removes what it leaves (and the files of an attempt whose outcome was unknown).
func (cm *committer) removeUnreferenced(ctx context.Context, files []iceberg.DataFile) {
	fs, err := cm.st.tbl.FS(ctx)
	if err != nil {
		return
	}
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// writeFiles writes the data and equality-delete files of a batch (nothing is committed).
func (cm *committer) writeFiles(ctx context.Context, b *batch) (*staged, error) {
	// The Arrow batch, Parquet pages and compressors of a flush are built here and released
	// after it; a few writers at a time build them, so that what they take does not grow with
	// the number of tables flushing at once (design.md §8).
	if cm.env.fileSlots != nil {
		select {
		case cm.env.fileSlots <- struct{}{}:
			defer func() { <-cm.env.fileSlots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l := cm.st.lay
	out := &staged{}
	mem := cm.env.allocator()
	if len(b.upserts) > 0 {
		rb := array.NewRecordBuilder(mem, l.arrow)
		rb.Reserve(len(b.upserts)) // sized once, not grown (and copied) while appending
		reserveText(rb, &cm.pl.buf.rows, b.upserts)
		for _, ri := range b.upserts {
			r := cm.pl.buf.rows.at(ri)
			vals := r.vals
			if len(r.absent) > 0 {
				vals = cm.completed(r, b.fill[ri])
			}
			for ci, t := range l.types {
				dms.AppendDatum(rb.Field(ci), t, vals[ci])
			}
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		for df, err := range table.WriteRecords(ctx, cm.st.tbl, l.arrow, single(rec)) {
			if err != nil {
				return nil, fmt.Errorf("write data files for %s: %w", cm.name, err)
			}
			out.data = append(out.data, df)
		}
	}
	if keys := cm.memoryKeys(b); keys != nil {
		out.keys = keys
	} else if len(b.deletes) > 0 {
		files, err := cm.writeDeletes(ctx, b)
		if err != nil {
			return nil, err
		}
		out.deletes = files
	}
	return out, nil
}

// memoryKeys returns the batch's deleted keys for deletion vectors planned from memory, nil when
// the batch writes an equality-delete file: vectors may be planned from memory with a
// maintainer and no reload in progress, for a key the planner encodes (deletes.Keyed: the key
// columns, or a keyless table's record identity) with no null value, on a table partitioned by
// key columns only (deletes.PartitionedByKey: a key's rows lie in one partition, so its deletes
// need no partition). The maintainer decides at each attempt whether it plans them;
// writeDeletes then follows.
func (cm *committer) memoryKeys(b *batch) []deletes.Keys {
	ids := cm.deleteIDs()
	if len(b.deletes) == 0 || cm.maint == nil || !deletes.Keyed(cm.st.lay.schema, ids) ||
		!deletes.PartitionedByKey(cm.st.tbl.Metadata(), ids) {
		return nil
	}
	if _, ok := cm.rt.reloading(); ok {
		return nil
	}
	if deletes.IntKeyed(cm.st.lay.schema, ids) {
		vals := make([]int64, len(b.deletes))
		for i, key := range b.deletes {
			if key[0].Null {
				return nil
			}
			vals[i] = key[0].I
		}
		return []deletes.Keys{{Values: vals}}
	}
	for _, key := range b.deletes {
		for _, d := range key {
			if d.Null {
				return nil // an equality delete matches null keys; a probe never does
			}
		}
	}
	return []deletes.Keys{{Tuples: b.deletes}}
}

// deleteIDs are the field ids of the columns the batch's deletes are keyed by: the key columns;
// in a keyless table the record identity (identity.go).
func (cm *committer) deleteIDs() []int {
	if l := cm.st.lay; !l.keyed() {
		return []int{l.idID}
	}
	return cm.st.lay.keyIDs
}

// writeDeletes writes the equality-delete files of a batch: by key; in a keyless table by the
// DMS record identity (identity.go).
func (cm *committer) writeDeletes(ctx context.Context, b *batch) ([]iceberg.DataFile, error) {
	l := cm.st.lay
	cols, ids, sc := l.keyIdx, l.keyIDs, l.keyArrow
	if !l.keyed() {
		cols, ids, sc = []int{l.idIdx}, []int{l.idID}, l.idArrow
	}
	rb := array.NewRecordBuilder(cm.env.allocator(), sc)
	rb.Reserve(len(b.deletes))
	for _, key := range b.deletes {
		for ki, ci := range cols {
			dms.AppendDatum(rb.Field(ki), l.types[ci], key[ki])
		}
	}
	rec := rb.NewRecordBatch()
	rb.Release()
	files, err := cm.st.tbl.NewTransaction().WriteEqualityDeletes(ctx, ids, single(rec))
	rec.Release() // WriteEqualityDeletes does not release its input
	if err != nil {
		return nil, fmt.Errorf("write equality deletes for %s: %w", cm.name, err)
	}
	return files, nil
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
func (cm *committer) commitBatch(ctx context.Context, b *batch, f *staged, vec *maintenance.WriterVectors, through time.Time, rs *reloadStage, token string) (*table.Table, int, error) {
	props := tableprop.Stamp(iceberg.Properties{}, cm.st.tbl.Properties())
	summary := iceberg.Properties{tableprop.SummaryRows: strconv.Itoa(len(b.upserts)), tableprop.SummaryDeletes: strconv.Itoa(len(b.deletes)),
		tableprop.SummaryCommit: token}
	if v, ok := completeThroughProp(cm.st.tbl.Properties(), through); ok {
		props[tableprop.CompleteThrough] = v
		summary[tableprop.CompleteThrough] = v
	}
	for shard, seq := range b.maxSeq {
		if change.CompareSeq(seq, cm.st.lay.watermark[shard]) > 0 {
			k := tableprop.Watermark(cm.env.stream, shard)
			props[k] = seq
			summary[k] = seq
		}
	}
	txn := cm.rt.dataTxn() // on the reload branch while a reload is in progress
	if b.superseded > 0 {
		summary[tableprop.SummarySuperseded] = strconv.Itoa(b.superseded)
	}
	if f.moved != "" {
		summary[tableprop.SummaryMoved] = f.moved
	}
	if b.overtaken > 0 {
		summary[tableprop.SummaryOvertaken] = strconv.Itoa(b.overtaken)
	}
	if b.provisional > 0 {
		summary[tableprop.SummaryProvisional] = strconv.Itoa(b.provisional)
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
		if removed, err = cm.rt.stageReload(ctx, txn, rs, props); err != nil {
			return nil, 0, err
		}
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, 0, fmt.Errorf("stage watermarks: %w", err)
		}
	}
	if cm.st.tbl.Properties()[table.CommitNumRetriesKey] == "0" {
		// Tables created by earlier versions carry commit.retry.num-retries=0, which also took
		// Spark's and Glue's commit retries away; iceberg-go does not retry without it.
		if err := txn.RemoveProperties([]string{table.CommitNumRetriesKey}); err != nil {
			return nil, 0, fmt.Errorf("stage removal of %s: %w", table.CommitNumRetriesKey, err)
		}
	}
	do := txn.Commit
	if rs != nil && rs.end {
		do = func(ctx context.Context) (*table.Table, error) { return cm.rt.publishReload(ctx, txn) }
	}
	tbl, err := do(ctx)
	if err != nil {
		return nil, 0, commit.Sent(err) // it may have landed: the refresh tells
	}
	return tbl, removed, cm.st.adopt(tbl)
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
func (cm *committer) freshen(ctx context.Context) error {
	lim := cm.pl.limitNow() // read before looking at the queue: what arrived before it is queued
	if lim.through.IsZero() || !cm.st.loaded() || cm.st.status != tableprop.StatusActive ||
		cm.pl.buf.pending() || cm.queued() > 0 || time.Since(cm.fresh) < cm.set.freshness/2 {
		return nil
	}
	if lim.through.Sub(completeThrough(cm.st.tbl.Properties())) <= cm.set.freshness {
		return nil
	}
	if err := cm.dq.awaitDeadLetters(ctx); err != nil {
		return err
	}
	cm.fresh = time.Now()
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		v, ok := completeThroughProp(cm.st.tbl.Properties(), lim.through)
		if !ok {
			return nil, nil
		}
		txn := cm.st.tbl.NewTransaction()
		if err := txn.SetProperties(tableprop.Stamp(iceberg.Properties{tableprop.CompleteThrough: v}, cm.st.tbl.Properties())); err != nil {
			return nil, fmt.Errorf("stage %s: %w", tableprop.CompleteThrough, err)
		}
		tbl, err := txn.Commit(ctx)
		if err != nil {
			return nil, err
		}
		return tbl, cm.st.adopt(tbl)
	}
	_, err := commit.Run(ctx, cm.env.cat, cm.ident, cm.st.tbl, cm.policy(), commit.Op{
		Name: "advance complete-through of " + cm.name, Stage: stage,
		Reloaded: cm.st.refreshedUse(func() bool { return !completeThrough(cm.st.tbl.Properties()).Before(lim.through) }),
	})
	if err == nil {
		cm.env.metrics.Fresh(cm.name, completeThrough(cm.st.tbl.Properties()))
	}
	return err
}

// reloadQuiet ends a reload after the quiet period (sink.reload_quiet_period) when no CDC change
// of the table followed its load rows (reloadTracker.quietEnd): one commit replaces the table's
// content and publishes the reload branch.
func (cm *committer) reloadQuiet(ctx context.Context) error {
	m, ok := cm.rt.quietEnd(!cm.pl.buf.pending() && cm.queued() == 0 && cm.st.status == tableprop.StatusActive)
	if !ok {
		return nil
	}
	if err := cm.dq.awaitDeadLetters(ctx); err != nil {
		return err
	}
	var rs *reloadStage
	removed := 0
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		m, ok := cm.rt.reloading()
		if !ok || m.rows == 0 {
			rs = nil
			return nil, nil // ended or restarted meanwhile
		}
		rs = &reloadStage{mark: m, end: true, replace: true}
		props := tableprop.Stamp(iceberg.Properties{}, cm.st.tbl.Properties())
		txn := cm.rt.dataTxn()
		var err error
		if removed, err = cm.rt.stageReload(ctx, txn, rs, props); err != nil {
			return nil, err
		}
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("stage properties: %w", err)
		}
		tbl, err := cm.rt.publishReload(ctx, txn)
		if err != nil {
			return nil, err
		}
		return tbl, cm.st.adopt(tbl)
	}
	res, err := commit.Run(ctx, cm.env.cat, cm.ident, cm.st.tbl, cm.policy(), commit.Op{
		Name: "replace " + cm.name + " after its reload", Stage: stage,
		// Done when the refreshed table has no reload in progress any more, or another one.
		Reloaded: cm.st.refreshedUse(func() bool {
			n, ok := cm.rt.reloading()
			return !ok || n.before != m.before
		}),
	})
	if err != nil {
		return err
	}
	if res.Table != nil && rs != nil {
		cm.rt.reloadEnded(rs, removed, "quiet period")
	}
	cm.rt.reportReload()
	return nil
}
