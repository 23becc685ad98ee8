package tableprop

import (
	"fmt"
	"strings"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// Table properties.
const (
	// WatermarkPrefix starts every property that records, per stream and shard, the highest
	// Kinesis sequence number whose change is in the table: "dms2iceberg.wm.<stream>.<shard>".
	// These are the record of progress that makes replays harmless (design.md §3.1); the same
	// values go into the summary of the commit that advanced them.
	WatermarkPrefix = "dms2iceberg.wm."

	// StateVersion is the version of the format of the table's dms2iceberg state
	// (pkg/stateversion): stateversion.Current, set at creation and by every commit. A table
	// without it is version 1; a writer refuses a table with a newer one (CheckStateVersion).
	StateVersion = "dms2iceberg.state-version"

	// CreatedBy marks a table this service created; its value is "dms2iceberg".
	CreatedBy = "dms2iceberg.created-by"
	// Source is the DMS source table ("schema.table", as DMS spells it) that owns the table: the
	// only source whose records are written to it. It is set when the table is created, or by a
	// properties-only commit when a table without it is first opened. The watermarks are per
	// stream and shard only, so two sources writing one table would cover each other's records;
	// a record of another source resolving to this table is dead-lettered instead. Changing it
	// hands the table to another source (after the old one has stopped writing).
	Source = "dms2iceberg.source"

	// Status is the table's state: StatusActive, StatusPaused or StatusDropped.
	Status = "dms2iceberg.status"
	// DroppedAt is the metadata.timestamp of the drop-table control record that dropped the
	// table at the source; empty again after a later create-table.
	DroppedAt = "dms2iceberg.dropped-at"
	// IncompatibleChange describes the last source column change that could not be applied
	// ("<column>: <from>→<to> not applied (<operation>, <timestamp>)").
	IncompatibleChange = "dms2iceberg.incompatible-change"
	// ControlTimestamp is the metadata.timestamp of the last control record applied to the
	// table; an older control record read later is stale and is not applied.
	ControlTimestamp = "dms2iceberg.control-timestamp"

	// CompleteThrough is the commit bound the table's last commit was cut at (RFC 3339, UTC,
	// millisecond precision, CompleteThroughLayout): the table holds every change of its source
	// table that reached the Kinesis stream at or before that time, from every shard and every
	// worker (ordering arrival only; see the ordering guard in design.md §4). A properties-only
	// commit advances it on a quiet table. The commit that sets it also writes it into its
	// snapshot summary. Absent on tables written with ordering shard or without a commit bound.
	CompleteThrough = "dms2iceberg.complete-through"

	// MaintenanceOwner names the process that holds the table's maintenance lease
	// ("<owner>#<token>").
	MaintenanceOwner = "dms2iceberg.maintenance.owner"
	// MaintenanceUntil is when that lease ends unless renewed (RFC 3339, UTC).
	MaintenanceUntil = "dms2iceberg.maintenance.until"
	// LastCompaction is when the table was last compacted (RFC 3339, UTC).
	LastCompaction = "dms2iceberg.maintenance.last-compaction"
	// LastOrphanCleanup is when orphan files were last removed (RFC 3339, UTC).
	LastOrphanCleanup = "dms2iceberg.maintenance.last-orphan-cleanup"

	// ReloadBefore marks a reload of the table in progress (design.md §7 "Reload"): the
	// table's last sequence number when a newer create-table started it. Every data and delete
	// file of a sequence number at or below it holds the table's content from before the reload
	// and is removed by the replacing commit; the reload's load rows are committed above it.
	// Absent when no reload is in progress. Maintenance neither compacts nor converts deletes
	// while it is set (a rewrite would carry old rows above it).
	ReloadBefore = "dms2iceberg.reload.before-seq"
	// ReloadStarted is the metadata.timestamp of the create-table that started the reload in
	// progress.
	ReloadStarted = "dms2iceberg.reload.started"
	// ReloadRows counts the load rows committed since the reload started (rows staged for the
	// replacing commit).
	ReloadRows = "dms2iceberg.reload.rows"
)

// ReloadBranch is the branch a reload in progress stages its commits on (write-audit-publish):
// it forks from main at the reload's first data commit, takes the load rows (and anything else
// committed to the table's data before the reload ends), and the replacing commit publishes it
// as main in one catalog commit and removes it. Readers of main keep the table as it was before
// the reload until then.
const ReloadBranch = "dms2iceberg-reload"

// ReloadProps lists the properties of a reload in progress, which the replacing commit removes.
var ReloadProps = []string{ReloadBefore, ReloadStarted, ReloadRows}

// CompleteThroughLayout is the time layout of CompleteThrough (always UTC).
const CompleteThroughLayout = "2006-01-02T15:04:05.000Z07:00"

// ParseCompleteThrough reads a CompleteThrough value (property or snapshot summary); false when
// it is absent or unreadable.
func ParseCompleteThrough(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// Stamp sets StateVersion in props (the properties a commit stages on a table whose properties
// are base) unless base already has it, and returns props. Not rewriting a present stamp matters:
// the catalogs apply a commit's property updates to the table's newest metadata, so a writer
// whose view is stale would otherwise overwrite a newer stamp another binary just wrote.
func Stamp(props, base map[string]string) map[string]string {
	if base[StateVersion] != stateversion.CurrentText {
		props[StateVersion] = stateversion.CurrentText
	}
	return props
}

// CheckStateVersion refuses the properties of table name (a *stateversion.Error) when they were
// written by a newer state version of dms2iceberg.
func CheckStateVersion(name string, props map[string]string) error {
	if err := stateversion.Check("table", props[StateVersion]); err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	return nil
}

// Values of Status.
const (
	StatusActive  = "active"
	StatusPaused  = "paused"
	StatusDropped = "dropped"
)

// Snapshot summary keys.
const (
	// SummaryRows and SummaryDeletes count the row images and the deleted keys of a table batch.
	SummaryRows    = "dms2iceberg.rows"
	SummaryDeletes = "dms2iceberg.deletes"
	// SummaryCommit is a unique id of a table batch's commit (commit.NewToken), the same for
	// every attempt of the batch: after an attempt whose outcome was unknown, a reloaded table
	// holding the batch shows whether this commit landed or another writer's (commit.CommittedBy).
	SummaryCommit = "dms2iceberg.commit"
	// SummaryVectors: the table batch committed its deletes as deletion vectors (the writer's,
	// maintenance.Maintainer.Vectors) instead of equality deletes; the value counts the positions
	// the vectors it added hold.
	SummaryVectors = "dms2iceberg.vector-positions"
	// SummaryMoved names the file that lists the old keys of the key changes a table batch
	// committed, with their arrival and source position (sink/moved.go): other writers read it
	// so that an older change of such a key is not written back after it.
	SummaryMoved = "dms2iceberg.moved-keys"
	// SummaryOvertaken counts the changes a table batch took without writing them back: a newer
	// key change committed before it had moved their key away.
	SummaryOvertaken = "dms2iceberg.overtaken"
	// SummaryDeadLetters counts the records of a dead-letter table commit.
	SummaryDeadLetters = "dms2iceberg.dead-letters"
	// SummaryMaintenanceRun is a unique id of a compaction run (to recognise a commit whose
	// outcome was unknown), SummaryMaintenanceTrigger what started it and
	// SummaryMaintenanceStarting the snapshot it read.
	SummaryMaintenanceRun      = "dms2iceberg.maintenance.run"
	SummaryMaintenanceTrigger  = "dms2iceberg.maintenance.trigger"
	SummaryMaintenanceStarting = "dms2iceberg.maintenance.starting-snapshot"
	// SummaryReload marks the replacing commit of a reload ("replace"): it removes every file
	// at or below ReloadBefore. SummaryReloadRows is the number of load rows of the reload,
	// SummaryReloadRemovedFiles the number of data and delete files it removed and
	// SummaryReloadStarted the create-table's timestamp.
	SummaryReload             = "dms2iceberg.reload"
	SummaryReloadRows         = "dms2iceberg.reload.rows"
	SummaryReloadRemovedFiles = "dms2iceberg.reload.removed-files"
	SummaryReloadStarted      = "dms2iceberg.reload.started"
	// SummarySuperseded counts the CDC changes of a commit during a reload that were built
	// before its create-table and are not written (the load rows reflect them).
	SummarySuperseded = "dms2iceberg.reload.superseded"
	// SummaryProvisional counts the CDC changes built before the create-table of a reload in
	// progress that a commit wrote because no load row had come yet: the reload's replace
	// removes the files of such commits (the load rows reflect the changes), a cancelled reload
	// keeps them.
	SummaryProvisional = "dms2iceberg.reload.provisional"
)

// Values of SummaryReload: the replacing snapshot of a reload, and the empty snapshot on main
// that records its start (it moves main, so a writer that staged on main before the start loses
// its race and re-stages on the reload branch).
const (
	SummaryReloadReplace = "replace"
	SummaryReloadStart   = "start"
)

// Watermark is the watermark property of one shard of one stream.
func Watermark(stream, shard string) string {
	return WatermarkPrefix + stream + "." + shard
}

// Watermarks reads the watermarks of one stream from table properties into a map keyed by shard.
func Watermarks(props map[string]string, stream string) map[string]string {
	prefix := WatermarkPrefix + stream + "."
	out := make(map[string]string)
	for k, v := range props {
		if shard, ok := strings.CutPrefix(k, prefix); ok {
			out[shard] = v
		}
	}
	return out
}
