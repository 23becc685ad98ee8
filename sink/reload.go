package sink

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Reloads (design.md §7 "Reload"). DMS reloads a table ("Reload table data", a task restarted
// with full load) by sending a create-table control record, then every row the table holds as
// load records, then the changes it cached meanwhile (dms-format.md §8.1: cached changes for a
// table are applied after its full load). It sends no delete for a row that disappeared at the
// source while the table was out of sync. The rule:
//
//   - Start: a create-table whose metadata.timestamp is strictly newer than the table's
//     control-timestamp (a previous create-table was applied) on a table that has a snapshot,
//     with ordering arrival and sink.reload replace. Its commit (the schema plan, or a
//     properties-only commit) records, with its watermark, tableprop.ReloadBefore: the table's
//     last sequence number. Every file at or below it is the table before the reload. The same
//     commit adds an empty snapshot to main (summary dms2iceberg.reload=start), so a writer of
//     another process that staged a commit on main before it loses its race, refreshes, sees the
//     reload and re-stages on the branch.
//   - Load (write-audit-publish): while the mark is set, every data commit of the table goes to
//     the branch tableprop.ReloadBranch, which forks from main at the first one. Load rows commit
//     there as always (upserts with their watermarks, exactly once: the watermarks are table
//     properties, shared by all branches); each commit adds its load rows to
//     tableprop.ReloadRows. Readers of main keep the table as it was before the reload.
//   - End: the first commit that takes a CDC change of the table (in arrival order, after its
//     load rows: the ordering guard and its load gate put every older load row of every worker
//     first), or, when none follows, a quiet period with nothing buffered. It stages on the
//     branch the batch and, if load rows were committed since the start, the removal of every
//     data and delete file at or below ReloadBefore (the rows not re-sent, and the old copies of
//     the re-sent ones, which the load's equality deletes hid already), and of the files of
//     provisional changes (reloadTracker.plan): a snapshot with the summary
//     dms2iceberg.reload=replace. One catalog commit then adds the staged snapshots,
//     points main at the last one and removes the branch (publish): readers go from the table
//     before the reload to the reloaded one in one step. Without load rows (a task resumed
//     without full load sends a create-table and then changes) the reload is cancelled: nothing
//     is removed, and the branch, if anything was committed to it, is published as it is.
//
// The correctness of the replace does not depend on when it happens: every row of the reload is
// committed above ReloadBefore, and nothing else is committed above it before the end (a
// create-table waits for older data of its table on other workers, as a truncate does), so what
// the replace removes is exactly what the table held before the reload. Crashes are harmless:
// the marker, the load rows and the publish are each committed with their watermarks, the branch
// survives a restart (the restarted writer stages on it again), and a replayed create-table is
// covered by its watermark (so it never moves the marker over committed load rows).

// reloadTracker follows the DMS table reloads of one table (the rule above): whether one is in
// progress on the table as last loaded, on which branch a data commit goes meanwhile, what a
// commit stages to count its load rows or end it, and the reload metric. It commits nothing
// itself: the committer stages what it plans, and the control applier commits the start.
type reloadTracker struct {
	*tableScope
	st *targetTable // read only: the reload in progress is the table's
	// loaded is when this writer last committed load rows of a reload in progress (or first
	// saw one), for the quiet period; shown: the reload metric shows a reload.
	loaded time.Time
	shown  bool
	// replaced: a reload ended with a replace since a key waiting for one last looked
	// (schemaApplier.keyAfterReplace).
	replaced bool
}

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
func (rt *reloadTracker) reloading() (reloadMark, bool) {
	if !rt.st.loaded() {
		return reloadMark{}, false
	}
	return readReload(rt.st.tbl.Properties())
}

// reloadHead returns the head of tbl's reload branch, nil when it has none.
func reloadHead(tbl *table.Table) *table.Snapshot {
	meta := tbl.Metadata()
	for name, ref := range meta.Refs() {
		if name == tableprop.ReloadBranch {
			return meta.SnapshotByID(ref.SnapshotID)
		}
	}
	return nil
}

// dataTxn starts a transaction for a commit of the table's rows: on the reload branch while a
// reload is in progress (the branch forks from main at its first commit), on main otherwise.
func (rt *reloadTracker) dataTxn() *table.Transaction {
	if _, ok := rt.reloading(); ok {
		return rt.st.tbl.NewTransactionOnBranch(tableprop.ReloadBranch)
	}
	return rt.st.tbl.NewTransaction()
}

// dataHead is the snapshot that holds the rows the writer's next data commit builds on: the
// reload branch's head while a reload is in progress and the branch exists, main's otherwise.
func (rt *reloadTracker) dataHead() *table.Snapshot {
	if _, ok := rt.reloading(); ok {
		if s := reloadHead(rt.st.tbl); s != nil {
			return s
		}
	}
	return rt.st.tbl.CurrentSnapshot()
}

// dataSnapshotID is the id of dataHead, 0 when there is none.
func (rt *reloadTracker) dataSnapshotID() int64 {
	if s := rt.dataHead(); s != nil {
		return s.SnapshotID
	}
	return 0
}

// publishReload commits txn, a transaction staged on the reload branch of the writer's table, to main
// (the end of a reload): one catalog commit adds the snapshots txn staged, points main at the
// last of them (or at the branch's head when txn staged none), removes the branch and applies
// txn's property changes. It requires main and the branch to be where the writer's table has
// them, so a commit of another writer on either in between makes this attempt lose its race.
// The caller adopts the returned table.
func (rt *reloadTracker) publishReload(ctx context.Context, txn *table.Transaction) (*table.Table, error) {
	staged, err := txn.StagedTable()
	if err != nil {
		return nil, err
	}
	base, next := rt.st.tbl.Metadata(), staged.Metadata()
	if next.CurrentSchema().ID != base.CurrentSchema().ID || next.DefaultPartitionSpec() != base.DefaultPartitionSpec() {
		return nil, commit.Permanent(fmt.Errorf("publish the reload of %s: the staged commit changes the schema or the partition spec", rt.name))
	}
	var updates []table.Update
	var head int64
	if b := reloadHead(rt.st.tbl); b != nil {
		head = b.SnapshotID
	}
	for _, s := range next.Snapshots() {
		if base.SnapshotByID(s.SnapshotID) == nil {
			updates = append(updates, table.NewAddSnapshotUpdate(&s))
			head = s.SnapshotID
		}
	}
	set := iceberg.Properties{}
	for k, v := range next.Properties() {
		if old, ok := base.Properties()[k]; !ok || old != v {
			set[k] = v
		}
	}
	var removed []string
	for k := range base.Properties() {
		if _, ok := next.Properties()[k]; !ok {
			removed = append(removed, k)
		}
	}
	if len(set) > 0 {
		updates = append(updates, table.NewSetPropertiesUpdate(set))
	}
	if len(removed) > 0 {
		updates = append(updates, table.NewRemovePropertiesUpdate(removed))
	}
	var mainID, branchID *int64
	if s := rt.st.tbl.CurrentSnapshot(); s != nil {
		mainID = &s.SnapshotID
	}
	if b := reloadHead(rt.st.tbl); b != nil {
		branchID = &b.SnapshotID
		updates = append(updates, table.NewRemoveSnapshotRefUpdate(tableprop.ReloadBranch))
	}
	if head != 0 && (mainID == nil || *mainID != head) {
		updates = append(updates, table.NewSetSnapshotRefUpdate(table.MainBranch, head, table.BranchRef, 0, 0, 0))
	}
	reqs := []table.Requirement{
		table.AssertTableUUID(base.TableUUID()),
		table.AssertRefSnapshotID(table.MainBranch, mainID),
		table.AssertRefSnapshotID(tableprop.ReloadBranch, branchID),
	}
	meta, loc, err := rt.env.cat.CommitTable(ctx, rt.ident, reqs, updates)
	if err != nil {
		return nil, err
	}
	return table.New(rt.ident, meta, loc, rt.st.tbl.FS, rt.env.cat), nil
}

// reloadStarts reports whether the control record ev (of operation op), applied to the loaded
// table, starts a reload: a create-table strictly newer than the last control record applied,
// on a table with a snapshot, with the reload handling on. A re-sent copy of the create-table
// (same timestamp) or a replay from the dead letters never starts one.
func (rt *reloadTracker) reloadStarts(ev *change.Event, op string) bool {
	if op != "create-table" || ev.Replay || !rt.set.reloadReplace || !rt.st.loaded() || rt.st.tbl.CurrentSnapshot() == nil {
		return false
	}
	props := rt.st.tbl.Properties()
	last, err1 := time.Parse(time.RFC3339Nano, props[tableprop.ControlTimestamp])
	ts, err2 := time.Parse(time.RFC3339Nano, ev.Meta.Timestamp)
	if err1 != nil || err2 != nil || !ts.After(last) {
		return false
	}
	if !rt.set.arrival {
		// With ordering shard the load rows of other shards may commit before the create-table
		// applies, and the replace would remove them.
		rt.log.Warn("create-table of a table that holds data (a DMS reload?) under ordering shard: applied as upserts, rows deleted at the source meanwhile stay (use ordering arrival)",
			zap.String("timestamp", ev.Meta.Timestamp))
		return false
	}
	return true
}

// markReload adds to props, the properties of the create-table's commit staged on the writer's
// table, the start of a reload.
func (rt *reloadTracker) markReload(props iceberg.Properties, ev *change.Event) {
	props[tableprop.ReloadBefore] = strconv.FormatInt(rt.st.tbl.Metadata().LastSequenceNumber(), 10)
	props[tableprop.ReloadStarted] = ev.Meta.Timestamp
	props[tableprop.ReloadRows] = "0"
}

// reloadStarted logs and reports a reload whose start was committed.
func (rt *reloadTracker) reloadStarted(ev *change.Event) {
	m, _ := rt.reloading()
	rt.loaded = time.Now()
	rt.log.Info("reload started: load rows replace the table's content when the reload ends",
		zap.String("create_table_timestamp", ev.Meta.Timestamp), zap.Int64("replaces_files_up_to_sequence", m.before))
	rt.env.metrics.SchemaChanged(rt.name, "reload_start", 1)
	rt.reportReload()
	fault.Hit(fault.AfterReloadMark)
}

// reportReload publishes the reload in progress (rows staged, since when), or none.
func (rt *reloadTracker) reportReload() {
	m, ok := rt.reloading()
	if !ok && !rt.shown {
		return
	}
	rt.shown = ok
	var since time.Time
	if ok {
		since, _ = time.Parse(time.RFC3339Nano, m.started)
	}
	rt.env.metrics.Reload(rt.name, m.rows, since)
}

// reloadStage is what a batch commit does about a reload in progress: count its load rows, and
// at the end of the reload (the batch takes a CDC change of the table) replace or cancel.
type reloadStage struct {
	mark reloadMark
	// end: the batch ends the reload; replace: and load rows were committed since its start.
	end, replace bool
	loads        int
}

// plan plans the batch of buf within lim on the table as last loaded (buffer.plan). During a
// reload (with sink.reload replace) a CDC change built before its create-table is superseded
// (batch.superseded) once the reload has load rows, committed or in the batch: they reflect
// it. Before any, the reload may still be cancelled (a task resumed without full load sends a
// create-table and then changes), and then nothing reflects a dropped change. So such changes
// are written: with the batch's CDC changes when it has any (their first ends the reload, as a
// cancel), else provisionally (batch.provisional), in a commit that does not end the reload
// and whose files the replace removes (provisionalFiles), as it removes the table before the
// reload.
func (rt *reloadTracker) plan(buf *buffer, l *layout, lim limit) batch {
	m, ok := rt.reloading()
	if !ok || !rt.set.reloadReplace {
		return buf.plan(l, lim)
	}
	lim.supersede = m.started
	b := buf.plan(l, lim)
	if b.superseded == 0 || m.rows+int64(b.loads) > 0 {
		return b
	}
	n := b.superseded
	lim.supersede = ""
	b = buf.plan(l, lim)
	if b.cdc == n {
		b.cdc, b.provisional = 0, n
	}
	return b
}

// reloadFor plans what the commit of b does about the reload in progress (nil: none).
func (rt *reloadTracker) reloadFor(b *batch) *reloadStage {
	m, ok := rt.reloading()
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
func (rt *reloadTracker) stageReload(ctx context.Context, txn *table.Transaction, rs *reloadStage, props iceberg.Properties) (removed int, err error) {
	if !rs.end {
		props[tableprop.ReloadRows] = strconv.FormatInt(rs.mark.rows+int64(rs.loads), 10)
		return 0, nil
	}
	if rs.replace {
		data, deletes, err := filesUpTo(ctx, rt.st.tbl, rt.dataHead(), rs.mark.before)
		if err != nil {
			return 0, fmt.Errorf("list the files of %s before its reload: %w", rt.name, err)
		}
		pd, pdel, err := provisionalFiles(ctx, rt.st.tbl, rt.dataHead(), rs.mark.before)
		if err != nil {
			return 0, fmt.Errorf("list the provisional files of %s's reload: %w", rt.name, err)
		}
		data, deletes = append(data, pd...), append(deletes, pdel...)
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
				return 0, fmt.Errorf("stage the replace of %s's reload: %w", rt.name, err)
			}
		}
	}
	if err := txn.RemoveProperties(tableprop.ReloadProps); err != nil {
		return 0, fmt.Errorf("stage the end of %s's reload: %w", rt.name, err)
	}
	return removed, nil
}

