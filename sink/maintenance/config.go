package maintenance

import (
	"fmt"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Config configures the table maintenance that runs in process beside each table's
// writer (design.md, "Maintenance"). Compaction is triggered by measured state (delete files,
// delete rows, small data files), snapshot expiry by the number of expirable snapshots or the
// metadata size, manifest rewrite by the manifest count; Interval adds a time-based floor.
type Config struct {
	// Enabled runs maintenance in the service. Default true. `dms2iceberg maintain` runs it on
	// demand either way.
	Enabled bool `yaml:"enabled"`
	// Owner names this process in the per-table maintenance lease. cmd sets it from worker_id.
	// Default "<hostname>-<pid>".
	Owner string `yaml:"-"`
	// MaxDeleteFiles compacts a table once this many delete files have been added since its
	// last compaction (each flush of a keyed table adds one per partition). Every scan applies
	// the outstanding ones: with 8 on a 1M-row table a full scan stays within 2× of a compacted
	// one (docs/benchmarks.md). Default 8.
	MaxDeleteFiles int `yaml:"max_delete_files"`
	// MaxDeleteRows compacts a table once this many equality-delete rows have been added since
	// its last compaction. Default 200000.
	MaxDeleteRows int64 `yaml:"max_delete_rows"`
	// MaxSmallFiles compacts a table once this many data files have been written since its last
	// compaction (each flush writes small files; this is the trigger of keyless tables).
	// Default 32.
	MaxSmallFiles int `yaml:"max_small_files"`
	// TargetFileSize is the size of the data files compaction writes; files from 75% to 180% of
	// it without deletes are left alone. Default 0: the table's write.target-file-size-bytes
	// (512 MiB unless set).
	TargetFileSize int64 `yaml:"target_file_size"`
	// Workers is the number of files compaction reads at once. Default 1, which leaves the other
	// cores to ingestion.
	Workers int `yaml:"workers"`
	// Concurrency bounds the tables one process maintains at once: a run that is due waits for
	// a free slot before it takes the table's lease. What a run holds (the manifests it reads,
	// the files compaction rewrites) then does not grow with the number of tables. Default 0:
	// one slot per CPU (GOMAXPROCS), as compaction is CPU-bound.
	Concurrency int `yaml:"concurrency"`
	// KeyCacheBytes bounds the memory of the key columns the position conversion and the writer
	// vectors keep per data file, for the whole process (tables in delete_mode position or dv;
	// sorted by key with positions: 12 bytes per row for one int or long key column, so the
	// default holds 22M rows, the canonical key encoding plus 8 bytes for other keys, 25 for a
	// UUID text key).
	// Data files never change, so a cached column spares every later conversion the read of that
	// file, and its probe looks up the deleted keys instead of visiting every row. 0 turns the
	// cache off. Default 256 MiB.
	KeyCacheBytes int64 `yaml:"key_cache_bytes"`
	// MinInterval is the shortest time between the ends of two compactions of one table.
	// Default 10s.
	MinInterval time.Duration `yaml:"min_interval"`
	// Interval runs every step that has anything to do at least this often, even below the
	// thresholds. Default 1h.
	Interval time.Duration `yaml:"interval"`
	// CheckInterval is how often a table's state is measured when its writer is not committing
	// (after each commit it is measured at once), and how often the metadata size and manifest
	// count are read. Default 30s.
	CheckInterval time.Duration `yaml:"check_interval"`
	// SnapshotRetention is how long a snapshot stays readable after a newer one replaced it;
	// older snapshots are expired (never the newest KeepLast). Default 15m.
	SnapshotRetention time.Duration `yaml:"snapshot_retention"`
	// KeepLast snapshots are always kept, whatever their age. Default 10.
	KeepLast int `yaml:"keep_last"`
	// MaxSnapshots caps the snapshots kept on the main branch: older ones are expired even
	// inside SnapshotRetention, because every snapshot kept costs memory and CPU in the table's
	// writer (design.md §10). Their files are still deleted only once SnapshotRetention has
	// passed. 0: no cap. Must be above KeepLast. Default 100.
	MaxSnapshots int `yaml:"max_snapshots"`
	// ExpireBatch expires snapshots once this many are expirable (expiry also follows every
	// compaction). Default 20.
	ExpireBatch int `yaml:"expire_batch"`
	// MaxMetadataBytes expires snapshots and rewrites manifests as soon as the table's current
	// metadata file is larger than this. Default 4 MiB.
	MaxMetadataBytes int64 `yaml:"max_metadata_bytes"`
	// MaxManifests rewrites manifests once the current snapshot has more than this many.
	// Default 64.
	MaxManifests int `yaml:"max_manifests"`
	// OrphanMinAge: only files older than this can be removed as orphans, so that files a writer
	// has written but not yet committed are never touched. At least 1h. Default 72h.
	OrphanMinAge time.Duration `yaml:"orphan_min_age"`
	// OrphanInterval is how often orphan cleanup runs per table; 0 turns it off. Default 24h.
	OrphanInterval time.Duration `yaml:"orphan_interval"`
	// LeaseDuration is how long one worker keeps the right to maintain a table after it last
	// renewed it; another worker takes over a table only after it expired. Default 2m.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// CommitRetries bounds the attempts of one maintenance commit that loses to other commits.
	// Default 10.
	CommitRetries int `yaml:"commit_retries"`
	// CommitTimeout bounds each attempt of a maintenance commit (loading the table, staging on
	// it, the catalog call) and each lease commit; an attempt past it is a failed attempt of
	// unknown outcome, tried again like a lost one (a compaction or conversion that landed is
	// recognised on the next attempt). The sink sets it from sink.commit_timeout. Default 2m;
	// 0: only the run's context bounds them.
	CommitTimeout time.Duration `yaml:"-"`
	// DeleteMode is the table's delete mode (design.md §10.1), set per table by the sink from
	// sink.tables.<t>.delete_mode: DeleteModeEquality (default, "") leaves the writer's equality
	// deletes to compaction; DeleteModePosition and DeleteModeDV turn them into position deletes
	// within PositionDelay, and compaction then rewrites only files past RewriteDeletedFraction.
	// The table's format version decides the kind of position delete: Parquet position-delete
	// files on a format v2 table, deletion vectors (Puffin) on v3, where the spec allows no
	// other. DeleteModeDV differs from DeleteModePosition only in the table the sink creates
	// (format v3).
	DeleteMode string `yaml:"-"`
	// PositionDelay: in position mode, equality deletes are converted once the oldest one has
	// been outstanding this long (the conversion of several commits at once reads each data
	// file's key column once). Default 5s.
	PositionDelay time.Duration `yaml:"position_delay"`
	// RewriteDeletedFraction: in position mode, compaction rewrites a data file once this
	// fraction of its rows is position-deleted (besides small files and files with
	// max_delete_files position-delete files). Default 0.1: every reader pays for the deleted rows
	// it skips (PyIceberg several times over), while a rewrite's cost per deleted row is 1/fraction
	// rows, which follows the changes at any table size (docs/benchmarks.md).
	RewriteDeletedFraction float64 `yaml:"rewrite_deleted_fraction"`
	// PositionalBranch: in position and dv mode, the branch the maintainer keeps free of
	// equality deletes for readers that refuse them (branch.go, design.md §10.1): each conversion
	// moves it to its planning snapshot with that snapshot's equality deletes converted, and it
	// follows main whenever main holds none. Default "positional"; "" keeps no such branch.
	PositionalBranch string `yaml:"positional_branch"`
	// WriterVectors: in dv mode, the writer commits its deletes as deletion vectors it plans
	// with the process's key cache, instead of equality deletes for the maintainer to convert
	// (vectors.go, design.md §10.1), so that main holds no equality delete. Batches the planner
	// declines (a key with a null value, a partition column outside the key) and commits during a
	// reload keep equality deletes. Default true.
	WriterVectors bool `yaml:"writer_vectors"`
}

// The delete modes of a table (Config.DeleteMode, sink.tables.<t>.delete_mode).
const (
	DeleteModeEquality = "equality"
	DeleteModePosition = "position"
	DeleteModeDV       = "dv"
)

// ValidDeleteMode reports whether s is a delete mode ("" is the default, equality).
func ValidDeleteMode(s string) bool {
	return s == "" || s == DeleteModeEquality || s == DeleteModePosition || s == DeleteModeDV
}

// Converting reports whether delete mode s turns equality deletes into position deletes.
func Converting(s string) bool { return s == DeleteModePosition || s == DeleteModeDV }

func (c Config) positionMode() bool { return Converting(c.DeleteMode) }

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		Enabled:           true,
		MaxDeleteFiles:    8,
		MaxDeleteRows:     200000,
		MaxSmallFiles:     32,
		Workers:           1,
		MinInterval:       10 * time.Second,
		Interval:          time.Hour,
		CheckInterval:     30 * time.Second,
		SnapshotRetention: 15 * time.Minute,
		KeepLast:          10,
		MaxSnapshots:      100,
		ExpireBatch:       20,
		MaxMetadataBytes:  4 << 20,
		MaxManifests:      64,
		OrphanMinAge:      72 * time.Hour,
		OrphanInterval:    24 * time.Hour,
		LeaseDuration:     2 * time.Minute,
		CommitRetries:     10,
		CommitTimeout:     2 * time.Minute,
		PositionDelay:     5 * time.Second,
		KeyCacheBytes:     256 << 20,

		RewriteDeletedFraction: 0.1,
		PositionalBranch:       "positional",
		WriterVectors:          true,
	}
}

