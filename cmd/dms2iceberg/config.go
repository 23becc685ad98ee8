package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// Config is the whole service configuration: a YAML file (--config) with environment overrides
// (DMS2ICEBERG_STREAM, DMS2ICEBERG_DATA_DIR, DMS2ICEBERG_WORKER_ID) and the region from the AWS
// SDK's chain when the file sets none (region.go). In the file, ${VAR} and ${VAR:-default} take
// values from the environment, and size settings accept units (64MiB, 1GiB; configload.go).
type Config struct {
	// Stream is the Kinesis stream DMS writes to. Required.
	Stream string `yaml:"stream"`
	// Region is the AWS region of every client (Kinesis, DynamoDB, Glue, S3, SigV4). Default:
	// the AWS SDK's chain (AWS_REGION, AWS_DEFAULT_REGION, the profile's region, then EC2
	// instance metadata); see region.go.
	Region string `yaml:"region"`
	// Application names the KCL application and its DynamoDB lease table.
	// Default "dms2iceberg-<stream>".
	Application string `yaml:"application"`
	// WorkerID identifies this worker in the lease table. Default "<hostname>-<pid>".
	WorkerID string `yaml:"worker_id"`
	// InitialPosition is TRIM_HORIZON (default) or AT_TIMESTAMP. LATEST is refused: it loses the
	// records written to child shards before they are leased.
	InitialPosition string `yaml:"initial_position"`
	// InitialTimestamp is required with AT_TIMESTAMP (RFC 3339).
	InitialTimestamp time.Time `yaml:"initial_timestamp"`
	// DataDir holds the embedded catalog, the local warehouse and the dead-letter file.
	// Default ".data".
	DataDir string `yaml:"data_dir"`
	// DeadLetterFile is where records that cannot be applied are written (JSON lines), with the
	// reason. Default "<data_dir>/dead-letters.jsonl".
	DeadLetterFile string `yaml:"dead_letter_file"`
	// ShutdownTimeout bounds the graceful shutdown (flush, commit, checkpoint). Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// DMS configures the decoder (before-image field name, BI_ columns).
	DMS dms.Config `yaml:"dms"`
	// LogFormat is "console" (default) or "json".
	LogFormat string `yaml:"log_format"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// Sink configures catalogs, flushing and tables.
	Sink sink.Config `yaml:"sink"`
	// Consumer configures the KCL worker (the consumer section; resolve sets its stream,
	// application, worker_id, region, initial_timestamp, shutdown_timeout and dms from the
	// top-level keys).
	Consumer consumer.Config `yaml:"consumer"`
	// HTTPAddr is where /metrics, /healthz and /readyz are served. Default "127.0.0.1:9464";
	// "" disables the server; port 0 picks a free port (logged). When the default address is
	// taken the service logs an error and runs without the server; an address set in the file
	// that cannot be bound stops the service.
	HTTPAddr string `yaml:"http_addr"`
	// StallTimeout is how long records handed on to the sink may wait without a commit and a
	// checkpoint of their shard before /healthz fails (503), so that a liveness probe restarts
	// a stuck process. Default 0: 3 × the longest flush_interval (sink or table) +
	// shutdown_timeout. Negative disables the check.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// PostCommit configures the optional command or HTTP call after each table commit.
	// Default: none.
	PostCommit PostCommitConfig `yaml:"post_commit"`

	// httpAddrSet records that http_addr came from the file (binding it must then succeed).
	httpAddrSet bool
}

// PostCommitConfig configures the post-commit hook: after each commit of a table, a command
// and/or an HTTP POST is run with the table and snapshot id (for example to run Snowflake's
// ALTER ICEBERG TABLE ... REFRESH). Runs are asynchronous, one at a time, and never block
// ingestion: when the queue is full, the oldest pending notification of the same table (else the
// oldest of any table) is dropped and counted. Failures are logged and counted, never fatal.
type PostCommitConfig struct {
	// Command is the argv to execute (no shell), with the environment of the service plus
	// DMS2ICEBERG_TABLE, DMS2ICEBERG_SOURCE, DMS2ICEBERG_SNAPSHOT_ID, DMS2ICEBERG_ROWS,
	// DMS2ICEBERG_DELETES and DMS2ICEBERG_COMMITTED_AT. A non-zero exit is a failure. Default none.
	Command []string `yaml:"command"`
	// URL receives a JSON POST {"table","source","snapshot_id","rows","deletes","committed_at"}
	// (snapshot_id as a decimal string: it does not fit a JSON double). A non-2xx answer is a
	// failure. Default none.
	URL string `yaml:"url"`
	// Headers are added to the POST (for example Authorization). Default none.
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one run (command and POST each); the command's process group is killed
	// then. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// QueueLength bounds the notifications waiting for the hook. Default 1000.
	QueueLength int `yaml:"queue_length"`
}

// Enabled reports whether a command or URL is configured.
func (p PostCommitConfig) Enabled() bool { return len(p.Command) > 0 || p.URL != "" }

// defaultHTTPAddr is the default of http_addr: loopback only, until configured otherwise.
const defaultHTTPAddr = "127.0.0.1:9464"

// defaultConfig returns the documented defaults; shutdown_timeout and dms are the consumer's.
func defaultConfig() Config {
	host, _ := os.Hostname()
	cons := consumer.DefaultConfig()
	return Config{
		WorkerID:        fmt.Sprintf("%s-%d", host, os.Getpid()),
		InitialPosition: "TRIM_HORIZON",
		DataDir:         ".data",
		ShutdownTimeout: cons.ShutdownTimeout,
		DMS:             cons.Decoder,
		LogFormat:       "console",
		LogLevel:        "info",
		Sink:            sink.DefaultConfig(),
		HTTPAddr:        defaultHTTPAddr,
		PostCommit:      PostCommitConfig{Timeout: 10 * time.Second, QueueLength: 1000},
		Consumer:        cons,
	}
}

// loadConfig reads the YAML file (optional) over the defaults, then applies the environment.
func loadConfig(path string) (Config, error) {
	cfg := defaultConfig()
	catalogSet := false
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		b, lines, err := prepareConfig(b, lookupEnv)
		if err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
		var probe struct {
			Sink struct {
				Catalog map[string]any `yaml:"catalog"`
			} `yaml:"sink"`
			HTTPAddr *string `yaml:"http_addr"`
		}
		if err := yaml.Unmarshal(b, &probe); err != nil {
			return cfg, fmt.Errorf("parse config %s: %w", path, err)
		}
		catalogSet = len(probe.Sink.Catalog) > 0
		cfg.httpAddrSet = probe.HTTPAddr != nil
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, namePaths(err, lines))
		}
	}
	if v := os.Getenv("DMS2ICEBERG_STREAM"); v != "" {
		cfg.Stream = v
	}
	if v := os.Getenv("DMS2ICEBERG_DATA_DIR"); v != "" {
		cfg.DataDir = v
	}
	if v := os.Getenv("DMS2ICEBERG_WORKER_ID"); v != "" {
		cfg.WorkerID = v
	}
	if !catalogSet {
		abs, err := filepath.Abs(cfg.DataDir)
		if err != nil {
			return cfg, fmt.Errorf("data_dir: %w", err)
		}
		cfg.Sink.Catalog = sink.DefaultCatalogConfig(abs)
	}
	cfg.resolve()
	if err := cfg.resolveRegion(context.Background()); err != nil {
		return cfg, err
	}
	if err := applyTableEnv(&cfg.Sink, os.Getenv); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// resolve fills what follows from other keys: the defaults named after the stream and the data
// directory, and the sections' fields that come from top-level keys (sink.Config.Stream,
// consumer.Config's identity). loadConfig calls it; call it again after changing those keys.
func (c *Config) resolve() {
	if c.Application == "" && c.Stream != "" {
		c.Application = "dms2iceberg-" + c.Stream
	}
	if c.DeadLetterFile == "" {
		c.DeadLetterFile = filepath.Join(c.DataDir, "dead-letters.jsonl")
	}
	c.Sink.Stream = c.Stream
	c.Sink.DMS = c.DMS // the dead letters' redaction finds add-before-image-columns columns with it
	// The maintenance lease names this worker, like its shard leases.
	c.Sink.Maintenance.Owner = c.WorkerID
	c.Consumer.Stream, c.Consumer.Application = c.Stream, c.Application
	c.Consumer.WorkerID, c.Consumer.Region = c.WorkerID, c.Region
	c.Consumer.AtTimestamp = c.InitialTimestamp
	c.Consumer.ShutdownTimeout = c.ShutdownTimeout
	c.Consumer.Decoder = c.DMS
	// A commit bound older than a flush interval would make every flush wait for the next one.
	if f := c.Sink.FlushInterval; f > 0 && (c.Consumer.HorizonInterval <= 0 || c.Consumer.HorizonInterval > f) {
		c.Consumer.HorizonInterval = f
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	if c.Stream == "" {
		return fmt.Errorf("stream: required (set it in the config file or DMS2ICEBERG_STREAM)")
	}
	switch c.InitialPosition {
	case "TRIM_HORIZON":
	case "AT_TIMESTAMP":
		if c.InitialTimestamp.IsZero() {
			return fmt.Errorf("initial_timestamp: required with initial_position AT_TIMESTAMP")
		}
	case "LATEST":
		return fmt.Errorf("initial_position: LATEST is refused: it skips records written to child shards before they are leased; use TRIM_HORIZON or AT_TIMESTAMP")
	default:
		return fmt.Errorf("initial_position: %q is not TRIM_HORIZON or AT_TIMESTAMP", c.InitialPosition)
	}
	// region, worker_id, shutdown_timeout, dms and the consumer section.
	if err := c.Consumer.Validate(); err != nil {
		return err
	}
	switch c.LogFormat {
	case "console", "json":
	default:
		return fmt.Errorf("log_format: %q is not console or json", c.LogFormat)
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fmt.Errorf("http_addr: %q is not host:port: %w", c.HTTPAddr, err)
		}
	}
	if err := c.PostCommit.Validate(); err != nil {
		return err
	}
	return c.Sink.Validate()
}

// stallTimeout is StallTimeout with its default (0 for a negative value: no check).
func (c Config) stallTimeout() time.Duration {
	switch {
	case c.StallTimeout < 0:
		return 0
	case c.StallTimeout > 0:
		return c.StallTimeout
	}
	flush := c.Sink.FlushInterval
	for _, t := range c.Sink.Tables {
		flush = max(flush, t.FlushInterval)
	}
	return 3*flush + c.ShutdownTimeout
}

// Validate reports the first invalid post_commit field.
func (p PostCommitConfig) Validate() error {
	if len(p.Command) > 0 && p.Command[0] == "" {
		return fmt.Errorf("post_commit.command: the program (first element) must not be empty")
	}
	if p.URL != "" {
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("post_commit.url: %q is not an http:// or https:// URL", p.URL)
		}
	}
	if p.Timeout <= 0 {
		return fmt.Errorf("post_commit.timeout: must be positive, got %s", p.Timeout)
	}
	if p.QueueLength <= 0 {
		return fmt.Errorf("post_commit.queue_length: must be positive, got %d", p.QueueLength)
	}
	return nil
}
