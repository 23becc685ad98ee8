package maintenance

import "time"

// Metrics receives the measurements of table maintenance. Implementations must be safe for
// concurrent use and must not block: they are called on the maintenance goroutines, one per
// table. A nil Metrics given to New or RunTable receives nothing (NopMetrics).
type Metrics interface {
	// MaintenanceChecked reports a table's measured state: after each of its writer's commits
	// (at most once per commit) and every check interval.
	MaintenanceChecked(st Status)
	// Maintained is called after each maintenance run that changed something.
	Maintained(r Report)
	// MaintenanceFailed counts a failed maintenance step: "sweep", "position", "compact",
	// "expire", "manifests", "purge", "orphans" or "lease".
	MaintenanceFailed(table, step string)
}

// Status is a table's state as maintenance measures it.
type Status struct {
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
	// BranchBehind is how far behind main the positional branch shows the table (BranchBehind
	// the function), when HasBranch.
	BranchBehind time.Duration
	HasBranch    bool
}

// Report describes one maintenance run of one table.
type Report struct {
	// Table is the target "namespace.table".
	Table string
	// Trigger says what started the run: "position" (equality deletes to convert), "delete-files", "delete-rows", "small-files",
	// "snapshots", "metadata-size", "manifests", "interval", "deferred-deletes", "orphans" or "manual".
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

	// Converted reports a committed conversion of equality deletes into position deletes
	// (position mode): EqualityDeletesConverted equality-delete files were dropped after
	// PositionDeletesWritten positions (in PositionDeleteFilesWritten files) were committed for
	// them; DataFilesProbed data files had their key column read. ConversionTook is the time from
	// planning to the second commit, ConversionAttempts the commit attempts of both commits.
	Converted                  bool
	EqualityDeletesConverted   int
	PositionDeletesWritten     int64
	PositionDeleteFilesWritten int
	DataFilesProbed            int
	ConversionTook             time.Duration
	ConversionAttempts         int
	// VectorsRemerged counts commit attempts of a conversion that found some probed files'
	// deletion vectors replaced by a writer's since the plan, and merged the newer ones.
	VectorsRemerged int
	// BranchMoved: the positional branch (Config.PositionalBranch) moved to a state without
	// equality deletes, BranchSource: the snapshot of main it shows. A run that only moved the
	// branch is not Changed (the gauge positional_branch_behind_seconds shows the branch).
	BranchMoved  bool
	BranchSource int64
	// PositionDeletesSwept are Parquet position-delete files of a format v3 table dropped because
	// a deletion vector superseded them (readers ignore them) or their data file is gone (sweeper).
	PositionDeletesSwept int

	// SnapshotsExpired were removed by snapshot expiry. FilesDeferred are the files only
	// snapshots expired before snapshot_retention (by max_snapshots) referenced: listed for
	// deletion once it has passed. DeferredFilesRemoved were deleted from such lists.
	SnapshotsExpired     int
	FilesDeferred        int
	DeferredFilesRemoved int
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
func (r Report) Changed() bool {
	return r.Compacted || r.Converted || r.SnapshotsExpired > 0 || r.ManifestsRewritten > 0 || r.OrphansRemoved > 0 ||
		r.DeferredFilesRemoved > 0 || r.PositionDeletesSwept > 0
}

// NopMetrics is the default Metrics: it does nothing.
type NopMetrics struct{}

func (NopMetrics) MaintenanceChecked(Status)        {}
func (NopMetrics) Maintained(Report)                {}
func (NopMetrics) MaintenanceFailed(string, string) {}

func orNop(m Metrics) Metrics {
	if m == nil {
		return NopMetrics{}
	}
	return m
}
