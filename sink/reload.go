package sink

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Reloads (design.md §12 "Reload"). DMS reloads a table ("Reload table data", a task restarted
// with full load) by sending a create-table control record, then every row the table holds as
// load records, then the changes it cached meanwhile (dms-format.md §8.1: cached changes for a
// table are applied after its full load). It sends no delete for a row that disappeared at the
// source while the table was out of sync. The rule:
//
//   - Start: a create-table whose metadata.timestamp is strictly newer than the table's
//     control-timestamp (a previous create-table was applied) on a table that has a snapshot,
//     with ordering arrival and sink.reload replace. Its commit (the schema plan, or a
//     properties-only commit) records, with its watermark, tableprop.ReloadBefore: the table's
//     last sequence number. Every file at or below it is the table before the reload.
//   - Load: load rows commit as always (upserts with their watermarks, exactly once); each
//     commit adds its load rows to tableprop.ReloadRows. Readers keep every row the table had;
//     re-sent rows show their reloaded values.
//   - End: the first commit that takes a CDC change of the table (in arrival order, after its
//     load rows: the ordering guard and its load gate put every older load row of every worker
//     first), or, when none follows, a quiet period with nothing buffered. If load rows were
//     committed since the start, the same catalog commit removes every data and delete file at
//     or below ReloadBefore (the rows not re-sent, and the old copies of the re-sent ones,
//     which the load's equality deletes hid already): one snapshot with the summary
//     dms2iceberg.reload=replace. Without load rows (a task resumed without full load sends a
//     create-table and then changes) the reload is cancelled and nothing is removed.
//
// The correctness of the replace does not depend on when it happens: every row of the reload is
// committed above ReloadBefore, before or after it, and nothing else is committed above it
// before the end (a create-table waits for older data of its table on other workers, as a
// truncate does), so what the replace removes is exactly what the table held before the reload.
// Crashes are harmless: the marker, the load rows and the replace are each committed with their
// watermarks, and a replayed create-table is covered by its watermark (so it never moves the
// marker over committed load rows).

// reloadMark is the reload in progress recorded in a table's properties.
type reloadMark struct {
	before  int64  // tableprop.ReloadBefore
	started string // tableprop.ReloadStarted
	rows    int64  // tableprop.ReloadRows
}

// readReload reads the reload in progress from props; false when there is none.
func readReload(props iceberg.Properties) (reloadMark, bool) {
	v, ok := props[tableprop.ReloadBefore]
	if !ok || v == "" {
		return reloadMark{}, false
	}
	before, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return reloadMark{}, false
	}
	rows, _ := strconv.ParseInt(props[tableprop.ReloadRows], 10, 64)
	return reloadMark{before: before, started: props[tableprop.ReloadStarted], rows: rows}, true
}

// reloading returns the reload in progress on the writer's table.
func (w *writer) reloading() (reloadMark, bool) {
	if !w.st.loaded() {
		return reloadMark{}, false
	}
	return readReload(w.st.tbl.Properties())
}

// reloadStarts reports whether the control record ev (of operation op), applied to the loaded
// table, starts a reload: a create-table strictly newer than the last control record applied,
// on a table with a snapshot, with the reload handling on. A re-sent copy of the create-table
// (same timestamp) or a replay from the dead letters never starts one.
func (w *writer) reloadStarts(ev *change.Event, op string) bool {
	if op != "create-table" || ev.Replay || !w.set.reloadReplace || !w.st.loaded() || w.st.tbl.CurrentSnapshot() == nil {
		return false
	}
	props := w.st.tbl.Properties()
	last, err1 := time.Parse(time.RFC3339Nano, props[tableprop.ControlTimestamp])
	ts, err2 := time.Parse(time.RFC3339Nano, ev.Meta.Timestamp)
	if err1 != nil || err2 != nil || !ts.After(last) {
		return false
	}
	if !w.set.arrival {
		// With ordering shard the load rows of other shards may commit before the create-table
		// applies, and the replace would remove them.
		w.log.Warn("create-table of a table that holds data (a DMS reload?) under ordering shard: applied as upserts, rows deleted at the source meanwhile stay (use ordering arrival)",
			zap.String("timestamp", ev.Meta.Timestamp))
		return false
	}
	return true
}

