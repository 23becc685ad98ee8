package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

func init() { commands["run"] = runService }

func runService(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfgPath := fs.String("config", os.Getenv("DMS2ICEBERG_CONFIG"), "YAML configuration file (env DMS2ICEBERG_CONFIG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	// Crash-anywhere tests only: kill the process at named points (pkg/fault).
	if err := fault.Configure(os.Getenv("DMS2ICEBERG_FAULTS")); err != nil {
		return fmt.Errorf("DMS2ICEBERG_FAULTS: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	return serve(ctx, cfg, log)
}

func newLogger(cfg Config) (*zap.Logger, error) {
	var zc zap.Config
	if cfg.LogFormat == "json" {
		zc = zap.NewProductionConfig()
	} else {
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}

// serve runs the sink and the consumer until ctx ends, then shuts down in two phases: the
// consumer stops intake and each shard processor flushes, commits and checkpoints; then the sink
// commits anything left and its writers exit.
func serve(ctx context.Context, cfg Config, log *zap.Logger) error {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
	if err != nil {
		return fmt.Errorf("load AWS configuration: %w", err)
	}
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		return err
	}
	dlq, err := sink.OpenFileDeadLetters(cfg.DeadLetterFile)
	if err != nil {
		return err
	}
	defer func() { _ = dlq.Close() }()
	snk, err := sink.New(cfg.Sink, cat, dlq, sink.WithLogger(log))
	if err != nil {
		return err
	}
	cons, err := consumer.New(consumer.Config{
		Stream: cfg.Stream, Application: cfg.Application, WorkerID: cfg.WorkerID, Region: cfg.Region,
		AtTimestamp: cfg.InitialTimestamp, ShardSync: cfg.Consumer.ShardSync, Failover: cfg.Consumer.Failover,
		IdleBetweenReads: cfg.Consumer.IdleBetweenReads, MaxRecords: cfg.Consumer.MaxRecords,
		ShutdownTimeout: cfg.ShutdownTimeout, Decoder: cfg.DMS,
	}, awsCfg, snk, dlq, consumer.WithLogger(log))
	if err != nil {
		return err
	}
	log.Info("starting", zap.String("stream", cfg.Stream), zap.String("worker", cfg.WorkerID),
		zap.String("catalog", cfg.Sink.Catalog.Type), zap.String("warehouse", cfg.Sink.Catalog.Warehouse))

	// The sink outlives the consumer: it must still commit while processors drain at shutdown.
	sinkCtx, cancelSink := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSink()
	consCtx, cancelCons := context.WithCancel(ctx)
	defer cancelCons()
	var g errgroup.Group
	g.Go(func() error {
		err := snk.Run(sinkCtx)
		cancelCons() // a failed writer stops intake
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("sink: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		err := cons.Run(consCtx)
		closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = snk.Close(closeCtx)
		if closeCtx.Err() != nil {
			cancelSink()
		}
		if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		return nil
	})
	err = g.Wait()
	if err == nil {
		log.Info("stopped cleanly")
	}
	return err
}