// reloadEnded logs and reports a reload that a commit ended.
func (rt *reloadTracker) reloadEnded(rs *reloadStage, removed int, how string) {
	rows := rs.mark.rows + int64(rs.loads)
	if rs.replace {
		rt.replaced = true
		rt.log.Info("reload replaced the table's content: rows not re-sent by the load are removed",
			zap.String("ended_by", how), zap.Int64("load_rows", rows), zap.Int("files_removed", removed),
			zap.String("create_table_timestamp", rs.mark.started), zap.Int64("snapshot", snapshotID(rt.st.tbl)))
		rt.env.metrics.SchemaChanged(rt.name, "reload_replace", 1)
		fault.Hit(fault.AfterReloadReplace)
	} else {
		rt.log.Info("reload cancelled: no load rows followed the create-table (a task resumed without full load); nothing removed",
			zap.String("create_table_timestamp", rs.mark.started))
		rt.env.metrics.SchemaChanged(rt.name, "reload_cancel", 1)
	}
	rt.reportReload()
}

// quietEnd returns the reload in progress that its quiet period (sink.reload_quiet_period)
// ends now: load rows committed, and none for the quiet period; idle says that nothing is
// buffered or queued and the table is active. A reload without load rows waits (DMS may load
// the table later; its first CDC change cancels it).
func (rt *reloadTracker) quietEnd(idle bool) (reloadMark, bool) {
	m, ok := rt.reloading()
	if !ok || m.rows == 0 || !idle {
		return m, false
	}
	if rt.loaded.IsZero() {
		rt.loaded = time.Now() // adopted from another worker's or an earlier run's commit
	}
	return m, time.Since(rt.loaded) >= rt.set.reloadQuiet
}