// markReload adds to props, the properties of the create-table's commit staged on the writer's
// table, the start of a reload.
func (w *writer) markReload(props iceberg.Properties, ev *change.Event) {
	props[tableprop.ReloadBefore] = strconv.FormatInt(w.st.tbl.Metadata().LastSequenceNumber(), 10)
	props[tableprop.ReloadStarted] = ev.Meta.Timestamp
	props[tableprop.ReloadRows] = "0"
}

// reloadStarted logs and reports a reload whose start was committed.
func (w *writer) reloadStarted(ev *change.Event) {
	m, _ := w.reloading()
	w.reloadLoaded = time.Now()
	w.log.Info("reload started: load rows replace the table's content when the reload ends",
		zap.String("create_table_timestamp", ev.Meta.Timestamp), zap.Int64("replaces_files_up_to_sequence", m.before))
	w.env.metrics.SchemaChanged(w.name, "reload_start", 1)
	w.reportReload()
	fault.Hit(fault.AfterReloadMark)
}

// reportReload publishes the reload in progress (rows staged, since when), or none.
func (w *writer) reportReload() {
	m, ok := w.reloading()
	if !ok && !w.reloadShown {
		return
	}
	w.reloadShown = ok
	var since time.Time
	if ok {
		since, _ = time.Parse(time.RFC3339Nano, m.started)
	}
	w.env.metrics.Reload(w.name, m.rows, since)
}

// reloadStage is what a batch commit does about a reload in progress: count its load rows, and
// at the end of the reload (the batch takes a CDC change of the table) replace or cancel.
type reloadStage struct {
	mark reloadMark
	// end: the batch ends the reload; replace: and load rows were committed since its start.
	end, replace bool
	loads        int
}

// reloadFor plans what the commit of b does about the reload in progress (nil: none).
func (w *writer) reloadFor(b *batch) *reloadStage {
	m, ok := w.reloading()
	if !ok {
		return nil
	}
	rs := &reloadStage{mark: m, loads: b.loads}
	if b.cdc > 0 {
		rs.end = true
		rs.replace = m.rows+int64(b.loads) > 0
	}
	return rs
}

// stageReload stages on txn, after the batch's row delta (or alone), what rs does: the new row
// count, or at the end the removal of every file at or below the mark and of the marker.
func (w *writer) stageReload(ctx context.Context, txn *table.Transaction, rs *reloadStage, props iceberg.Properties) (removed int, err error) {
	if !rs.end {
		props[tableprop.ReloadRows] = strconv.FormatInt(rs.mark.rows+int64(rs.loads), 10)
		return 0, nil
	}
	if rs.replace {
		data, deletes, err := filesUpTo(ctx, w.st.tbl, rs.mark.before)
		if err != nil {
			return 0, fmt.Errorf("list the files of %s before its reload: %w", w.name, err)
		}
		removed = len(data) + len(deletes)
		if removed > 0 {
			summary := iceberg.Properties{
				tableprop.SummaryReload:             tableprop.SummaryReloadReplace,
				tableprop.SummaryReloadRows:         strconv.FormatInt(rs.mark.rows+int64(rs.loads), 10),
				tableprop.SummaryReloadRemovedFiles: strconv.Itoa(removed),
				tableprop.SummaryReloadStarted:      rs.mark.started,
			}
			maps.Copy(summary, props) // the watermarks and complete-through, as on every commit
			fault.Hit(fault.BeforeReloadReplace)
			if err := txn.ReplaceFiles(ctx, data, nil, deletes, summary); err != nil {
				return 0, fmt.Errorf("stage the replace of %s's reload: %w", w.name, err)
			}
		}
	}
	if err := txn.RemoveProperties(tableprop.ReloadProps); err != nil {
		return 0, fmt.Errorf("stage the end of %s's reload: %w", w.name, err)
	}
	return removed, nil
}

