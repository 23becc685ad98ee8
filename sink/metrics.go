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

// Metrics receives the sink's measurements and commit notifications. Implementations must be
// safe for concurrent use and must not block: they are called on the writers' goroutines. The
// default does nothing; cmd plugs in Prometheus and the post-commit hook.
type Metrics interface {
	// Committed is called after each successful table commit.
	Committed(info CommitInfo)
	// CommitFailed is called when a commit attempt fails and will be retried.
	CommitFailed(table string)
	// DeadLettered is called for each record sent to the dead-letter place.
	DeadLettered(table string)
	// Skipped counts events dropped because the table already holds them (replays).
	Skipped(table string, n int)
}

type nopMetrics struct{}

func (nopMetrics) Committed(CommitInfo) {}
func (nopMetrics) CommitFailed(string)  {}
func (nopMetrics) DeadLettered(string)  {}
func (nopMetrics) Skipped(string, int)  {}

// MaintenanceMetrics receives the measurements of table maintenance. It is separate from Metrics
// so that existing Metrics implementations keep compiling; a Metrics value passed to WithMetrics
// that also implements MaintenanceMetrics receives these calls too (WithMaintenanceMetrics sets
// another receiver). The same rules apply: safe for concurrent use, never blocking. They are
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
