package sink

import (
	"fmt"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// Config configures the Iceberg sink.
type Config struct {
	// Catalog selects the catalog and warehouse. Default: DefaultCatalogConfig(".data").
	Catalog CatalogConfig `yaml:"catalog"`
	// Stream is the Kinesis stream name; it is part of every watermark property name. Required.
	Stream string `yaml:"-"`
	// FlushInterval is the longest time a change waits in a table's buffer. Default 1s.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// FlushRows flushes a table once this many changes are buffered. Default 50000.
	FlushRows int `yaml:"flush_rows"`
	// FlushBytes flushes a table once the buffered raw records reach this size. Default 64 MiB.
	FlushBytes int64 `yaml:"flush_bytes"`
	// QueueLength bounds each table writer's intake queue (events). Default 8192.
	QueueLength int `yaml:"queue_length"`
	// CommitRetries bounds how often one batch is re-staged after a failed commit. Default 20. The
	// final flush of a graceful stop is bounded by the shutdown deadline instead.
	CommitRetries int `yaml:"commit_retries"`
	// CommitTimeout bounds each commit attempt of a table writer (writing its files, staging,
	// the catalog commit), each refresh after a failed one, each catalog call that opens a
	// writer's table (load, create), each commit attempt of the dead-letter table and each
	// maintenance commit attempt (maintenance.Config.CommitTimeout). Default 2m. An attempt past it
	// counts as failed with an unknown outcome: the table is refreshed and its watermarks tell
	// whether it landed. iceberg-go's REST client and the AWS SDK set no request timeout, so
	// without it a dependency that accepts a request and never answers holds the writer.
	CommitTimeout time.Duration `yaml:"commit_timeout"`
	// TimestampTZ stores DMS DATETIME columns as timestamptz instead of timestamp. Default false.
	TimestampTZ bool `yaml:"timestamptz"`
	// TimeType is how DMS TIME columns are stored: "string" (default; the source text, readable
	// by every engine, and MySQL TIME values beyond 24 hours fit) or "time" (Iceberg time, which
	// Spark cannot read).
	TimeType string `yaml:"time_type"`
	// Namespace overrides the target namespace of every table. Default "": the source schema.
	Namespace string `yaml:"namespace"`
	// AbsentColumns is what a column an update image leaves out becomes: "null" (default) or
	// "keep" (the value the row had before the update: Oracle sources without ALL COLUMNS
	// supplemental logging send only the changed columns). "keep" needs the DMS endpoint setting
	// IncludeNullAndEmpty=true, so that NULL arrives as an explicit null. Tables override it with
	// TableConfig.AbsentColumns.
	AbsentColumns string `yaml:"absent_columns"`
	// Tables holds per-source-table settings keyed by "schema.table", or by a glob of such names
	// ("shop.*"); an exact key wins over globs, and the longest matching glob over shorter ones.
	// Default none.
	Tables map[string]TableConfig `yaml:"tables"`
	// Include lists "schema.table" globs (path.Match syntax: * ? [...]) of the source tables to
	// replicate. Default none: every table.
	Include []string `yaml:"include"`
	// Exclude lists globs of source tables never replicated; it wins over Include. Their records
	// are acknowledged without being written. Default none.
	Exclude []string `yaml:"exclude"`
	// DropTable is what a drop-table control record does: "ignore" (default: the target table
	// is kept and keeps taking records) or "mark" (the target table is marked with
	// dms2iceberg.status=dropped and stops taking records, which are dead-lettered, until a
	// create-table for it arrives).
	DropTable string `yaml:"drop_table"`
	// DeadLetters selects where records that cannot be applied go. Default: the Iceberg table
	// dms2iceberg.dead_letters.
	DeadLetters DeadLetterConfig `yaml:"dead_letters"`
	// HashKey is the secret key of column hashing (tables' hash_columns). It never comes from the
	// file: cmd reads it from the environment (DMS2ICEBERG_HASH_KEY). Required when any table
	// hashes columns.
	HashKey []byte `yaml:"-"`
	// DMS is the decoder configuration (cmd copies the dms: section). Dead letters are
	// redacted with it: it names the add-before-image-columns columns (see RedactDeadLetter).
	DMS dms.Config `yaml:"-"`
	// Maintenance configures compaction, snapshot expiry, manifest rewrite and orphan cleanup,
	// which run beside the table writers. Default: maintenance.DefaultConfig().
	Maintenance maintenance.Config `yaml:"maintenance"`
	// Ordering is how a table's changes are ordered across shards: "arrival" (default: the
	// ordering guard; a table commits only changes that arrived at or before the commit bound
	// given with WithCommitBound, decides the last change per key in arrival order, ties broken
	// by the DMS source position, and applies control records in that order with the data) or
	// "shard" (order within a shard only, commit whatever is buffered: correct only when every
	// record of a table travels on one shard). Tables override it with TableConfig.Ordering.
	Ordering string `yaml:"ordering"`
	// FreshnessInterval: a table with nothing buffered whose dms2iceberg.complete-through lags
	// the commit bound by more than this gets a properties-only commit that advances it (at most
	// one per interval per table), so quiet tables show how fresh they are. 0 turns it off.
	// Default 1m. Only with ordering arrival and a commit bound.
	FreshnessInterval time.Duration `yaml:"freshness_interval"`
	// KeylessIdentity is how a table without primary key survives DMS re-sends (a PutRecords
	// retry or a task restart sends a record again with a new Kinesis sequence number, which no
	// watermark covers): "auto" (default) creates every keyless table with the extra optional
	// string column _dms_record_id (readers see it), which holds the DMS record identity of the
	// inserts that carry one (change.RecordIdentity: the DMS Kinesis endpoint setting
	// IncludeTransactionDetails=true), and writes every such insert with an equality delete of
	// it, so a re-sent insert replaces its earlier copy; "off" creates no column and appends every
	// insert (re-sends duplicate rows; a table that has the column gets null in it). Records
	// without the details (details off, every full-load record) are appended either way, and
	// tables created without the column keep appending. Tables override it with
	// TableConfig.KeylessIdentity.
	KeylessIdentity string `yaml:"keyless_identity"`
	// DeleteMode is the delete mode (TableConfig.DeleteMode) of every table that does not set
	// its own: "equality" (default), "position" or "dv", so that a deployment with no per-table
	// configuration can choose one. position and dv need maintenance.
	DeleteMode string `yaml:"delete_mode"`
	// FormatVersion is the format version (TableConfig.FormatVersion) of every table the sink
	// creates that does not set its own: 2 or 3. Default 0: 3 where the table's delete mode is
	// dv, else 2.
	FormatVersion int `yaml:"format_version"`
	// Reload is what a DMS table reload does to the target table (design.md §7 "Reload"):
	// "replace" (default): a create-table newer than the last one applied, on a table with
	// data, starts a reload; its load rows are staged on the Iceberg branch dms2iceberg-reload
	// while readers keep the table as it was, and at its end (the table's first CDC change after
	// its load rows, or ReloadQuietPeriod without any) one catalog commit publishes the branch
	// without every row the table held before the reload, so rows deleted at the source while
	// the table was out of sync disappear. Needs ordering arrival (under ordering shard a reload
	// is upserted and logged). "upsert": load rows are upserted into the visible table and
	// nothing is removed (rows deleted at the source meanwhile stay).
	Reload string `yaml:"reload"`
	// ReloadQuietPeriod ends a reload when no CDC change of the table follows its load rows:
	// once this long has passed since its last load rows were committed, with nothing buffered
	// for the table. Default 5m; 0 turns it off (only a CDC change ends a reload).
	ReloadQuietPeriod time.Duration `yaml:"reload_quiet_period"`
}

// The values of Config.Reload.
const (
	ReloadReplace = "replace"
	ReloadUpsert  = "upsert"
)

// TableConfig holds the settings of one source table.
type TableConfig struct {
	// Namespace of the target table. Default: Config.Namespace, else the source schema.
	Namespace string `yaml:"namespace"`
	// Name of the target table. Default: the source table name.
	Name string `yaml:"name"`
	// PrimaryKey names the key columns when DMS sends no table-def (or to override it).
	PrimaryKey []string `yaml:"primary_key"`
	// Columns declares column types in DMS table-def terms, used when the table is created before
	// any create-table control record has been seen. Default: types inferred from values.
	Columns []ColumnSpec `yaml:"columns"`
	// Enabled set to false skips the table like Exclude does. Default true.
	Enabled *bool `yaml:"enabled"`
	// Partition is the partition spec of the target table when it is created, for example
	// [{column: id, transform: bucket, n: 16}]. Equality deletes are partition-scoped, so every
	// partition column must be a primary_key column (which must then be configured). Transforms:
	// identity, bucket (n buckets), truncate (width n), year, month, day, hour. Default:
	// unpartitioned.
	Partition []PartitionField `yaml:"partition"`
	// ExcludeColumns are never written (not even created in the target table). Not allowed on
	// key or partition columns (a key from the table-def pauses the table). Default none.
	ExcludeColumns []string `yaml:"exclude_columns"`
	// HashColumns are stored as the hex HMAC-SHA256 (keyed with Config.HashKey) of the value
	// text DMS sends, in a string column: equal values still join and group, the value is not
	// readable. Allowed on key columns (the key stays unique). Default none.
	HashColumns []string `yaml:"hash_columns"`
	// MaskColumns are stored as the constant "****" (NULL stays NULL) in a string column. Not
	// allowed on key columns: every key would be "****". A configured key is refused by
	// Validate; a key from the table-def or the table pauses the table. Default none.
	MaskColumns []string `yaml:"mask_columns"`
	// TimestampTZ overrides sink.timestamptz for this table's DATETIME/TIMESTAMP columns.
	// Default: sink.timestamptz.
	TimestampTZ *bool `yaml:"timestamptz"`
	// TimestampTZColumns are stored as timestamptz and TimestampColumns as zone-less timestamp,
	// whatever the table's default. Default none.
	TimestampTZColumns []string `yaml:"timestamptz_columns"`
	TimestampColumns   []string `yaml:"timestamp_columns"`
	// AbsentColumns overrides sink.absent_columns for this table: "null" or "keep". Default "":
	// the sink's.
	AbsentColumns string `yaml:"absent_columns"`
	// FlushInterval, FlushRows and FlushBytes override the sink's flush thresholds for this
	// table. Default 0: the sink's.
	FlushInterval time.Duration `yaml:"flush_interval"`
	FlushRows     int           `yaml:"flush_rows"`
	FlushBytes    int64         `yaml:"flush_bytes"`
	// Ordering overrides sink.ordering for this table: "arrival" or "shard". Default "": the
	// sink's.
	Ordering string `yaml:"ordering"`
	// DeleteMode is how deletes stay in the table between compactions (design.md §10.1):
	// "equality" (default; the cheapest write, read by Spark, Flink, Trino and Athena) or
	// "position": the table's maintainer turns every commit's equality deletes into position
	// deletes within sink.maintenance.position_delay, which PyIceberg, Snowflake and Databricks
	// read too, or "dv": the same with deletion vectors, in a table created as format v3
	// (format_version). On a format v2 table the conversion writes Parquet position-delete
	// files, on v3 deletion vectors, whatever the mode says. Needs maintenance enabled.
	DeleteMode string `yaml:"delete_mode"`
	// FormatVersion is the Iceberg format version of the table when the sink creates it: 2 or 3.
	// Default 0: 3 for delete_mode dv, else 2 (what every engine reads). An existing table keeps
	// its version.
	FormatVersion int `yaml:"format_version"`
	// KeylessIdentity overrides sink.keyless_identity for this table: "auto" or "off". Default
	// "": the sink's.
	KeylessIdentity string `yaml:"keyless_identity"`
}

// PartitionField is one field of a table's partition spec.
type PartitionField struct {
	// Column is the source column (a primary-key column).
	Column string `yaml:"column"`
	// Transform is identity (default), bucket, truncate, year, month, day or hour.
	Transform string `yaml:"transform"`
	// N is the bucket count of bucket and the width of truncate.
	N int `yaml:"n"`
}

// DeadLetterConfig selects the dead-letter place.
type DeadLetterConfig struct {
	// Type is "table" (default: an append-only Iceberg table in the sink's catalog) or "file"
	// (JSON lines in the service's dead_letter_file).
	Type string `yaml:"type"`
	// Namespace and Table name the dead-letter table. Defaults "dms2iceberg" and "dead_letters".
	Namespace string `yaml:"namespace"`
	Table     string `yaml:"table"`
	// QueueLength bounds the dead letters waiting for a commit. Default 10000.
	QueueLength int `yaml:"queue_length"`
}

// ColumnSpec declares one column with a DMS type name (either table-def vocabulary).
type ColumnSpec struct {
	Name      string `yaml:"name"`
	Type      string `yaml:"type"`
	Length    int    `yaml:"length"`
	Precision int    `yaml:"precision"`
	Scale     int    `yaml:"scale"`
	// Nullable defaults to true; key columns are always required.
	Nullable *bool `yaml:"nullable"`
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		Catalog:           DefaultCatalogConfig(".data"),
		FlushInterval:     time.Second,
		FlushRows:         50000,
		FlushBytes:        64 << 20,
		QueueLength:       8192,
		CommitRetries:     20,
		CommitTimeout:     2 * time.Minute,
		Maintenance:       maintenance.DefaultConfig(),
		DropTable:         DropTableIgnore,
		AbsentColumns:     AbsentNull,
		Ordering:          OrderingArrival,
		FreshnessInterval: time.Minute,
		KeylessIdentity:   KeylessIdentityAuto,
		DeleteMode:        maintenance.DeleteModeEquality,
		Reload:            ReloadReplace,
		ReloadQuietPeriod: 5 * time.Minute,
		DeadLetters:       DeadLetterConfig{Type: DeadLettersTable, Namespace: "dms2iceberg", Table: "dead_letters", QueueLength: 10000},
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	if err := c.Catalog.Validate(); err != nil {
		return err
	}
	if c.Stream == "" {
		return fmt.Errorf("stream: required")
	}
	if c.FlushInterval <= 0 {
		return fmt.Errorf("sink.flush_interval: must be positive, got %s", c.FlushInterval)
	}
	if c.FlushRows <= 0 {
		return fmt.Errorf("sink.flush_rows: must be positive, got %d", c.FlushRows)
	}
	if c.FlushBytes <= 0 {
		return fmt.Errorf("sink.flush_bytes: must be positive, got %d", c.FlushBytes)
	}
	if c.QueueLength <= 0 {
		return fmt.Errorf("sink.queue_length: must be positive, got %d", c.QueueLength)
	}
	switch c.TimeType {
	case "", "string", "time":
	default:
		return fmt.Errorf("sink.time_type: %q is not string or time", c.TimeType)
	}
	if err := validAbsent(c.AbsentColumns); err != nil {
		return fmt.Errorf("sink.absent_columns: %w", err)
	}
	if err := validOrdering(c.Ordering); err != nil {
		return fmt.Errorf("sink.ordering: %w", err)
	}
	if c.FreshnessInterval < 0 {
		return fmt.Errorf("sink.freshness_interval: must not be negative, got %s", c.FreshnessInterval)
	}
	if err := c.validKeylessIdentity(); err != nil {
		return err
	}
	switch c.Reload {
	case "", ReloadReplace, ReloadUpsert:
	default:
		return fmt.Errorf("sink.reload: %q is not replace or upsert", c.Reload)
	}
	if c.ReloadQuietPeriod < 0 {
		return fmt.Errorf("sink.reload_quiet_period: must not be negative, got %s", c.ReloadQuietPeriod)
	}
	if c.CommitRetries < 0 {
		return fmt.Errorf("sink.commit_retries: must not be negative, got %d", c.CommitRetries)
	}
	if c.CommitTimeout < 0 {
		return fmt.Errorf("sink.commit_timeout: must not be negative, got %s", c.CommitTimeout)
	}
	if err := c.Maintenance.Validate(); err != nil {
		return err
	}
	if err := c.validDeletes(); err != nil {
		return err
	}
	return c.validateTables()
}

// The values of Config.KeylessIdentity.
const (
	KeylessIdentityAuto = "auto"
	KeylessIdentityOff  = "off"
)

func (c Config) validKeylessIdentity() error {
	if err := validIdentity(c.KeylessIdentity); err != nil {
		return fmt.Errorf("sink.keyless_identity: %w", err)
	}
	return nil
}

func validIdentity(v string) error {
	switch v {
	case "", KeylessIdentityAuto, KeylessIdentityOff:
		return nil
	}
	return fmt.Errorf("%q is not auto or off", v)
}

// validDeletes checks the sink-wide delete mode and format version, and that every table whose
// delete mode (its own or the sink's) converts deletes has maintenance to do it.
func (c Config) validDeletes() error {
	if err := validDeletes(c.DeleteMode, c.FormatVersion, func(f string) string { return "sink." + f }); err != nil {
		return err
	}
	if c.Maintenance.Enabled {
		return nil
	}
	if maintenance.Converting(c.DeleteMode) {
		return fmt.Errorf("sink.delete_mode: %s needs sink.maintenance.enabled (the maintainer converts the deletes)", c.DeleteMode)
	}
	for name, t := range c.Tables {
		if maintenance.Converting(t.DeleteMode) {
			return fmt.Errorf("sink.tables[%s].delete_mode: %s needs sink.maintenance.enabled (the maintainer converts the deletes)", name, t.DeleteMode)
		}
	}
	return nil
}