// manifestsOf opens tbl's file system and lists snap's manifests.
func manifestsOf(ctx context.Context, tbl *table.Table, snap *table.Snapshot) (icebergio.IO, []iceberg.ManifestFile, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	mans, err := snap.Manifests(fs)
	return fs, mans, err
}

// filesUpTo lists the live data and delete files of snap (a snapshot of tbl) whose data sequence
// number is at or below seq, and the position deletes above it that name only such a data file
// (design.md §10.1: a conversion planned before a reload's mark may commit after it): deletion
// vectors and other files that name it in referenced_data_file, and Parquet files whose file_path
// bounds are it. A truncate takes every live file (seq math.MaxInt64).
func filesUpTo(ctx context.Context, tbl *table.Table, snap *table.Snapshot, seq int64) (data, deletes []iceberg.DataFile, err error) {
	if snap == nil {
		return nil, nil, nil
	}
	fs, mans, err := manifestsOf(ctx, tbl, snap)
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
		if ref := df.ReferencedDataFile(); ref != nil && *ref != "" {
			if removed[*ref] {
				deletes = append(deletes, df)
			}
			continue
		}
		lo, hi := df.LowerBoundValues()[filePathID], df.UpperBoundValues()[filePathID]
		if lo != nil && string(lo) == string(hi) && removed[string(lo)] {
			deletes = append(deletes, df)
		}
	}
	return data, deletes, nil
}

