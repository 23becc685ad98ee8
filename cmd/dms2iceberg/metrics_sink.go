package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dms2iceberg/dms2iceberg/sink"
)

// promSinkMetrics is the sink's metric set (sink.Metrics): per table commits, rows, lags,
// dead letters, state and schema changes, and the writers' buffers and key-column cache read at
// scrape time.
type promSinkMetrics struct {
	now func() time.Time

	commits        *prometheus.CounterVec
	vectorCommits  *prometheus.CounterVec
	vectorDeclines *prometheus.CounterVec
	complete       *prometheus.GaugeVec
	orderingRisk   *prometheus.CounterVec
	gateWait       *prometheus.CounterVec
	rows           *prometheus.CounterVec
	deletes        *prometheus.CounterVec
	trimmed        *prometheus.CounterVec
	skipped        *prometheus.CounterVec
	commitFailures *prometheus.CounterVec
	commitUnknown  *prometheus.CounterVec
	commitLatency  *prometheus.HistogramVec
	attempts       *prometheus.HistogramVec
	freshness      *prometheus.GaugeVec
	lag            *prometheus.HistogramVec
	lastLag        *prometheus.GaugeVec
	lastCommit     *prometheus.GaugeVec
	deadLetters    *prometheus.CounterVec
	reloadRows     *prometheus.GaugeVec
	reloadSince    *prometheus.GaugeVec
	status         *prometheus.GaugeVec
	schemaChanges  *prometheus.CounterVec
	dlqClass       *prometheus.CounterVec
	partial        *prometheus.CounterVec
	sourceFiltered *prometheus.CounterVec
	dlqCommits     prometheus.Counter
	dlqRows        prometheus.Counter
	// The sink's queues and buffers, read at scrape time (metrics_buffers.go).
	buffers *bufferCollector
	// The sink's key-column cache, read at scrape time (metrics_buffers.go).
	keyCache *keyCacheCollector
}

var _ sink.Metrics = (*promSinkMetrics)(nil)

