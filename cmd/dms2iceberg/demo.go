package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sync/errgroup"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

const demoUsage = `usage: dms2iceberg demo [flags]

Runs the service on the embedded default configuration (SQLite catalog and local warehouse under
data_dir, or the file of --config) and, in the same process, writes endless generated DMS
traffic to the stream, until Ctrl-C. The Kinesis and DynamoDB endpoints come from the
environment (local emulators: AWS_ENDPOINT_URL_KINESIS, AWS_ENDPOINT_URL_DYNAMODB).

flags:
`

// demoHeartbeat is the demo's consumer.heartbeat_interval on the embedded default.
const demoHeartbeat = 250 * time.Millisecond

// runDemo runs the service on the embedded default (SQLite catalog and local warehouse under
// data_dir) and, in the same process, writes endless generated DMS traffic to the stream, until
// Ctrl-C. The Kinesis and DynamoDB endpoints come from the environment (local emulators).
func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", demoUsage).withConfig("optional YAML configuration (default: the embedded default)")
	stream := fs.String("stream", "dms2iceberg-demo", "Kinesis stream (created if missing)")
	shards := fs.Int("shards", 4, "shard count when the stream is created")
	rate := fs.Float64("rate", 200, "generated records per second")
	if err := fs.parse(args); err != nil {
		return err
	}
	if !fs.hasConfig() && os.Getenv("DMS2ICEBERG_STREAM") == "" {
		_ = os.Setenv("DMS2ICEBERG_STREAM", *stream)
	}
	cfg, err := fs.config()
	if err != nil {
		return err
	}
	if err := demoTables(&cfg.Sink); err != nil {
		return err
	}
	if !fs.hasConfig() && cfg.Consumer.HeartbeatInterval == 0 {
		// The demo's stream is its own, so heartbeat records bother no other consumer there,
		// and they make its tables fresher (consumer.heartbeat_interval).
		cfg.Consumer.HeartbeatInterval = demoHeartbeat
	}
	if err := cfg.requireRegion(ctx); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	client, err := kinesisClient(ctx, cfg.Region)
	if err != nil {
		return err
	}
	if err := ensureStream(ctx, client, cfg.Stream, int32(*shards), os.Stderr); err != nil {
		return err
	}
	log.Info("demo: writing generated DMS traffic and merging it into Iceberg; Ctrl-C stops",
		zap.String("stream", cfg.Stream), zap.Float64("records_per_second", *rate),
		zap.String("warehouse", cfg.Sink.Catalog.Warehouse), zap.String("catalog", cfg.Sink.Catalog.URI))

	gen := workload.New(workload.Config{Seed: time.Now().UnixNano(), LoadRows: 200, TimestampTZ: cfg.Sink.TimestampTZ})
	var g errgroup.Group
	g.Go(func() error {
		s := &sender{api: client, stream: cfg.Stream, rate: *rate, out: io.Discard}
		err := s.send(ctx, gen.Stream(ctx))
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("demo traffic: %w", err)
		}
		return nil
	})
	g.Go(func() error { return serve(ctx, cfg, log) })
	return g.Wait()
}

// demoTables adds the generated tables' keys and column types to the sink configuration, unless
// the configuration already names them.
func demoTables(c *sink.Config) error {
	b, err := tablesConfigYAML(c.TimestampTZ)
	if err != nil {
		return err
	}
	var frag struct {
		Sink struct {
			Tables map[string]sink.TableConfig `yaml:"tables"`
		} `yaml:"sink"`
	}
	if err := yaml.Unmarshal(b, &frag); err != nil {
		return fmt.Errorf("demo tables: %w", err)
	}
	if c.Tables == nil {
		c.Tables = map[string]sink.TableConfig{}
	}
	for k, v := range frag.Sink.Tables {
		if _, ok := c.Tables[k]; !ok {
			c.Tables[k] = v
		}
	}
	return nil
}