// provisionalFiles lists the live data and delete files of snap (the head of tbl's reload
// branch) that commits of provisional changes (tableprop.SummaryProvisional, reloadTracker.plan)
// above seq, the reload's mark, added.
func provisionalFiles(ctx context.Context, tbl *table.Table, snap *table.Snapshot, seq int64) (data, deletes []iceberg.DataFile, err error) {
	if snap == nil {
		return nil, nil, nil
	}
	marked := map[int64]bool{}
	for _, s := range table.AncestorsOf(snap.SnapshotID, tbl.Metadata().SnapshotByID) {
		if s.SequenceNumber <= seq {
			break
		}
		if s.Summary != nil && s.Summary.Properties[tableprop.SummaryProvisional] != "" {
			marked[s.SnapshotID] = true
		}
	}
	if len(marked) == 0 {
		return nil, nil, nil
	}
	fs, mans, err := manifestsOf(ctx, tbl, snap)
	if err != nil {
		return nil, nil, err
	}
	for _, mf := range mans {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return nil, nil, err
			}
			if !marked[e.SnapshotID()] {
				continue
			}
			if df := e.DataFile(); df.ContentType() == iceberg.EntryContentData {
				data = append(data, df)
			} else {
				deletes = append(deletes, df)
			}
		}
	}
	return data, deletes, nil
}