// reloadEnded logs and reports a reload that a commit ended.
func (w *writer) reloadEnded(rs *reloadStage, removed int, how string) {
	rows := rs.mark.rows + int64(rs.loads)
	if rs.replace {
		w.log.Info("reload replaced the table's content: rows not re-sent by the load are removed",
			zap.String("ended_by", how), zap.Int64("load_rows", rows), zap.Int("files_removed", removed),
			zap.String("create_table_timestamp", rs.mark.started), zap.Int64("snapshot", snapshotID(w.st.tbl)))
		w.env.metrics.SchemaChanged(w.name, "reload_replace", 1)
		fault.Hit(fault.AfterReloadReplace)
	} else {
		w.log.Info("reload cancelled: no load rows followed the create-table (a task resumed without full load); nothing removed",
			zap.String("create_table_timestamp", rs.mark.started))
		w.env.metrics.SchemaChanged(w.name, "reload_cancel", 1)
	}
	w.reportReload()
}

// reloadQuiet ends a reload after the quiet period (sink.reload_quiet_period) when no CDC change
// of the table followed its load rows: nothing buffered or queued, load rows committed, and none
// for the quiet period. A reload without load rows waits (DMS may load the table later; its
// first CDC change cancels it).
func (w *writer) reloadQuiet(ctx context.Context) error {
	m, ok := w.reloading()
	if !ok || m.rows == 0 || w.buf.pending() || len(w.in) > 0 || w.st.status != tableprop.StatusActive {
		return nil
	}
	if w.reloadLoaded.IsZero() {
		w.reloadLoaded = time.Now() // adopted from another worker's or an earlier run's commit
	}
	if time.Since(w.reloadLoaded) < w.set.reloadQuiet {
		return nil
	}
	if err := w.awaitDeadLetters(ctx); err != nil {
		return err
	}
	var rs *reloadStage
	removed := 0
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		m, ok := w.reloading()
		if !ok || m.rows == 0 {
			rs = nil
			return nil, nil // ended or restarted meanwhile
		}
		rs = &reloadStage{mark: m, end: true, replace: true}
		props := tableprop.Stamp(iceberg.Properties{}, w.st.tbl.Properties())
		txn := w.st.tbl.NewTransaction()
		var err error
		if removed, err = w.stageReload(ctx, txn, rs, props); err != nil {
			return nil, err
		}
		return w.commitProps(ctx, txn, props)
	}
	res, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
		Name: "replace " + w.name + " after its reload", Stage: stage,
		// Done when the reloaded table has no reload in progress any more, or another one.
		Reloaded: w.reloadedUse(func() bool {
			n, ok := w.reloading()
			return !ok || n.before != m.before
		}),
	})
	if err != nil {
		return err
	}
	if res.Table != nil && rs != nil {
		w.reloadEnded(rs, removed, "quiet period")
	}
	w.reportReload()
	return nil
}

// filesUpTo lists the live data and delete files of tbl's current snapshot whose data sequence
// number is at or below seq, and the position-delete files above it that name only such a data
// file (file-scoped ones written by the position conversion, design.md §11.1). A truncate takes
// every live file (seq math.MaxInt64).
func filesUpTo(ctx context.Context, tbl *table.Table, seq int64) (data, deletes []iceberg.DataFile, err error) {
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil, nil, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return nil, nil, err
	}
	var later []iceberg.DataFile // position deletes above seq
	removed := map[string]bool{}
	for _, mf := range mans {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return nil, nil, err
			}
			df := e.DataFile()
			switch {
			case e.SequenceNum() > seq:
				if df.ContentType() == iceberg.EntryContentPosDeletes {
					later = append(later, df)
				}
			case df.ContentType() == iceberg.EntryContentData:
				data = append(data, df)
				removed[df.FilePath()] = true
			default:
				deletes = append(deletes, df)
			}
		}
	}

	const filePathID = 2147483546 // iceberg.PositionalDeleteSchema's file_path
	for _, df := range later {
		lo, hi := df.LowerBoundValues()[filePathID], df.UpperBoundValues()[filePathID]
		if lo != nil && string(lo) == string(hi) && removed[string(lo)] {
			deletes = append(deletes, df)
		}
	}
	return data, deletes, nil
}
