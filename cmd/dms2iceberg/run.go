package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"go.uber.org/zap"
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

// serve runs the sink and the consumer until ctx ends, then shuts down in two phases: the
// consumer stops intake and each shard processor flushes, commits and checkpoints; then the sink
// commits anything left and its writers exit. Alongside run the operations surface (/metrics,
// /healthz, /readyz on http_addr) and the post-commit hook's worker; both stop after the
// pipeline (the hook first runs what is queued, within shutdown_timeout).
func serve(ctx context.Context, cfg Config, log *zap.Logger) error {
	defer routeLibraryLogs(log)()
	metrics := newPromMetrics()
	hc := &health{onChange: metrics.SetReady}
	var ops *opsServer
	if cfg.HTTPAddr != "" {
		var err error
		ops, err = listenOps(cfg.HTTPAddr, metrics.reg, hc, log)
		switch {
		case err != nil && cfg.httpAddrSet:
			return fmt.Errorf("http_addr: %w", err)
		case err != nil:
			log.Error("cannot serve /metrics on the default http_addr; running without it (set http_addr, or \"\" to disable)",
				zap.String("http_addr", cfg.HTTPAddr), zap.Error(err))
		}
	}

	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region), awsconfig.WithLogger(awsLogger(log)))
	if err != nil {
		return fmt.Errorf("load AWS configuration: %w", err)
	}
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		return err
	}
	hc.CatalogOpened()
	dlq, closeDLQ, err := openDeadLetters(cfg)
	if err != nil {
		return err
	}
	defer closeDLQ()
	var hook *postCommitHook
	sinkOpts := []sink.Option{sink.WithLogger(log), sink.WithMetrics(metrics)}
	if cfg.PostCommit.Enabled() {
		hook = newPostCommitHook(cfg.PostCommit, log, metrics)
		sinkOpts = append(sinkOpts, sink.WithCommitListener(hook.Notify))
	}
	snk, err := sink.New(cfg.Sink, cat, dlq, sinkOpts...)
	if err != nil {
		return err
	}
	cons, err := consumer.New(consumer.Config{
		Stream: cfg.Stream, Application: cfg.Application, WorkerID: cfg.WorkerID, Region: cfg.Region,
		AtTimestamp: cfg.InitialTimestamp, ShardSync: cfg.Consumer.ShardSync, Failover: cfg.Consumer.Failover,
		IdleBetweenReads: cfg.Consumer.IdleBetweenReads, MaxRecords: cfg.Consumer.MaxRecords,
		ShutdownTimeout: cfg.ShutdownTimeout, Decoder: cfg.DMS,
	}, awsCfg, snk, snk.DeadLetters(), consumer.WithLogger(log), consumer.WithMetrics(metrics.consumer()),
		consumer.WithKCLMonitoring(kclMonitor{promMetrics: metrics, onStart: hc.KCLStarted, onStop: hc.KCLStopped}))
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
	// Not ready from the first signal on.
	stopReadyWatch := context.AfterFunc(ctx, hc.ShuttingDown)
	defer stopReadyWatch()
	// The operations surface and the hook outlive the pipeline: the end of the pipeline stops
	// the server and closes the hook's intake; the hook then runs what is queued, within the
	// shutdown timeout.
	opsCtx, stopOps := context.WithCancel(context.Background())
	defer stopOps()
	hookCtx, stopHook := context.WithCancel(context.Background())
	defer stopHook()
	var g errgroup.Group
	g.Go(func() error {
		defer func() {
			stopOps()
			if hook != nil {
				hook.Close()
				time.AfterFunc(cfg.ShutdownTimeout, stopHook)
			}
		}()
		var pipe errgroup.Group
		pipe.Go(func() error {
			err := snk.Run(sinkCtx)
			cancelCons() // a failed writer stops intake
			if err != nil && !errors.Is(err, context.Canceled) {
				hc.Failed(err)
				return fmt.Errorf("sink: %w", err)
			}
			return nil
		})
		pipe.Go(func() error {
			err := cons.Run(consCtx)
			closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			_ = snk.Close(closeCtx)
			if closeCtx.Err() != nil {
				cancelSink()
			}
			if err != nil {
				hc.Failed(err)
				return fmt.Errorf("consumer: %w", err)
			}
			return nil
		})
		return pipe.Wait()
	})
	if ops != nil {
		g.Go(func() error { return ops.Run(opsCtx) })
	}
	if hook != nil {
		g.Go(func() error { return hook.Run(hookCtx) })
	}
	err = g.Wait()
	if err == nil {
		log.Info("stopped cleanly")
	}
	return err
}
