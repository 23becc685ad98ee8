package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	kclcfg "github.com/vmware/vmware-go-kcl-v2/clientlibrary/config"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	kclmetrics "github.com/vmware/vmware-go-kcl-v2/clientlibrary/metrics"
	kclworker "github.com/vmware/vmware-go-kcl-v2/clientlibrary/worker"
	kcllog "github.com/vmware/vmware-go-kcl-v2/logger"
	kclzap "github.com/vmware/vmware-go-kcl-v2/logger/zap"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// Sink is what the consumer needs from the Iceberg side.
type Sink interface {
	// Submit hands over one event; it blocks while the event's table is backed up.
	Submit(ctx context.Context, ev *change.Event) error
	// Flush commits everything submitted so far.
	Flush(ctx context.Context) error
}

// KeyColumner is a Sink that knows the key columns of the tables it writes (nil: not known;
// empty: a keyless table, whose updates are never key changes). With it, an update whose
// before-image differs from its after-image only outside the key (MySQL's full before-images)
// is tracked as a CDC change, and a key change is published by its old key, not as a move of an
// unknown key, which holds the table's later changes on the other workers (design.md §4).
type KeyColumner interface {
	KeyColumns(schema, table string) []string
}

// Metrics receives the consumer's measurements. Implementations are safe for concurrent use.
type Metrics interface {
	// Records counts records read from a shard (heartbeat records not included: Heartbeats
	// counts them) and its lag.
	Records(shard string, n int, millisBehind int64)
	// DeadLettered counts undecodable records of a shard.
	DeadLettered(shard string)
	// Checkpointed reports a written checkpoint.
	Checkpointed(shard, seq string)
	// Fenced counts checkpoints refused because the lease moved on.
	Fenced(shard string)
	// TrimmedPast reports a checkpoint older than the stream's retention: records after it may
	// have been trimmed before they were read.
	TrimmedPast(shard string)
	// WaitingForParents reports whether a child shard is held back until its parents finish.
	WaitingForParents(shard string, waiting bool)
	// StreamWatermark is called every HorizonInterval with W (zero: unknown), its age (now - W;
	// 0 when unknown), and the shard holding it back with its lease owner ("" when none).
	StreamWatermark(w time.Time, age time.Duration, holder, owner string)
	// HorizonPublishFailed counts a failed publish of a shard's horizon (fenced or an error).
	HorizonPublishFailed(shard string)
	// ReadAheadPaused reports how long a shard's processor paused for read-ahead alignment.
	ReadAheadPaused(shard string, d time.Duration)
	// Heartbeats counts heartbeat records of a shard (heartbeat.go): event "put", "put_failed"
	// or "read".
	Heartbeats(shard, event string, n int)
	// LeaseStateRefused counts a lease not taken because its row was written by a newer state
	// version of dms2iceberg.
	LeaseStateRefused(shard string)
	// LateRecords counts n records of a shard handed on although they arrived at or before its
	// read horizon (by: how far the oldest was before it; margin.go).
	LateRecords(shard string, n int, by time.Duration)
	// ArrivalMargin is called every HorizonInterval with the arrival margin in use (margin.go).
	ArrivalMargin(d time.Duration)
}

// NopMetrics is the default Metrics: it records nothing. Embed it to implement only some methods.
type NopMetrics struct{}

func (NopMetrics) Records(string, int, int64)                               {}
func (NopMetrics) DeadLettered(string)                                      {}
func (NopMetrics) Checkpointed(string, string)                              {}
func (NopMetrics) Fenced(string)                                            {}
func (NopMetrics) TrimmedPast(string)                                       {}
func (NopMetrics) WaitingForParents(string, bool)                           {}
func (NopMetrics) StreamWatermark(time.Time, time.Duration, string, string) {}
func (NopMetrics) HorizonPublishFailed(string)                              {}
func (NopMetrics) ReadAheadPaused(string, time.Duration)                    {}
func (NopMetrics) LeaseStateRefused(string)                                 {}
func (NopMetrics) Heartbeats(string, string, int)                           {}
func (NopMetrics) LateRecords(string, int, time.Duration)                   {}
func (NopMetrics) ArrivalMargin(time.Duration)                              {}

// Option configures optional collaborators.
type Option func(*Consumer)

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(c *Consumer) { c.log = l.Named("consumer") } }

// WithMetrics sets the metrics receiver.
func WithMetrics(m Metrics) Option { return func(c *Consumer) { c.metrics = m } }

// WithBudget sets the process-wide byte budget the shard processors admit their deliveries
// against (cmd shares it with the sink, which flushes early under pressure). Default: a budget
// of Config.MaxInflightBytes of the consumer's own.
func WithBudget(b *membudget.Budget) Option { return func(c *Consumer) { c.budget = b } }

