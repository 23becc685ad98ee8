package sink

import (
	"fmt"
	"time"
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
	// CommitRetries bounds how often one batch is re-staged after a commit conflict. Default 20.
	CommitRetries int `yaml:"commit_retries"`
	// TimestampTZ stores DMS DATETIME columns as timestamptz instead of timestamp. Default false.
	TimestampTZ bool `yaml:"timestamptz"`
	// Namespace overrides the target namespace of every table. Default "": the source schema.
	Namespace string `yaml:"namespace"`
	// Tables holds per-source-table settings keyed by "schema.table". Default none.
	Tables map[string]TableConfig `yaml:"tables"`
}

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
		Catalog:       DefaultCatalogConfig(".data"),
		FlushInterval: time.Second,
		FlushRows:     50000,
		FlushBytes:    64 << 20,
		QueueLength:   8192,
		CommitRetries: 20,
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
	if c.CommitRetries < 0 {
		return fmt.Errorf("sink.commit_retries: must not be negative, got %d", c.CommitRetries)
	}
	for name, t := range c.Tables {
		for i, col := range t.Columns {
			if col.Name == "" || col.Type == "" {
				return fmt.Errorf("sink.tables[%s].columns[%d]: name and type are required", name, i)
			}
		}
	}
	return nil
}