// MinOrphanAge is the lowest accepted Config.OrphanMinAge.
const MinOrphanAge = time.Hour

// Validate reports the first invalid field by its YAML path (sink.maintenance.<key>).
func (c Config) Validate() error {
	pos := func(name string, v int64) error {
		if v <= 0 {
			return fmt.Errorf("sink.maintenance.%s: must be positive, got %d", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_delete_files", int64(c.MaxDeleteFiles)}, {"max_delete_rows", c.MaxDeleteRows},
		{"max_small_files", int64(c.MaxSmallFiles)}, {"workers", int64(c.Workers)},
		{"interval", int64(c.Interval)}, {"check_interval", int64(c.CheckInterval)},
		{"keep_last", int64(c.KeepLast)}, {"expire_batch", int64(c.ExpireBatch)},
		{"max_metadata_bytes", c.MaxMetadataBytes}, {"max_manifests", int64(c.MaxManifests)},
		{"lease_duration", int64(c.LeaseDuration)},
	} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if c.Concurrency < 0 {
		return fmt.Errorf("sink.maintenance.concurrency: must not be negative (0: one per CPU), got %d", c.Concurrency)
	}
	if c.KeyCacheBytes < 0 {
		return fmt.Errorf("sink.maintenance.key_cache_bytes: must not be negative (0 turns the cache off), got %d", c.KeyCacheBytes)
	}
	if c.TargetFileSize < 0 {
		return fmt.Errorf("sink.maintenance.target_file_size: must not be negative, got %d", c.TargetFileSize)
	}
	if c.MinInterval < 0 {
		return fmt.Errorf("sink.maintenance.min_interval: must not be negative, got %s", c.MinInterval)
	}
	if c.SnapshotRetention < 0 {
		return fmt.Errorf("sink.maintenance.snapshot_retention: must not be negative, got %s", c.SnapshotRetention)
	}
	if c.MaxSnapshots < 0 || (c.MaxSnapshots > 0 && c.MaxSnapshots <= c.KeepLast) {
		return fmt.Errorf("sink.maintenance.max_snapshots: must be 0 (no cap) or above keep_last (%d), got %d", c.KeepLast, c.MaxSnapshots)
	}
	if c.OrphanMinAge < MinOrphanAge {
		return fmt.Errorf("sink.maintenance.orphan_min_age: must be at least %s (files being written are younger), got %s", MinOrphanAge, c.OrphanMinAge)
	}
	if c.OrphanInterval < 0 {
		return fmt.Errorf("sink.maintenance.orphan_interval: must not be negative (0 turns orphan cleanup off), got %s", c.OrphanInterval)
	}
	if c.LeaseDuration < 10*time.Second {
		return fmt.Errorf("sink.maintenance.lease_duration: must be at least 10s, got %s", c.LeaseDuration)
	}
	if !ValidDeleteMode(c.DeleteMode) {
		return fmt.Errorf("delete_mode: must be %q, %q or %q, got %q", DeleteModeEquality, DeleteModePosition, DeleteModeDV, c.DeleteMode)
	}
	if c.PositionDelay < 0 {
		return fmt.Errorf("sink.maintenance.position_delay: must not be negative, got %s", c.PositionDelay)
	}
	if c.RewriteDeletedFraction <= 0 || c.RewriteDeletedFraction > 1 {
		return fmt.Errorf("sink.maintenance.rewrite_deleted_fraction: must be in (0, 1], got %g", c.RewriteDeletedFraction)
	}
	if b := c.PositionalBranch; b == table.MainBranch || b == tableprop.ReloadBranch {
		return fmt.Errorf("sink.maintenance.positional_branch: %q is a branch dms2iceberg commits to; name another (or \"\" for none)", b)
	}
	if c.CommitRetries < 0 {
		return fmt.Errorf("sink.maintenance.commit_retries: must not be negative, got %d", c.CommitRetries)
	}
	return nil
}