// ShutdownSlack is how long past the shutdown deadline Run still waits for the KCL worker to
// stop: the shard processors' drains end at the deadline, then they may still write their last
// checkpoint and release their leases. A process that stops gracefully exits within
// shutdown_timeout plus this slack (docs/deploy.md: terminationGracePeriodSeconds).
const ShutdownSlack = 5 * time.Second

// WithShutdownDeadline makes the graceful stop end by the process's shutdown deadline: deadline
// is called once Run's context ends (and returns the same instant every time; cmd starts it at
// the first signal, so that the consumer, the sink and the post-commit hook share one deadline).
// Default: ShutdownTimeout from the moment Run's context ends.
func WithShutdownDeadline(deadline func() time.Time) Option {
	return func(c *Consumer) { c.deadline = deadline }
}

// WithKCLMonitoring plugs a KCL MonitoringService into the worker (lease events, lag, timings).
func WithKCLMonitoring(m kclmetrics.MonitoringService) Option {
	return func(c *Consumer) { c.kclMon = m }
}

// Consumer runs the KCL worker.
type Consumer struct {
	cfg     Config
	aws     aws.Config
	sink    Sink
	dlq     change.DeadLetterer
	log     *zap.Logger
	metrics Metrics
	kclMon  kclmetrics.MonitoringService
	// budget is the byte budget of records handed on and not finished (nil: none; tests).
	budget *membudget.Budget

	leases checkpoint.LeaseStore
	// share balances the leases across workers (handoff.go); nil: no balancing (unit tests).
	// Set by Run; LeaseShare reads it from any goroutine.
	share  atomic.Pointer[balancer]
	kc     KinesisAPI
	shards *shardMap

	// wm is the stream watermark and commit bound the horizon loop computes (horizon.go);
	// clock is the time source (nil: time.Now) and sleeper the read spacing's wait (nil: a
	// timer), both replaced in tests.
	wm    watermarkState
	clock func() time.Time
	// margin measures the arrival margin from the shards' reads (margin.go; nil: the fixed
	// cfg.ArrivalMargin, unit tests).
	margin  *marginMeter
	sleeper func(ctx context.Context, d time.Duration)

	// deadline is the shutdown deadline's source (WithShutdownDeadline); stopBy the deadline of
	// the graceful stop under way (zero while running).
	deadline func() time.Time

	mu     sync.Mutex
	fatal  error
	fail   context.CancelCauseFunc
	gen    map[string]*processor // newest processor per shard
	stopBy time.Time
}

// New returns a consumer of a valid cfg (start from DefaultConfig). awsCfg supplies credentials and endpoints (AWS_ENDPOINT_URL_KINESIS,
// AWS_ENDPOINT_URL_DYNAMODB are honoured by the SDK).
func New(cfg Config, awsCfg aws.Config, s Sink, dlq change.DeadLetterer, opts ...Option) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &Consumer{cfg: cfg, aws: awsCfg, sink: s, dlq: dlq, log: zap.NewNop(), metrics: NopMetrics{}, gen: make(map[string]*processor)}
	for _, o := range opts {
		o(c)
	}
	if c.budget == nil {
		c.budget = membudget.New(cfg.MaxInflightBytes)
	}
	c.margin = newMarginMeter(cfg.ArrivalMarginFloor, durOr(cfg.ArrivalMargin, DefaultArrivalMargin))
	return c, nil
}

// parentPollMillis is how often a child shard's KCL consumer reads its parent's lease row while
// it waits for the parent to finish.
const parentPollMillis = 1000

// kclConfig is the KCL worker's configuration from the consumer's.
func (c *Consumer) kclConfig() *kclcfg.KinesisClientLibConfiguration {
	kcfg := kclcfg.NewKinesisClientLibConfig(c.cfg.Application, c.cfg.Stream, c.cfg.Region, c.cfg.WorkerID).
		WithTableName(c.cfg.Application).
		WithShardSyncIntervalMillis(int(c.cfg.ShardSync.Milliseconds())).
		WithFailoverTimeMillis(int(c.cfg.Failover.Milliseconds())).
		WithLeaseRefreshWaitTime(int(leaseRenewEvery(c.cfg.Failover).Milliseconds())).
		WithIdleTimeBetweenReadsInMillis(int(c.cfg.IdleBetweenReads.Milliseconds())).
		WithMaxRecords(c.cfg.MaxRecords).
		WithCallProcessRecordsEvenForEmptyRecordList(true).
		WithLeaseStealing(false).
		WithLogger(kclLogger{kclzap.NewZapLogger(c.log.Named("kcl").Sugar())}).
		WithMonitoringService(c.kclMon) // nil: the KCL's no-op
	// A child shard's consumer polls its parent's row this often (the KCL's default is 10 s) and
	// cannot be stopped between polls (kclCheckpointer).
	kcfg.ParentShardPollIntervalMillis = parentPollMillis
	if c.cfg.AtTimestamp.IsZero() {
		kcfg = kcfg.WithInitialPositionInStream(kclcfg.TRIM_HORIZON)
	} else {
		ts := c.cfg.AtTimestamp
		kcfg = kcfg.WithTimestampAtInitialPositionInStream(&ts)
	}
	return kcfg
}

