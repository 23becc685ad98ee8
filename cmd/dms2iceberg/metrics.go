package main

import (
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	kclmetrics "github.com/vmware/vmware-go-kcl-v2/clientlibrary/metrics"

	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// metricsNamespace prefixes every metric name: dms2iceberg_<subsystem>_<name>.
const metricsNamespace = "dms2iceberg"

// promMetrics is the Prometheus side of every component's small metrics interface: the sink's
// (per table), the consumer's and the KCL worker's (per shard), the post-commit hook's and the
// process's readiness. It owns its registry, so tests and several services in one process never
// share state. All methods are safe for concurrent use and never block.
type promMetrics struct {
	reg *prometheus.Registry
	// registered are the collectors registered on reg (register), for the docs test.
	registered []prometheus.Collector

	mu     sync.Mutex // guards holder
	holder string     // the shard shardHoldingW has a series for ("" for none)

	// Per shard (consumer and KCL).
	shardRecords      *prometheus.CounterVec
	shardBytes        *prometheus.CounterVec
	shardBehind       *prometheus.GaugeVec
	shardCheckpoint   *prometheus.GaugeVec
	shardCheckpoints  *prometheus.CounterVec
	shardUndecodable  *prometheus.CounterVec
	shardLease        *prometheus.GaugeVec
	shardLeaseEvents  *prometheus.CounterVec
	shardFenced       *prometheus.CounterVec
	shardStateRefused *prometheus.CounterVec
	shardTrimmedPast  *prometheus.CounterVec
	shardWaiting      *prometheus.GaugeVec
	// The ordering guard's stream watermark W (consumer/horizon.go).
	streamWatermark     *prometheus.GaugeVec
	streamWatermarkAge  *prometheus.GaugeVec
	shardHoldingW       *prometheus.GaugeVec
	shardPublishFailed  *prometheus.CounterVec
	shardReadAheadPause *prometheus.CounterVec
	shardHeartbeats     *prometheus.CounterVec
	shardGetRecords     *prometheus.HistogramVec
	shardProcessBatch   *prometheus.HistogramVec

	// Per table (sink).
	tableCommits        *prometheus.CounterVec
	tableVectorCommits  *prometheus.CounterVec
	tableComplete       *prometheus.GaugeVec
	tableOrderingRisk   *prometheus.CounterVec
	tableRows           *prometheus.CounterVec
	tableDeletes        *prometheus.CounterVec
	tableTrimmed        *prometheus.CounterVec
	tableSkipped        *prometheus.CounterVec
	tableCommitFailures *prometheus.CounterVec
	tableCommitUnknown  *prometheus.CounterVec
	tableCommitLatency  *prometheus.HistogramVec
	tableAttempts       *prometheus.HistogramVec
	tableFreshness      *prometheus.GaugeVec
	tableLag            *prometheus.HistogramVec
	tableLastLag        *prometheus.GaugeVec
	tableLastCommit     *prometheus.GaugeVec
	tableDeadLetters    *prometheus.CounterVec
	tableReloadRows     *prometheus.GaugeVec
	tableReloadSince    *prometheus.GaugeVec
	// The sink's queues and buffers, read at scrape time (metrics_buffers.go).
	buffers *bufferCollector
	// The process-wide byte budget, read at scrape time (metrics_buffers.go).
	budget *budgetCollector
	// The sink's key-column cache, read at scrape time (metrics_buffers.go).
	keyCache *keyCacheCollector

	// Post-commit hook.
	hookRuns     *prometheus.CounterVec
	hookDropped  *prometheus.CounterVec
	hookDuration prometheus.Histogram
	hookQueue    prometheus.Gauge

	// Process.
	ready     prometheus.Gauge
	buildInfo *prometheus.GaugeVec
	// stall feeds /healthz: shards whose records were handed on and not checkpointed since.
	stall *stallWatch

	// Maintenance (maintenance.Metrics).
	maintDeleteFiles  *prometheus.GaugeVec
	maintDeleteRows   *prometheus.GaugeVec
	maintDataFiles    *prometheus.GaugeVec
	maintSnapshots    *prometheus.GaugeVec
	maintMetadata     *prometheus.GaugeVec
	maintLeaseHeld    *prometheus.GaugeVec
	maintLastCompact  *prometheus.GaugeVec
	maintBranchBehind *prometheus.GaugeVec
	maintRuns         *prometheus.CounterVec
	maintDuration     *prometheus.HistogramVec
	maintDeletesFreed *prometheus.CounterVec
	maintFailures     *prometheus.CounterVec

	// Table state and schema changes (sink.Metrics).
	tableStatus        *prometheus.GaugeVec
	tableSchemaChanges *prometheus.CounterVec
	tableDLQClass      *prometheus.CounterVec
	tablePartial       *prometheus.CounterVec
	sourceFiltered     *prometheus.CounterVec
	dlqCommits         prometheus.Counter
	dlqRows            prometheus.Counter

	now func() time.Time
}

// promMetrics is the sink's receiver; consumerMetrics and kclMonitor wrap it for the consumer and
// the KCL (the consumer's DeadLettered has the sink's signature but counts per shard).
var _ sink.Metrics = (*promMetrics)(nil)

// Commit latencies run from tens of milliseconds (a small local commit) to tens of seconds (a
// large batch with retries against a remote catalog).
var commitBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// KCL call durations: GetRecords is a network round trip; ProcessRecords includes waiting for
// a full table queue (backpressure).
var callBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// End-to-end lags run from about a second (DMS, Kinesis and a flush interval) to hours (a
// backlog, a paused task).
var lagBuckets = []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600}

