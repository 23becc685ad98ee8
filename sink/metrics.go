package sink

import "time"

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
	// Took is the time from the start of the flush to the commit.
	Took time.Duration
	// Oldest is when the oldest change of the batch arrived at the writer (freshness).
	Oldest time.Time
	// Watermarks are the table's per-shard watermarks after the commit.
	Watermarks map[string]string
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
	// set_primary_key, incompatible (a change that was not applied), stale_control (a control
	// record older than the last one applied, skipped).
	SchemaChanged(table, kind string, n int)
	// PartialImages counts, per flush, the partial update images (absent_columns keep) by where
	// their absent columns came from: an earlier change of the key in the batch, the row the
	// table held, or nowhere (the key was unknown: NULL written).
	PartialImages(table string, fromBatch, fromTable, notFound int)
	// DeadLettersCommitted is called after each commit of the dead-letter table.
	DeadLettersCommitted(rows int, took time.Duration)
}

// NopMetrics is the default Metrics: it does nothing.
type NopMetrics struct{}

func (NopMetrics) Committed(CommitInfo)                    {}
func (NopMetrics) CommitFailed(string)                     {}
func (NopMetrics) DeadLettered(string)                     {}
func (NopMetrics) DeadLetterClass(string, string)          {}
func (NopMetrics) Skipped(string, int)                     {}
func (NopMetrics) Filtered(string, int)                    {}
func (NopMetrics) TableStatus(string, string, string)      {}
func (NopMetrics) SchemaChanged(string, string, int)       {}
func (NopMetrics) PartialImages(string, int, int, int)     {}
func (NopMetrics) DeadLettersCommitted(int, time.Duration) {}

// nopMetrics is NopMetrics under the name the maintenance tests embed.
type nopMetrics = NopMetrics

// MaintenanceMetrics receives the measurements of table maintenance (WithMaintenanceMetrics; a
// Metrics value passed to WithMetrics that also implements it receives these calls too). The same rules apply: safe for concurrent use, never blocking. They are
// called on the maintenance goroutines, one per table.
type MaintenanceMetrics interface {
	// MaintenanceChecked reports a table's measured state: after each of its writer's commits
	// (at most once per commit) and every check interval.
	MaintenanceChecked(st MaintenanceStatus)
	// Maintained is called after each maintenance run that changed something.
	Maintained(r MaintenanceReport)
	// MaintenanceFailed counts a failed maintenance step: "compact", "expire", "manifests",
	// "orphans" or "lease".
	MaintenanceFailed(table, step string)
}

// MaintenanceStatus is a table's state as maintenance measures it.
type MaintenanceStatus struct {
	// Table is the target "namespace.table".
	Table string
	// DeleteFiles and DeleteRows are the delete files and equality-delete rows outstanding in the
	// current snapshot (every scan applies them); DataFiles the data files, Records the rows
	// before deletes.
	DeleteFiles, DataFiles int
	DeleteRows, Records    int64
	// NewDataFiles and NewDeleteFiles count the files added since the last compaction.
	NewDataFiles, NewDeleteFiles int
	// Snapshots is the number of snapshots in the metadata, Expirable how many of them expiry
	// would remove now.
	Snapshots, Expirable int
	// MetadataBytes is the size of the current metadata file and Manifests the manifests of the
	// current snapshot, as last read (-1 when not read yet).
	MetadataBytes int64
	Manifests     int
	// LeaseHeld reports whether this process holds the table's maintenance lease; LeaseOwner
	// names the holder of the recorded lease ("" when none).
	LeaseHeld  bool
	LeaseOwner string
	// LastCompaction is when the table was last compacted (by any worker; zero if never).
	LastCompaction time.Time
}

// MaintenanceReport describes one maintenance run of one table.
type MaintenanceReport struct {
	// Table is the target "namespace.table".
	Table string
	// Trigger says what started the run: "delete-files", "delete-rows", "small-files",
	// "snapshots", "metadata-size", "manifests", "interval", "orphans" or "manual".
	Trigger string
	// Started is when the run began and Took how long it ran.
	Started time.Time
	Took    time.Duration

	// Compacted reports a committed compaction; the other compaction fields are zero without.
	Compacted bool
	// CompactionTook is the time from planning to the committed rewrite, CompactionAttempts the
	// commit attempts it needed (more than one when it lost to other commits).
	CompactionTook     time.Duration
	CompactionAttempts int
	// DataFilesRewritten were replaced by DataFilesWritten; DeleteFilesRemoved delete files (with
	// DeleteRowsRemoved rows) were applied and dropped. BytesBefore and BytesAfter are the sizes
	// of the rewritten and the new data files.
	DataFilesRewritten, DataFilesWritten int
	DeleteFilesRemoved                   int
	DeleteRowsRemoved                    int64
	BytesBefore, BytesAfter              int64

	// Before and after the whole run: data files, delete files, snapshots, manifests of the
	// current snapshot, metadata file size (-1 when unknown).
	DataFilesBefore, DataFilesAfter         int
	DeleteFilesBefore, DeleteFilesAfter     int
	SnapshotsBefore, SnapshotsAfter         int
	ManifestsBefore, ManifestsAfter         int
	MetadataBytesBefore, MetadataBytesAfter int64

	// SnapshotsExpired were removed by snapshot expiry.
	SnapshotsExpired int
	// ManifestsRewritten were merged into ManifestsAdded.
	ManifestsRewritten, ManifestsAdded int
	// OrphansRemoved files (OrphanBytes in total) were deleted by orphan cleanup.
	OrphansRemoved int
	OrphanBytes    int64

	// Failed names the steps that failed ("compact", "expire", ...); the error returned with the
	// report has the details.
	Failed []string
}

// Changed reports whether the run changed the table or its files.
func (r MaintenanceReport) Changed() bool {
	return r.Compacted || r.SnapshotsExpired > 0 || r.ManifestsRewritten > 0 || r.OrphansRemoved > 0
}

type nopMaintenanceMetrics struct{}

func (nopMaintenanceMetrics) MaintenanceChecked(MaintenanceStatus) {}
func (nopMaintenanceMetrics) Maintained(MaintenanceReport)         {}
func (nopMaintenanceMetrics) MaintenanceFailed(string, string)     {}