// Run consumes until ctx is cancelled, then shuts the worker down gracefully: every processor
// flushes, waits for its commits and writes its final checkpoint, within ShutdownTimeout. It
// returns the first fatal error (a sink or dead-letter failure), or nil after a clean shutdown.
func (c *Consumer) Run(ctx context.Context) error {
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	c.mu.Lock()
	c.fail = fail
	c.mu.Unlock()

	ddb := dynamodb.NewFromConfig(c.aws)
	if err := ensureLeaseTable(runCtx, ddb, c.cfg.Application); err != nil {
		return err
	}
	kc := kinesis.NewFromConfig(c.aws)
	kcfg := c.kclConfig()
	// The KCL never sees LATEST: it would skip what DMS wrote to child shards before their lease.
	if kcfg.InitialPositionInStream == kclcfg.LATEST {
		return errors.New("consumer: refusing to start at LATEST")
	}
	leases := checkpoint.NewLeases(chk.NewDynamoCheckpoint(kcfg).WithDynamoDB(ddb), ddb, c.cfg.Application, c.cfg.WorkerID, c.cfg.Failover)
	leases.OnStateRefused(func(shard string, err error) {
		c.log.Error("not taking the lease: upgrade dms2iceberg", zap.String("shard", shard), zap.Error(err))
		c.metrics.LeaseStateRefused(shard)
	})
	leases.OnLeaseLost(c.leaseLost)
	bal := checkpoint.NewBalance(c.cfg.WorkerID, c.cfg.Failover)
	leases.WithBalance(bal)
	share := newBalancer(c, bal, leases)
	share.announce(runCtx, time.Now()) // before the first round: the others count this worker in
	c.share.Store(share)
	c.leases = leases
	c.kc = kc
	c.shards = newShardMap(kc, c.cfg.Stream)
	lists := newListCache(kclListingMaxAge) // the KCL's ListShards, answered from c.shards's listings too
	c.shards.onList = func(shards []ktypes.Shard, started time.Time) { lists.store(c.cfg.Stream, shards, started) }
	share.settle(runCtx, c.shards, leases) // a first share before the KCL's first round, which reuses its listing
	// The horizon loop outlives runCtx: while processors drain at shutdown, the sink commits
	// up to the bound it keeps computing. It stops once the worker has stopped.
	hzCtx, stopHorizons := context.WithCancel(context.WithoutCancel(ctx))
	hzDone := make(chan struct{})
	go func() {
		defer close(hzDone)
		c.runHorizons(hzCtx)
	}()
	defer func() {
		stopHorizons()
		<-hzDone
	}()
	if every := c.cfg.HeartbeatInterval; every > 0 {
		// Heartbeats only help shards that are still read: they stop with reading (runCtx).
		hbDone := make(chan struct{})
		go func() {
			defer close(hbDone)
			c.runHeartbeats(runCtx, kc, every)
		}()
		defer func() { fail(nil); <-hbDone }()
	}
	// The KCL gets its own client, whose ListShards calls are answered from recent listings (listCache).
	kclKinesis := kinesis.NewFromConfig(c.aws, lists.option)
	w := kclworker.NewWorker(&factory{c: c, ctx: runCtx}, kcfg).WithKinesis(kclKinesis).
		WithCheckpointer(kclCheckpointer{Checkpointer: leases, worker: c.cfg.WorkerID, shards: c.shards, stopping: c.stopping})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start KCL worker: %w", err)
	}
	c.log.Info("consuming", zap.String("stream", c.cfg.Stream), zap.String("worker", c.cfg.WorkerID))
	<-runCtx.Done()

	stopBy := c.beginStop()
	c.log.Info("shutting down: flushing, committing and checkpointing", zap.Time("deadline", stopBy))
	wctx, cancelW := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	share.withdraw(wctx) // the others' share grows now, not once the presence row expires
	cancelW()
	done := make(chan struct{})
	go func() { // the KCL's Shutdown can hang (blocked parent waits); it is bounded below
		defer close(done)
		w.Shutdown()
	}()
	select {
	case <-done:
		c.log.Info("worker stopped")
	case <-time.After(time.Until(stopBy) + ShutdownSlack):
		c.log.Error("worker did not stop within the shutdown timeout; leases will expire")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// beginStop fixes the deadline of the graceful stop, which every processor's shutdown shares.
func (c *Consumer) beginStop() time.Time {
	d := time.Now().Add(c.cfg.ShutdownTimeout)
	if c.deadline != nil {
		d = c.deadline()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopBy = d
	return d
}

// stopping reports whether the graceful stop has begun.
func (c *Consumer) stopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.stopBy.IsZero()
}

// LeaseShare returns this worker's view of the lease balance (zero before the first scan of
// the lease table). Safe for concurrent use.
func (c *Consumer) LeaseShare() LeaseShare {
	if b := c.share.Load(); b != nil {
		return b.LeaseShare()
	}
	return LeaseShare{}
}

// shutdownContext bounds one processor's shutdown (drain, checkpoint, SHARD_END): by the
// graceful stop's deadline once the consumer is stopping, else (a lease lost, a shard ended
// while running) by ShutdownTimeout from now.
func (c *Consumer) shutdownContext() (context.Context, context.CancelFunc) {
	d := time.Now().Add(c.cfg.ShutdownTimeout)
	c.mu.Lock()
	if !c.stopBy.IsZero() && c.stopBy.Before(d) {
		d = c.stopBy
	}
	c.mu.Unlock()
	return context.WithDeadline(context.Background(), d)
}

// stop records a fatal error and starts shutdown.
func (c *Consumer) stop(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal == nil {
		c.fatal = err
		c.log.Error("stopping after a fatal error", zap.Error(err))
	}
	if c.fail != nil {
		c.fail(err)
	}
}

// register makes p the newest processor of its shard and invalidates older ones.
func (c *Consumer) register(p *processor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.gen[p.shard]; old != nil {
		old.stale.Store(true)
	}
	c.gen[p.shard] = p
}

// LostLeaseMessage reports whether msg, a line the KCL logs at ERROR, is about a lease this
// worker lost to another (the KCL's ErrLeaseNotAcquired: its renewal loop's "Error in refreshing
// lease" and its worker's "Error in getRecords" when that ends the consumer). Since a renewal is
// refused once another worker took the lease (checkpoint.leaseEpoch) and a fresh processor then
// takes over, that is the designed hand-over, logged as a warning; every other KCL error stays at
// ERROR. The KCL logs through two loggers (its configured one, and logrus for the renewal loop),
// and both apply this rule: kclLogger here, the logrus bridge in cmd/dms2iceberg.
func LostLeaseMessage(msg string) bool {
	return strings.Contains(msg, chk.ErrLeaseNotAcquired{}.Error())
}

// kclLogger is the KCL's zap logger with LostLeaseMessage lines at WARN.
type kclLogger struct{ kcllog.Logger }

func (l kclLogger) Errorf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); LostLeaseMessage(msg) {
		l.Warnf("%s", msg)
		return
	}
	l.Logger.Errorf(format, args...)
}

