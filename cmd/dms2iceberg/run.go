package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

const runUsage = `usage: dms2iceberg run [--config FILE]

Consumes the Kinesis stream and merges the DMS changes into Iceberg tables until SIGINT or
SIGTERM; then it stops reading, commits what is buffered and writes the last checkpoints within
shutdown_timeout, one deadline for every stage (the process exits at most 5 s after it; a
second signal exits at once). The configuration is the YAML file over the
defaults, with the environment overrides DMS2ICEBERG_STREAM, DMS2ICEBERG_DATA_DIR and
DMS2ICEBERG_WORKER_ID. Every AWS client uses one region: region in the file, else the AWS SDK's
chain (AWS_REGION, AWS_DEFAULT_REGION, the profile's region, EC2 instance metadata).

flags:
`

func runService(ctx context.Context, args []string) error {
	fs := newFlags("run", runUsage).withConfig("YAML configuration file")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, err := fs.validConfig(ctx)
	if err != nil {
		return err
	}
	// Crash-anywhere tests only: kill the process at named points (pkg/fault). A no-op that
	// reads nothing unless the binary was built with -tags faults.
	if err := fault.ConfigureFromEnv(); err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	return serve(ctx, cfg, log)
}

// serve wires the service and runs it as a pipeline (see pipeline for the two-phase stop and
// its one deadline): the sink and the consumer, with the operations surface (/metrics,
// /healthz, /readyz on http_addr) and the post-commit hook's worker beside them; both stop
// after the pipeline (the hook first runs what is queued, until the shutdown deadline).
func serve(ctx context.Context, cfg Config, log *zap.Logger) error {
	defer routeLibraryLogs(log)()
	metrics := newPromMetrics()
	metrics.consumer.stall.setTimeout(cfg.stallTimeout())
	hc := &health{onChange: metrics.SetReady, stall: metrics.consumer.stall}
	p := &pipeline{shutdownTimeout: cfg.ShutdownTimeout, onStopping: hc.ShuttingDown, onFailed: hc.Failed}
	if cfg.HTTPAddr != "" {
		ops, err := listenOps(cfg.HTTPAddr, metrics.reg, hc, log)
		switch {
		case err != nil && cfg.httpAddrSet:
			return fmt.Errorf("http_addr: %w", err)
		case err != nil:
			log.Error("cannot serve /metrics on the default http_addr; running without it (set http_addr, or \"\" to disable)",
				zap.String("http_addr", cfg.HTTPAddr), zap.Error(err))
		default:
			ops.shutdownBy = func() time.Time { return p.deadline().Add(consumer.ShutdownSlack) }
			p.companions = append(p.companions, companion{run: ops.Run})
		}
	}

	awsCfg, err := cfg.awsConfig(ctx, awsconfig.WithLogger(awsLogger(log)))
	if err != nil {
		return err
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
	// The ordering guard commits only what arrived at or before the consumer's commit bound. The
	// sink is built first (the consumer hands events to it), so the bound is read through cons
	// once it exists; until then nothing may commit.
	var cons atomic.Pointer[consumer.Consumer]
	bound := func() sink.Bound {
		if c := cons.Load(); c != nil {
			b := c.CommitBounds()
			return sink.Bound{At: b.Bound, Gates: b.Gates}
		}
		return sink.Bound{}
	}
	// One byte budget for the process: the consumer's readers admit against it, the sink
	// flushes early when they wait.
	budget := membudget.New(cfg.Consumer.MaxInflightBytes)
	metrics.watchBudget(budget)
	memLimit, limiter := applyMemoryLimit(budget)
	gogc := applyGCPercent()
	if limiter != nil {
		p.companions = append(p.companions, companion{run: limiter.run})
	}
	log.Info("memory", zap.Int64("max_inflight_bytes", budget.Limit()), zap.Int64("go_memory_limit", memLimit),
		zap.Bool("from_GOMEMLIMIT", limiter == nil), zap.Bool("follows_budget", limiter != nil), zap.Int("gogc", gogc))
	sinkOpts := []sink.Option{sink.WithLogger(log), sink.WithMemoryBudget(budget), sink.WithMetrics(metrics.sink), sink.WithMaintenanceMetrics(metrics.maintenance),
		sink.WithCommitBounds(bound), sink.WithBoundsChanged(func() <-chan struct{} {
			if c := cons.Load(); c != nil {
				return c.BoundsChanged()
			}
			return nil
		})}
	if cfg.PostCommit.Enabled() {
		hook := newPostCommitHook(cfg.PostCommit, log, metrics.hook)
		sinkOpts = append(sinkOpts, sink.WithCommitListener(hook.Notify))
		p.companions = append(p.companions, companion{run: hook.Run, drain: hook.Close})
	}
	snk, err := sink.New(cfg.Sink, cat, dlq, sinkOpts...)
	if err != nil {
		return err
	}
	metrics.sink.watchBuffers(snk.Buffers)
	metrics.sink.watchKeyCache(snk.KeyCache)
	if limiter != nil {
		limiter.watchCache(func() int64 { return snk.KeyCache().Held })
	}
	c, err := consumer.New(cfg.Consumer, awsCfg, snk, snk.DeadLetters(), consumer.WithLogger(log), consumer.WithMetrics(metrics.consumer),
		consumer.WithBudget(budget),
		consumer.WithShutdownDeadline(p.deadline),
		consumer.WithKCLMonitoring(kclMonitor{promKCLMetrics: metrics.kcl, onStart: hc.KCLStarted, onStop: hc.KCLStopped}))
	if err != nil {
		return err
	}
	cons.Store(c)
	metrics.leases.watch(c.LeaseShare)
	p.sink, p.intake = snk, c
	log.Info("starting", zap.String("stream", cfg.Stream), zap.String("worker", cfg.WorkerID),
		zap.String("catalog", cfg.Sink.Catalog.Type), zap.String("warehouse", cfg.Sink.Catalog.Warehouse))
	if err := p.run(ctx); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}
