package sink

import (
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// CommitInfo describes one successful table commit.
type CommitInfo struct {
	// Table is the target "namespace.table"; Source is the source "schema.table".
	Table, Source string
	SnapshotID    int64
	// Rows is the number of row images written, Deletes the number of keys deleted (every
	// touched key of a keyed table), Trimmed the changes dropped because the table already held
	// them.
	Rows, Deletes, Trimmed int
	// Attempts is how many commit attempts the batch took.
	Attempts int
	// Vectors: the batch's deletes were committed as deletion vectors (writer_vectors), not as
	// equality deletes.
	Vectors bool
	// VectorsDeclined: the table's writers write deletion vectors, and this batch's deletes were
	// committed as equality deletes instead (a key with a null value, a table partitioned by a
	// column outside its key, a plan that failed); the maintainer converts them.
	VectorsDeclined bool
	// Took is the time from the start of the flush to the commit.
	Took time.Duration
	// Oldest is when the oldest change of the batch arrived at the writer (freshness); a commit
	// that leaves changes buffered (ordering guard) restarts it for them.
	Oldest time.Time
	// Watermarks are the table's per-shard watermarks after the commit.
	Watermarks map[string]string
	// CompleteThrough is the commit bound the batch was cut at (tableprop.CompleteThrough): the
	// table holds every change that arrived at or before it. Zero when the commit had no bound
	// (ordering shard, or no WithCommitBound).
	CompleteThrough time.Time
	// SourceNewest is the source time of the newest change the batch took: its DMS
	// commit-timestamp (the source commit; IncludeTransactionDetails), else its
	// metadata.timestamp (when DMS built the record: full-load rows, CDC without transaction
	// details). Zero when no change of the batch carried a readable one. The commit time minus it
	// is the table's end-to-end lag.
	SourceNewest time.Time
}

// Metrics receives the measurements of the sink: commits, table state, schema changes, dead
// letters and partial update images. Implementations must be safe for concurrent use and must
// not block: they are called on the writers' goroutines. Embed NopMetrics to implement only some
// of them. The post-commit hook is not a metric: see WithCommitListener.
type Metrics interface {
	// Committed is called after each successful table commit.
	Committed(info CommitInfo)
	// CommitFailed is called when a commit attempt fails and will be retried.
	CommitFailed(table string)
	// CommitUnknown counts a table batch commit attempt whose outcome was unknown (its request
	// was sent and failed without a definite answer: a lost response, a timeout, a 5xx), once,
	// when the refresh after it resolved it: resolution is UnknownLanded (it took effect),
	// UnknownNotLanded (it did not; tried again) or UnknownAnotherWriter (another worker had
	// committed the same records). Lost races with a definite answer are not counted.
	CommitUnknown(table, resolution string)
	// DeadLettered is called for each record sent to the dead-letter place.
	DeadLettered(table string)
	// DeadLetterClass counts a table's dead letters by class (ClassConvert, ...), alongside
	// DeadLettered.
	DeadLetterClass(table, class string)
	// Skipped counts events dropped because the table already holds them (replays).
	Skipped(table string, n int)
	// Filtered counts records of source tables that are not replicated (include/exclude/enabled).
	Filtered(source string, n int)
	// TableStatus reports a table writer's state: "active", "paused" (the table cannot be
	// written; reason says why, its records are dead-lettered) or "dropped" (drop-table with
	// sink.drop_table mark).
	TableStatus(table, status, reason string)
	// SchemaChanged counts applied schema changes of a table by kind: create_table, add_column,
	// rename_column, widen_column, drop_column (kept, no longer required), revive_column,
	// set_primary_key, primary_key_refused (a key not applied: ensureKey), incompatible (a
	// change that was not applied), stale_control (a control record older than the last one
	// applied, skipped), truncate (every row removed), reload_start, reload_replace and
	// reload_cancel (a DMS table reload, reload.go).
	SchemaChanged(table, kind string, n int)
	// PartialImages counts, per flush, the partial update images (absent_columns keep) by where
	// their absent columns came from: an earlier change of the key in the batch, the row the
	// table held, or nowhere (the key was unknown: NULL written).
	PartialImages(table string, fromBatch, fromTable, notFound int)
	// DeadLettersCommitted is called after each commit of the dead-letter table.
	DeadLettersCommitted(rows int, took time.Duration)
	// OrderingRisk counts, once per table and kind, a table written with ordering shard whose
	// records the shard order cannot order: kind RiskMultiShard (its records come from more than
	// one shard) or RiskKeyChange (a primary-key-changing update on a multi-shard stream).
	OrderingRisk(table, kind string)
	// Fresh reports that table is complete through t after a properties-only commit that only
	// advanced its complete-through (a quiet table); commits with data report it in CommitInfo.
	Fresh(table string, t time.Time)
	// Reload reports a reload of table in progress (reload.go): the load rows committed since
	// it started and when it started (the create-table's timestamp); rows 0 and a zero since
	// once it ended. Called only for tables that have had a reload since the writer started.
	Reload(table string, rows int64, since time.Time)
	// GateWait adds d to the time the table's writer held changes back for older changes
	// another worker has not committed (the cross-process gates; waiting for the commit bound
	// alone is not counted), measured from flush to flush.
	GateWait(table string, d time.Duration)
}

// Resolutions of Metrics.CommitUnknown.
const (
	UnknownLanded        = string(commit.OutcomeLanded)
	UnknownNotLanded     = string(commit.OutcomeNotLanded)
	UnknownAnotherWriter = string(commit.OutcomeAnotherWriter)
)

// Kinds of Metrics.OrderingRisk.
const (
	RiskMultiShard = "multi_shard_table"
	RiskKeyChange  = "key_change"
)

// NopMetrics is the default Metrics: it does nothing.
type NopMetrics struct{}

func (NopMetrics) Committed(CommitInfo)                    {}
func (NopMetrics) CommitFailed(string)                     {}
func (NopMetrics) CommitUnknown(string, string)            {}
func (NopMetrics) DeadLettered(string)                     {}
func (NopMetrics) DeadLetterClass(string, string)          {}
func (NopMetrics) Skipped(string, int)                     {}
func (NopMetrics) Filtered(string, int)                    {}
func (NopMetrics) TableStatus(string, string, string)      {}
func (NopMetrics) SchemaChanged(string, string, int)       {}
func (NopMetrics) PartialImages(string, int, int, int)     {}
func (NopMetrics) DeadLettersCommitted(int, time.Duration) {}
func (NopMetrics) OrderingRisk(string, string)             {}
func (NopMetrics) Fresh(string, time.Time)                 {}
func (NopMetrics) Reload(string, int64, time.Time)         {}
func (NopMetrics) GateWait(string, time.Duration)          {}

// nopMetrics is NopMetrics under the name the maintenance tests embed.
type nopMetrics = NopMetrics