// WithFields keeps the change of level on the derived logger.
func (l kclLogger) WithFields(f kcllog.Fields) kcllog.Logger {
	return kclLogger{l.Logger.WithFields(f)}
}

// leaseLost makes the shard's newest processor stale: its lease was taken while this worker
// held it, so it may neither checkpoint nor keep waiting for its parents (the KCL ends its
// consumer once ProcessRecords returns).
func (c *Consumer) leaseLost(shard string) {
	c.mu.Lock()
	p := c.gen[shard]
	c.mu.Unlock()
	if p != nil && !p.stale.Swap(true) {
		p.log.Warn("lease taken by another worker while this one held it; this processor stops")
	}
}

type factory struct {
	c   *Consumer
	ctx context.Context
}

func (f *factory) CreateProcessor() kcl.IRecordProcessor {
	return &processor{c: f.c, ctx: f.ctx, dec: dms.NewDecoder(f.c.cfg.Decoder), acct: f.c.budget.Account()}
}

// ensureLeaseTable creates the lease table on demand (on-demand capacity) and waits until it is
// active; the KCL itself would create a provisioned table and not wait.
func ensureLeaseTable(ctx context.Context, ddb *dynamodb.Client, name string) error {
	_, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err == nil {
		return nil
	}
	var nf *ddbtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		return fmt.Errorf("describe lease table %s: %w", name, err)
	}
	_, err = ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(checkpoint.AttrShardID), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(checkpoint.AttrShardID), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	})
	var inUse *ddbtypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create lease table %s: %w", name, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(ddb)
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 2*time.Minute); err != nil {
		return fmt.Errorf("wait for lease table %s: %w", name, err)
	}
	return nil
}