// register registers cs on the registry and notes them for the docs test.
func (m *promMetrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.registered = append(m.registered, cs...)
}

func newPromMetrics() *promMetrics {
	m := &promMetrics{reg: prometheus.NewRegistry(), now: time.Now}
	m.stall = newStallWatch(func() time.Time { return m.now() })
	shard, table := []string{"shard"}, []string{"table"}
	counter := func(sub, name, help string, labels []string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	gauge := func(sub, name, help string, labels []string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	histogram := func(sub, name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help, Buckets: buckets}, labels)
		m.register(v)
		return v
	}

	m.shardRecords = counter("shard", "records_total", "Kinesis records read from the shard and handed to the decoder.", shard)
	m.shardBytes = counter("shard", "bytes_total", "Bytes of Kinesis record data read from the shard.", shard)
	m.shardBehind = gauge("shard", "behind_latest_seconds", "How far the shard's last GetRecords was behind the tip of the stream (Kinesis MillisBehindLatest in seconds; 0 when caught up).", shard)
	m.shardCheckpoint = gauge("shard", "last_checkpoint_timestamp_seconds", "Unix time of the shard's last checkpoint write (only committed changes are checkpointed).", shard)
	m.shardCheckpoints = counter("shard", "checkpoints_total", "Checkpoints written for the shard.", shard)
	m.shardUndecodable = counter("shard", "undecodable_records_total", "Records of the shard that could not be decoded and went to the dead-letter file.", shard)
	m.shardLease = gauge("shard", "lease_held", "1 while this worker holds the shard's lease.", shard)
	m.shardLeaseEvents = counter("shard", "lease_events_total", "Lease events of this worker's shards (gained, lost, renewed); not per shard, so that lost leases stay counted.", []string{"event"})
	m.shardFenced = counter("shard", "checkpoints_fenced_total", "Checkpoints refused because the shard's lease moved to another worker or a newer epoch.", shard)
	m.shardTrimmedPast = counter("shard", "checkpoint_past_retention_total", "Times a shard started from a checkpoint older than the stream's retention (records after it may have been trimmed unread).", shard)
	m.shardWaiting = gauge("shard", "waiting_for_parents", "1 while a child shard is held back until its parent shards are finished.", shard)
	m.streamWatermark = gauge("stream", "watermark_timestamp_seconds", "Unix time of the stream watermark W: every change that arrived in Kinesis before it has been read by some worker (0 while unknown).", nil)
	m.streamWatermarkAge = gauge("stream", "watermark_age_seconds", "Now minus W: how stale the tables may be at most (0 while W is unknown; then stream_watermark_timestamp_seconds is 0 too).", nil)
	m.shardHoldingW = gauge("shard", "holding_watermark", "1 for the shard whose read horizon is W, the one holding the stream back (at most one series).", shard)
	m.shardStateRefused = counter("shard", "lease_state_refused_total", "Lease acquisitions or renewals refused because the shard's lease row was written by a newer state version of dms2iceberg (upgrade).", shard)
	m.shardPublishFailed = counter("shard", "horizon_publish_failures_total", "Failed publishes of the shard's read horizon on its lease row (fenced or an error).", shard)
	m.shardReadAheadPause = counter("shard", "read_ahead_paused_seconds_total", "Seconds the shard's processor paused because it was too far ahead of W (read-ahead alignment).", shard)
	m.shardHeartbeats = counter("shard", "heartbeats_total", "Heartbeat records of the shard (consumer.heartbeat_interval), by event: put, put_failed, read.", []string{"shard", "event"})
	m.shardGetRecords = histogram("shard", "get_records_seconds", "Time from the start of a GetRecords call until its records reach the processor.", callBuckets, shard)
	m.shardProcessBatch = histogram("shard", "process_records_seconds", "Time the shard processor spends on one delivery (decode and hand over, including backpressure and the read spacing: at least 210 ms from the start of the read, so that the KCL keeps to 5 reads per second per shard).", callBuckets, shard)

	m.tableCommits = counter("table", "commits_total", "Snapshots committed to the table.", table)
	m.tableVectorCommits = counter("table", "vector_commits_total", "Table batches whose deletes were committed as deletion vectors (writer_vectors), not equality deletes.", table)
	m.tableComplete = gauge("table", "complete_through_timestamp_seconds", "Unix time the table is complete through: its last commit holds every change that arrived in Kinesis before it (ordering: arrival).", table)
	m.tableOrderingRisk = counter("table", "ordering_risks_total", "Layouts that ordering: shard cannot keep in order, seen once per table and kind (multi_shard_table, key_change).", []string{"table", "kind"})
	m.tableRows = counter("table", "rows_total", "Row images written to the table (inserts, updates, loads after per-key dedupe).", table)
	m.tableDeletes = counter("table", "deletes_total", "Keys written as equality deletes to the table (every touched key of a keyed table).", table)
	m.tableTrimmed = counter("table", "trimmed_total", "Changes dropped at commit time because the table already held them (counted in committed batches only).", table)
	m.tableSkipped = counter("table", "skipped_total", "Changes dropped because the table's watermark already covered them (replays), including trimmed ones.", table)
	m.tableCommitFailures = counter("table", "commit_failures_total", "Commit attempts that failed and were retried.", table)
	m.tableCommitUnknown = counter("table", "commit_unknown_outcomes_total", "Batch commit attempts whose outcome was unknown (sent, then a lost answer, a timeout or a 5xx), by how the reload after them resolved them: landed, not_landed (tried again), another_writer (another worker had committed the same records).", []string{"table", "resolution"})
	m.tableCommitLatency = histogram("table", "commit_duration_seconds", "Time from the start of a flush to its successful commit, retries included.", commitBuckets, table)
	m.tableAttempts = histogram("table", "commit_attempts", "Commit attempts per committed batch.", []float64{1, 2, 3, 5, 10, 20}, table)
	m.tableFreshness = gauge("table", "freshness_seconds", "For the last commit: time from the arrival of its oldest change at the table writer until the commit.", table)
	m.tableLag = histogram("table", "end_to_end_lag_seconds", "Per committed batch: commit time minus the source time of its newest change (DMS commit-timestamp, else metadata.timestamp).", lagBuckets, table)
	m.tableLastLag = gauge("table", "last_end_to_end_lag_seconds", "For the last commit with a source time: commit time minus the source time of its newest change.", table)
	m.buffers = newBufferCollector()
	m.register(m.buffers)
	m.budget = newBudgetCollector()
	m.register(m.budget)
	m.keyCache = newKeyCacheCollector()
	m.register(m.keyCache)
	m.tableLastCommit = gauge("table", "last_commit_timestamp_seconds", "Unix time of the table's last commit by this worker.", table)
	m.tableDeadLetters = counter("table", "dead_letters_total", "Changes of the table sent to the dead-letter file (unconvertible, or updates and deletes of a keyless table).", table)
	m.tableReloadRows = gauge("table", "reload_rows", "A DMS reload of the table in progress: load rows committed since it started (they replace the table's content when it ends); 0 when none is in progress.", table)
	m.tableReloadSince = gauge("table", "reload_started_timestamp_seconds", "A DMS reload of the table in progress: Unix time of the create-table that started it; 0 when none is in progress.", table)

	m.maintDeleteFiles = gauge("maintenance", "delete_files", "Equality-delete files outstanding in the current snapshot (every scan applies them).", table)
	m.maintDeleteRows = gauge("maintenance", "delete_rows", "Equality-delete rows outstanding in the current snapshot.", table)
	m.maintDataFiles = gauge("maintenance", "data_files", "Data files in the current snapshot.", table)
	m.maintSnapshots = gauge("maintenance", "snapshots", "Snapshots in the table metadata.", table)
	m.maintMetadata = gauge("maintenance", "metadata_bytes", "Size of the current metadata file.", table)
	m.maintLeaseHeld = gauge("maintenance", "lease_held", "1 while this worker holds the table's maintenance lease.", table)
	m.maintLastCompact = gauge("maintenance", "last_compaction_timestamp_seconds", "When the table was last compacted (by any worker).", table)
	m.maintBranchBehind = gauge("maintenance", "positional_branch_behind_seconds", "How far behind main the positional branch shows the table (delete_mode position and dv): the age of the first change it does not show; 0 at main's head.", table)
	m.maintRuns = counter("maintenance", "runs_total", "Maintenance runs that changed something, by trigger.", []string{"table", "trigger"})
	m.maintDuration = histogram("maintenance", "duration_seconds", "Duration of maintenance runs.", commitBuckets, table)
	m.maintDeletesFreed = counter("maintenance", "delete_files_removed_total", "Equality-delete files applied and removed by compaction.", table)
	m.maintFailures = counter("maintenance", "failures_total", "Failed maintenance steps (position, compact, expire, manifests, purge, orphans, lease).", []string{"table", "step"})
	m.tableStatus = gauge("table", "status", "1 for the table's current state (active, paused, dropped).", []string{"table", "status"})
	m.tableSchemaChanges = counter("table", "schema_changes_total", "Schema changes applied (or refused: incompatible) by kind.", []string{"table", "kind"})
	m.tableDLQClass = counter("table", "dead_letters_by_class_total", "Dead letters by class.", []string{"table", "class"})
	m.tablePartial = counter("table", "partial_images_total", "Partial update images (absent_columns keep) by where their absent columns came from: batch (an earlier change of the key), table (the stored row), none (unknown key: NULL written).", []string{"table", "completed_from"})
	m.sourceFiltered = counter("source", "filtered_total", "Records of source tables that are not replicated (include/exclude/enabled); one series (source tables are not bounded).", nil)
	m.dlqCommits = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "dead_letters", Name: "commits_total", Help: "Commits of the dead-letter table."})
	m.dlqRows = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "dead_letters", Name: "rows_total", Help: "Rows committed to the dead-letter table."})
	m.register(m.dlqCommits, m.dlqRows)

	m.hookRuns = counter("post_commit", "runs_total", "Post-commit hook runs by result (ok, error, timeout).", []string{"table", "result"})
	m.hookDropped = counter("post_commit", "dropped_total", "Post-commit notifications dropped because the queue was full (a later snapshot of the table is still notified), or pending at shutdown.", table)
	m.hookDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: "post_commit", Name: "duration_seconds",
		Help: "Duration of post-commit hook runs.", Buckets: callBuckets})
	m.hookQueue = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: "post_commit", Name: "queue_length",
		Help: "Post-commit notifications waiting for the hook."})
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "ready",
		Help: "1 while the service is ready (catalog open, KCL worker started, no fatal error, not shutting down)."})
	m.buildInfo = gauge("", "build_info", "1, labelled with the module version, VCS revision and Go version of this binary.", []string{"version", "revision", "go_version"})
	bi, _ := debug.ReadBuildInfo()
	v := buildVersion(bi)
	m.buildInfo.WithLabelValues(v.Version, v.Revision, v.GoVersion).Set(1)
	m.register(m.hookDuration, m.hookQueue, m.ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// --- sink.Metrics ---

func (m *promMetrics) Committed(c sink.CommitInfo) {
	m.tableCommits.WithLabelValues(c.Table).Inc()
	if c.Vectors {
		m.tableVectorCommits.WithLabelValues(c.Table).Inc()
	}
	m.tableRows.WithLabelValues(c.Table).Add(float64(c.Rows))
	m.tableDeletes.WithLabelValues(c.Table).Add(float64(c.Deletes))
	m.tableTrimmed.WithLabelValues(c.Table).Add(float64(c.Trimmed))
	m.tableCommitLatency.WithLabelValues(c.Table).Observe(c.Took.Seconds())
	m.tableAttempts.WithLabelValues(c.Table).Observe(float64(c.Attempts))
	now := m.now()
	if !c.Oldest.IsZero() {
		m.tableFreshness.WithLabelValues(c.Table).Set(max(now.Sub(c.Oldest), 0).Seconds())
	}
	if !c.SourceNewest.IsZero() {
		lag := max(now.Sub(c.SourceNewest), 0).Seconds() // a source clock ahead of ours: no lag
		m.tableLag.WithLabelValues(c.Table).Observe(lag)
		m.tableLastLag.WithLabelValues(c.Table).Set(lag)
	}
	m.tableLastCommit.WithLabelValues(c.Table).Set(float64(now.UnixMilli()) / 1e3)
	if !c.CompleteThrough.IsZero() {
		m.tableComplete.WithLabelValues(c.Table).Set(float64(c.CompleteThrough.UnixMilli()) / 1e3)
	}
}

func (m *promMetrics) CommitFailed(table string) { m.tableCommitFailures.WithLabelValues(table).Inc() }

func (m *promMetrics) CommitUnknown(table, resolution string) {
	m.tableCommitUnknown.WithLabelValues(table, resolution).Inc()
}

func (m *promMetrics) DeadLettered(table string) { m.tableDeadLetters.WithLabelValues(table).Inc() }

func (m *promMetrics) Skipped(table string, n int) {
	m.tableSkipped.WithLabelValues(table).Add(float64(n))
}

// consumerMetrics adapts promMetrics to consumer.Metrics, whose DeadLettered has the same
// signature as the sink's but counts undecodable records per shard.
type consumerMetrics struct{ m *promMetrics }

var _ consumer.Metrics = consumerMetrics{}

func (c consumerMetrics) Records(shard string, n int, millisBehind int64) {
	c.m.shardRecords.WithLabelValues(shard).Add(float64(n))
	c.m.shardBehind.WithLabelValues(shard).Set(float64(millisBehind) / 1e3)
	if n > 0 {
		c.m.stall.handedOn(shard)
	}
}

func (c consumerMetrics) DeadLettered(shard string) {
	c.m.shardUndecodable.WithLabelValues(shard).Inc()
}

func (c consumerMetrics) Checkpointed(shard, _ string) {
	c.m.stall.checkpointed(shard)
	c.m.shardCheckpoints.WithLabelValues(shard).Inc()
	c.m.shardCheckpoint.WithLabelValues(shard).Set(float64(c.m.now().UnixMilli()) / 1e3)
}

func (c consumerMetrics) Fenced(shard string) { c.m.shardFenced.WithLabelValues(shard).Inc() }

func (c consumerMetrics) TrimmedPast(shard string) { c.m.shardTrimmedPast.WithLabelValues(shard).Inc() }

func (c consumerMetrics) WaitingForParents(shard string, waiting bool) {
	v := 0.0
	if waiting {
		v = 1
	}
	c.m.shardWaiting.WithLabelValues(shard).Set(v)
}

// consumer returns the receiver to plug into consumer.WithMetrics.
func (c consumerMetrics) StreamWatermark(w time.Time, age time.Duration, holder, _ string) {
	ts := 0.0
	if !w.IsZero() {
		ts = float64(w.UnixMilli()) / 1e3
	}
	c.m.streamWatermark.WithLabelValues().Set(ts)
	c.m.streamWatermarkAge.WithLabelValues().Set(age.Seconds())
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.m.holder != holder {
		if c.m.holder != "" {
			c.m.shardHoldingW.DeleteLabelValues(c.m.holder)
		}
		if holder != "" {
			c.m.shardHoldingW.WithLabelValues(holder).Set(1)
		}
		c.m.holder = holder
	}
}

func (c consumerMetrics) HorizonPublishFailed(shard string) {
	c.m.shardPublishFailed.WithLabelValues(shard).Inc()
}

func (c consumerMetrics) LeaseStateRefused(shard string) {
	c.m.shardStateRefused.WithLabelValues(shard).Inc()
}

func (c consumerMetrics) ReadAheadPaused(shard string, d time.Duration) {
	c.m.shardReadAheadPause.WithLabelValues(shard).Add(d.Seconds())
}

func (c consumerMetrics) Heartbeats(shard, event string, n int) {
	c.m.shardHeartbeats.WithLabelValues(shard, event).Add(float64(n))
}

func (m *promMetrics) consumer() consumer.Metrics { return consumerMetrics{m} }

// --- KCL MonitoringService (plugged through consumer.WithKCLMonitoring) ---
//
// Records are counted through consumer.Metrics (IncrRecordsProcessed would count them twice);
// the KCL adds bytes, lag on empty reads too, lease events and call durations. Start and
// Shutdown bracket the worker's event loop: they drive readiness through onStart and onStop.

type kclMonitor struct {
	*promMetrics
	// onStart and onStop are called when the worker's event loop starts and after it ended.
	onStart, onStop func()
}

var _ kclmetrics.MonitoringService = kclMonitor{}

func (m *promMetrics) Init(_, _, _ string) error { return nil }
func (m *promMetrics) Start() error              { return nil }
func (m *promMetrics) Shutdown()                 {}

func (k kclMonitor) Start() error {
	if k.onStart != nil {
		k.onStart()
	}
	return nil
}

func (k kclMonitor) Shutdown() {
	if k.onStop != nil {
		k.onStop()
	}
}

func (m *promMetrics) IncrRecordsProcessed(string, int) {}

func (m *promMetrics) IncrBytesProcessed(shard string, n int64) {
	m.shardBytes.WithLabelValues(shard).Add(float64(n))
}

func (m *promMetrics) MillisBehindLatest(shard string, ms float64) {
	m.shardBehind.WithLabelValues(shard).Set(ms / 1e3)
}

func (m *promMetrics) DeleteMetricMillisBehindLatest(shard string) {
	m.shardBehind.DeleteLabelValues(shard)
}

func (m *promMetrics) LeaseGained(shard string) {
	m.shardLease.WithLabelValues(shard).Set(1)
	m.shardLeaseEvents.WithLabelValues("gained").Inc()
}

// LeaseLost is the KCL's release of a shard consumer: the lease was lost or given up, the shard
// ended (closed by a reshard) or the worker stops. Every series of the shard is removed, so that
// closed shards do not stay on /metrics; a shard gained again starts its counters from zero.
func (m *promMetrics) LeaseLost(shard string) {
	m.shardLeaseEvents.WithLabelValues("lost").Inc()
	m.stall.released(shard)
	l := prometheus.Labels{"shard": shard}
	for _, v := range m.shardVecs() {
		v.DeletePartialMatch(l)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder == shard {
		m.shardHoldingW.DeleteLabelValues(shard)
		m.holder = ""
	}
}

// partialDeleter is the part of the metric vectors LeaseLost needs.
type partialDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// shardVecs are the per-shard vectors whose series LeaseLost removes (shardHoldingW is
// maintained by StreamWatermark under mu).
func (m *promMetrics) shardVecs() []partialDeleter {
	return []partialDeleter{
		m.shardRecords, m.shardBytes, m.shardBehind, m.shardCheckpoint, m.shardCheckpoints, m.shardUndecodable,
		m.shardLease, m.shardFenced, m.shardTrimmedPast, m.shardWaiting, m.shardPublishFailed,
		m.shardReadAheadPause, m.shardGetRecords, m.shardProcessBatch, m.shardHeartbeats,
	}
}

func (m *promMetrics) LeaseRenewed(shard string) {
	m.shardLease.WithLabelValues(shard).Set(1)
	m.shardLeaseEvents.WithLabelValues("renewed").Inc()
}

// RecordGetRecordsTime and RecordProcessRecordsTime receive milliseconds.
func (m *promMetrics) RecordGetRecordsTime(shard string, ms float64) {
	m.shardGetRecords.WithLabelValues(shard).Observe(ms / 1e3)
}

func (m *promMetrics) RecordProcessRecordsTime(shard string, ms float64) {
	m.shardProcessBatch.WithLabelValues(shard).Observe(ms / 1e3)
}

// --- post-commit hook (hookMetrics) ---

func (m *promMetrics) HookRan(table, result string, took time.Duration) {
	m.hookRuns.WithLabelValues(table, result).Inc()
	m.hookDuration.Observe(took.Seconds())
}

func (m *promMetrics) HookDropped(table string) { m.hookDropped.WithLabelValues(table).Inc() }

func (m *promMetrics) HookQueued(n int) { m.hookQueue.Set(float64(n)) }

// --- readiness ---

func (m *promMetrics) SetReady(ok bool) {
	if ok {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

var (
	_ maintenance.Metrics = (*promMetrics)(nil)
	_ sink.Metrics        = (*promMetrics)(nil)
)

func (m *promMetrics) MaintenanceChecked(st maintenance.Status) {
	m.maintDeleteFiles.WithLabelValues(st.Table).Set(float64(st.DeleteFiles))
	m.maintDeleteRows.WithLabelValues(st.Table).Set(float64(st.DeleteRows))
	m.maintDataFiles.WithLabelValues(st.Table).Set(float64(st.DataFiles))
	m.maintSnapshots.WithLabelValues(st.Table).Set(float64(st.Snapshots))
	if st.MetadataBytes >= 0 {
		m.maintMetadata.WithLabelValues(st.Table).Set(float64(st.MetadataBytes))
	}
	held := 0.0
	if st.LeaseHeld {
		held = 1
	}
	m.maintLeaseHeld.WithLabelValues(st.Table).Set(held)
	if !st.LastCompaction.IsZero() {
		m.maintLastCompact.WithLabelValues(st.Table).Set(float64(st.LastCompaction.UnixNano()) / 1e9)
	}
	if st.HasBranch {
		m.maintBranchBehind.WithLabelValues(st.Table).Set(st.BranchBehind.Seconds())
	}
}

func (m *promMetrics) Maintained(r maintenance.Report) {
	m.maintRuns.WithLabelValues(r.Table, r.Trigger).Inc()
	m.maintDuration.WithLabelValues(r.Table).Observe(r.Took.Seconds())
	m.maintDeletesFreed.WithLabelValues(r.Table).Add(float64(r.DeleteFilesRemoved))
}

func (m *promMetrics) MaintenanceFailed(table, step string) {
	m.maintFailures.WithLabelValues(table, step).Inc()
}

func (m *promMetrics) TableStatus(table, status, _ string) {
	for _, s := range []string{"active", "paused", "dropped"} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.tableStatus.WithLabelValues(table, s).Set(v)
	}
}

func (m *promMetrics) PartialImages(table string, fromBatch, fromTable, notFound int) {
	m.tablePartial.WithLabelValues(table, "batch").Add(float64(fromBatch))
	m.tablePartial.WithLabelValues(table, "table").Add(float64(fromTable))
	m.tablePartial.WithLabelValues(table, "none").Add(float64(notFound))
}

func (m *promMetrics) SchemaChanged(table, kind string, n int) {
	m.tableSchemaChanges.WithLabelValues(table, kind).Add(float64(n))
}

func (m *promMetrics) DeadLetterClass(table, class string) {
	m.tableDLQClass.WithLabelValues(table, class).Inc()
}

// Filtered counts without the source: a label per source table is unbounded (DMS can send any
// number of tables that are not replicated); dms2iceberg decode and the sink's logs name them.
func (m *promMetrics) Filtered(_ string, n int) {
	m.sourceFiltered.WithLabelValues().Add(float64(n))
}

func (m *promMetrics) DeadLettersCommitted(rows int, _ time.Duration) {
	m.dlqCommits.Inc()
	m.dlqRows.Add(float64(rows))
}

func (m *promMetrics) Fresh(table string, t time.Time) {
	m.tableComplete.WithLabelValues(table).Set(float64(t.UnixMilli()) / 1e3)
}

func (m *promMetrics) Reload(table string, rows int64, since time.Time) {
	m.tableReloadRows.WithLabelValues(table).Set(float64(rows))
	s := 0.0
	if !since.IsZero() {
		s = float64(since.UnixMilli()) / 1e3
	}
	m.tableReloadSince.WithLabelValues(table).Set(s)
}

func (m *promMetrics) OrderingRisk(table, kind string) {
	m.tableOrderingRisk.WithLabelValues(table, kind).Inc()
}