// newPromSinkMetrics registers the sink's metrics on r; now is the clock of commit times and
// lags.
func newPromSinkMetrics(r *promRegistry, now func() time.Time) *promSinkMetrics {
	const table = "table"
	m := &promSinkMetrics{now: now}
	m.commits = r.counter("table", "commits_total", "Snapshots committed to the table.", table)
	m.vectorCommits = r.counter("table", "vector_commits_total", "Table batches whose deletes were committed as deletion vectors (writer_vectors), not equality deletes.", table)
	m.vectorDeclines = r.counter("table", "vector_declines_total", "Table batches of a writer_vectors table whose deletes were committed as equality deletes: the planner declined (a null key value, a partition column outside the key, a failed plan).", table)
	m.complete = r.gauge("table", "complete_through_timestamp_seconds", "Unix time the table is complete through: its last commit holds every change that arrived in Kinesis before it (ordering: arrival).", table)
	m.orderingRisk = r.counter("table", "ordering_risks_total", "Layouts that ordering: shard cannot keep in order, seen once per table and kind (multi_shard_table, key_change).", table, "kind")
	m.gateWait = r.counter("table", "gate_wait_seconds_total", "Time the table's writer held changes back for older changes another worker had not committed (the ordering guard's cross-process gates), measured from flush to flush.", table)
	m.rows = r.counter("table", "rows_total", "Row images written to the table (inserts, updates, loads after per-key dedupe).", table)
	m.deletes = r.counter("table", "deletes_total", "Keys written as equality deletes to the table (every touched key of a keyed table).", table)
	m.trimmed = r.counter("table", "trimmed_total", "Changes dropped at commit time because the table already held them (counted in committed batches only).", table)
	m.skipped = r.counter("table", "skipped_total", "Changes dropped because the table's watermark already covered them (replays), including trimmed ones.", table)
	m.commitFailures = r.counter("table", "commit_failures_total", "Commit attempts that failed and were retried.", table)
	m.commitUnknown = r.counter("table", "commit_unknown_outcomes_total", "Batch commit attempts whose outcome was unknown (sent, then a lost answer, a timeout or a 5xx), by how the reload after them resolved them: landed, not_landed (tried again), another_writer (another worker had committed the same records).", table, "resolution")
	m.commitLatency = r.histogram("table", "commit_duration_seconds", "Time from the start of a flush to its successful commit, retries included.", commitBuckets, table)
	m.attempts = r.histogram("table", "commit_attempts", "Commit attempts per committed batch.", []float64{1, 2, 3, 5, 10, 20}, table)
	m.freshness = r.gauge("table", "freshness_seconds", "For the last commit: time from the arrival of its oldest change at the table writer until the commit.", table)
	m.lag = r.histogram("table", "end_to_end_lag_seconds", "Per committed batch: commit time minus the source time of its newest change (DMS commit-timestamp, else metadata.timestamp).", lagBuckets, table)
	m.lastLag = r.gauge("table", "last_end_to_end_lag_seconds", "For the last commit with a source time: commit time minus the source time of its newest change.", table)
	m.buffers = newBufferCollector()
	m.keyCache = newKeyCacheCollector()
	r.register(m.buffers, m.keyCache)
	m.lastCommit = r.gauge("table", "last_commit_timestamp_seconds", "Unix time of the table's last commit by this worker.", table)
	m.deadLetters = r.counter("table", "dead_letters_total", "Changes of the table sent to the dead-letter file (unconvertible, or updates and deletes of a keyless table).", table)
	m.reloadRows = r.gauge("table", "reload_rows", "A DMS reload of the table in progress: load rows committed since it started (they replace the table's content when it ends); 0 when none is in progress.", table)
	m.reloadSince = r.gauge("table", "reload_started_timestamp_seconds", "A DMS reload of the table in progress: Unix time of the create-table that started it; 0 when none is in progress.", table)
	m.status = r.gauge("table", "status", "1 for the table's current state (active, paused, dropped).", table, "status")
	m.schemaChanges = r.counter("table", "schema_changes_total", "Schema changes applied (or refused: incompatible) by kind.", table, "kind")
	m.dlqClass = r.counter("table", "dead_letters_by_class_total", "Dead letters by class.", table, "class")
	m.partial = r.counter("table", "partial_images_total", "Partial update images (absent_columns keep) by where their absent columns came from: batch (an earlier change of the key), table (the stored row), none (unknown key: NULL written).", table, "completed_from")
	m.sourceFiltered = r.counter("source", "filtered_total", "Records of source tables that are not replicated (include/exclude/enabled); one series (source tables are not bounded).")
	m.dlqCommits = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "dead_letters", Name: "commits_total", Help: "Commits of the dead-letter table."})
	m.dlqRows = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "dead_letters", Name: "rows_total", Help: "Rows committed to the dead-letter table."})
	r.register(m.dlqCommits, m.dlqRows)
	return m
}

// watchBuffers makes the scrapes read buffers (the sink's Buffers); until then there are no
// series.
func (m *promSinkMetrics) watchBuffers(buffers func() []sink.BufferStat) {
	m.buffers.src.Store(&buffers)
}

// watchKeyCache makes the scrapes read stat (the sink's KeyCache); until then there are no series.
func (m *promSinkMetrics) watchKeyCache(stat func() sink.KeyCacheStat) { m.keyCache.src.Store(&stat) }

func (m *promSinkMetrics) Committed(c sink.CommitInfo) {
	m.commits.WithLabelValues(c.Table).Inc()
	if c.Vectors {
		m.vectorCommits.WithLabelValues(c.Table).Inc()
	}
	if c.VectorsDeclined {
		m.vectorDeclines.WithLabelValues(c.Table).Inc()
	}
	m.rows.WithLabelValues(c.Table).Add(float64(c.Rows))
	m.deletes.WithLabelValues(c.Table).Add(float64(c.Deletes))
	m.trimmed.WithLabelValues(c.Table).Add(float64(c.Trimmed))
	m.commitLatency.WithLabelValues(c.Table).Observe(c.Took.Seconds())
	m.attempts.WithLabelValues(c.Table).Observe(float64(c.Attempts))
	now := m.now()
	if !c.Oldest.IsZero() {
		m.freshness.WithLabelValues(c.Table).Set(max(now.Sub(c.Oldest), 0).Seconds())
	}
	if !c.SourceNewest.IsZero() {
		lag := max(now.Sub(c.SourceNewest), 0).Seconds() // a source clock ahead of ours: no lag
		m.lag.WithLabelValues(c.Table).Observe(lag)
		m.lastLag.WithLabelValues(c.Table).Set(lag)
	}
	m.lastCommit.WithLabelValues(c.Table).Set(float64(now.UnixMilli()) / 1e3)
	if !c.CompleteThrough.IsZero() {
		m.complete.WithLabelValues(c.Table).Set(float64(c.CompleteThrough.UnixMilli()) / 1e3)
	}
}

func (m *promSinkMetrics) CommitFailed(table string) { m.commitFailures.WithLabelValues(table).Inc() }

func (m *promSinkMetrics) CommitUnknown(table, resolution string) {
	m.commitUnknown.WithLabelValues(table, resolution).Inc()
}

func (m *promSinkMetrics) DeadLettered(table string) { m.deadLetters.WithLabelValues(table).Inc() }

func (m *promSinkMetrics) Skipped(table string, n int) {
	m.skipped.WithLabelValues(table).Add(float64(n))
}

func (m *promSinkMetrics) TableStatus(table, status, _ string) {
	for _, s := range []string{"active", "paused", "dropped"} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.status.WithLabelValues(table, s).Set(v)
	}
}

func (m *promSinkMetrics) PartialImages(table string, fromBatch, fromTable, notFound int) {
	m.partial.WithLabelValues(table, "batch").Add(float64(fromBatch))
	m.partial.WithLabelValues(table, "table").Add(float64(fromTable))
	m.partial.WithLabelValues(table, "none").Add(float64(notFound))
}

func (m *promSinkMetrics) SchemaChanged(table, kind string, n int) {
	m.schemaChanges.WithLabelValues(table, kind).Add(float64(n))
}

func (m *promSinkMetrics) DeadLetterClass(table, class string) {
	m.dlqClass.WithLabelValues(table, class).Inc()
}

// Filtered counts without the source: a label per source table is unbounded (DMS can send any
// number of tables that are not replicated); dms2iceberg decode and the sink's logs name them.
func (m *promSinkMetrics) Filtered(_ string, n int) {
	m.sourceFiltered.WithLabelValues().Add(float64(n))
}

func (m *promSinkMetrics) DeadLettersCommitted(rows int, _ time.Duration) {
	m.dlqCommits.Inc()
	m.dlqRows.Add(float64(rows))
}

func (m *promSinkMetrics) GateWait(table string, d time.Duration) {
	m.gateWait.WithLabelValues(table).Add(d.Seconds())
}

func (m *promSinkMetrics) Fresh(table string, t time.Time) {
	m.complete.WithLabelValues(table).Set(float64(t.UnixMilli()) / 1e3)
}

func (m *promSinkMetrics) Reload(table string, rows int64, since time.Time) {
	m.reloadRows.WithLabelValues(table).Set(float64(rows))
	s := 0.0
	if !since.IsZero() {
		s = float64(since.UnixMilli()) / 1e3
	}
	m.reloadSince.WithLabelValues(table).Set(s)
}

func (m *promSinkMetrics) OrderingRisk(table, kind string) {
	m.orderingRisk.WithLabelValues(table, kind).Inc()
}
