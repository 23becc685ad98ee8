package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kclmetrics "github.com/vmware/vmware-go-kcl-v2/clientlibrary/metrics"

	"github.com/dms2iceberg/dms2iceberg/consumer"
)

// promConsumerMetrics is the consumer's metric set (consumer.Metrics): per shard reads,
// checkpoints, leases refused and the ordering guard's stream watermark W (consumer/horizon.go).
// It feeds the stall watch behind /healthz too: shards whose records were handed on and not
// checkpointed since.
type promConsumerMetrics struct {
	now func() time.Time
	// stall feeds /healthz: shards whose records were handed on and not checkpointed since.
	stall *stallWatch

	mu     sync.Mutex // guards holder
	holder string     // the shard holdingW has a series for ("" for none)

	records        *prometheus.CounterVec
	behind         *prometheus.GaugeVec
	checkpoint     *prometheus.GaugeVec
	checkpoints    *prometheus.CounterVec
	undecodable    *prometheus.CounterVec
	fenced         *prometheus.CounterVec
	stateRefused   *prometheus.CounterVec
	trimmedPast    *prometheus.CounterVec
	waiting        *prometheus.GaugeVec
	watermark      *prometheus.GaugeVec
	watermarkAge   *prometheus.GaugeVec
	holdingW       *prometheus.GaugeVec
	publishFailed  *prometheus.CounterVec
	readAheadPause *prometheus.CounterVec
	heartbeats     *prometheus.CounterVec
	lateRecords    *prometheus.CounterVec
	arrivalMargin  *prometheus.GaugeVec
}

var _ consumer.Metrics = (*promConsumerMetrics)(nil)

// newPromConsumerMetrics registers the consumer's metrics on r; now is the clock of checkpoint
// times and of the stall watch.
func newPromConsumerMetrics(r *promRegistry, now func() time.Time) *promConsumerMetrics {
	const shard = "shard"
	m := &promConsumerMetrics{now: now, stall: newStallWatch(now)}
	m.records = r.counter("shard", "records_total", "Kinesis records read from the shard and handed to the decoder.", shard)
	m.behind = r.gauge("shard", "behind_latest_seconds", "How far the shard's last GetRecords was behind the tip of the stream (Kinesis MillisBehindLatest in seconds; 0 when caught up).", shard)
	m.checkpoint = r.gauge("shard", "last_checkpoint_timestamp_seconds", "Unix time of the shard's last checkpoint write (only committed changes are checkpointed).", shard)
	m.checkpoints = r.counter("shard", "checkpoints_total", "Checkpoints written for the shard.", shard)
	m.undecodable = r.counter("shard", "undecodable_records_total", "Records of the shard that could not be decoded and went to the dead-letter file.", shard)
	m.fenced = r.counter("shard", "checkpoints_fenced_total", "Checkpoints refused because the shard's lease moved to another worker or a newer epoch.", shard)
	m.trimmedPast = r.counter("shard", "checkpoint_past_retention_total", "Times a shard started from a checkpoint older than the stream's retention (records after it may have been trimmed unread).", shard)
	m.waiting = r.gauge("shard", "waiting_for_parents", "1 while a child shard is held back until its parent shards are finished.", shard)
	m.watermark = r.gauge("stream", "watermark_timestamp_seconds", "Unix time of the stream watermark W: every change that arrived in Kinesis before it has been read by some worker (0 while unknown).")
	m.watermarkAge = r.gauge("stream", "watermark_age_seconds", "Now minus W: how stale the tables may be at most (0 while W is unknown; then stream_watermark_timestamp_seconds is 0 too).")
	m.holdingW = r.gauge("shard", "holding_watermark", "1 for the shard whose read horizon is W, the one holding the stream back (at most one series).", shard)
	m.stateRefused = r.counter("shard", "lease_state_refused_total", "Lease acquisitions or renewals refused because the shard's lease row was written by a newer state version of dms2iceberg (upgrade).", shard)
	m.publishFailed = r.counter("shard", "horizon_publish_failures_total", "Failed publishes of the shard's read horizon on its lease row (fenced or an error).", shard)
	m.readAheadPause = r.counter("shard", "read_ahead_paused_seconds_total", "Seconds the shard's processor paused because it was too far ahead of W (read-ahead alignment).", shard)
	m.heartbeats = r.counter("shard", "heartbeats_total", "Heartbeat records of the shard (consumer.heartbeat_interval), by event: put, put_failed, read.", shard, "event")
	m.lateRecords = r.counter("", "late_records_total", "Records handed on although they arrived at or before their shard's read horizon: Kinesis delayed them longer than the arrival margin (each one puts the margin back at consumer.arrival_margin for 10 minutes).", shard)
	m.arrivalMargin = r.gauge("", "arrival_margin_seconds", "The arrival margin in use: how far a caught-up shard's read horizon trails its read time (measured from the stream, between consumer.arrival_margin_floor and consumer.arrival_margin).")
	return m
}

func (m *promConsumerMetrics) Records(shard string, n int, millisBehind int64) {
	m.records.WithLabelValues(shard).Add(float64(n))
	m.setBehind(shard, float64(millisBehind)/1e3)
	if n > 0 {
		m.stall.handedOn(shard)
	}
}

// DeadLettered counts an undecodable record of shard.
func (m *promConsumerMetrics) DeadLettered(shard string) {
	m.undecodable.WithLabelValues(shard).Inc()
}

func (m *promConsumerMetrics) Checkpointed(shard, _ string) {
	m.stall.checkpointed(shard)
	m.checkpoints.WithLabelValues(shard).Inc()
	m.checkpoint.WithLabelValues(shard).Set(float64(m.now().UnixMilli()) / 1e3)
}

func (m *promConsumerMetrics) Fenced(shard string) { m.fenced.WithLabelValues(shard).Inc() }

func (m *promConsumerMetrics) TrimmedPast(shard string) { m.trimmedPast.WithLabelValues(shard).Inc() }

func (m *promConsumerMetrics) WaitingForParents(shard string, waiting bool) {
	v := 0.0
	if waiting {
		v = 1
	}
	m.waiting.WithLabelValues(shard).Set(v)
}

func (m *promConsumerMetrics) StreamWatermark(w time.Time, age time.Duration, holder, _ string) {
	ts := 0.0
	if !w.IsZero() {
		ts = float64(w.UnixMilli()) / 1e3
	}
	m.watermark.WithLabelValues().Set(ts)
	m.watermarkAge.WithLabelValues().Set(age.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder != holder {
		if m.holder != "" {
			m.holdingW.DeleteLabelValues(m.holder)
		}
		if holder != "" {
			m.holdingW.WithLabelValues(holder).Set(1)
		}
		m.holder = holder
	}
}

func (m *promConsumerMetrics) HorizonPublishFailed(shard string) {
	m.publishFailed.WithLabelValues(shard).Inc()
}

func (m *promConsumerMetrics) LeaseStateRefused(shard string) {
	m.stateRefused.WithLabelValues(shard).Inc()
}

func (m *promConsumerMetrics) ReadAheadPaused(shard string, d time.Duration) {
	m.readAheadPause.WithLabelValues(shard).Add(d.Seconds())
}

// LateRecords counts late records of shard (not per-shard in release: a late record is kept
// counted after its shard's lease ended).
func (m *promConsumerMetrics) LateRecords(shard string, n int, _ time.Duration) {
	m.lateRecords.WithLabelValues(shard).Add(float64(n))
}

func (m *promConsumerMetrics) ArrivalMargin(d time.Duration) {
	m.arrivalMargin.WithLabelValues().Set(d.Seconds())
}

func (m *promConsumerMetrics) Heartbeats(shard, event string, n int) {
	m.heartbeats.WithLabelValues(shard, event).Add(float64(n))
}

// setBehind sets how far the shard's last read was behind the tip of the stream; the consumer
// reports it with its records, the KCL on empty reads too.
func (m *promConsumerMetrics) setBehind(shard string, seconds float64) {
	m.behind.WithLabelValues(shard).Set(seconds)
}

// deleteBehind removes the shard's behind_latest_seconds series (the KCL's
// DeleteMetricMillisBehindLatest).
func (m *promConsumerMetrics) deleteBehind(shard string) { m.behind.DeleteLabelValues(shard) }

// partialDeleter is the part of the metric vectors a shard's release needs.
type partialDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// release forgets a shard whose lease ended (promKCLMetrics.LeaseLost): its stall watch and
// every per-shard series but lease_state_refused_total; holding_watermark is maintained by
// StreamWatermark under mu.
func (m *promConsumerMetrics) release(shard string) {
	m.stall.released(shard)
	l := prometheus.Labels{"shard": shard}
	for _, v := range []partialDeleter{
		m.records, m.behind, m.checkpoint, m.checkpoints, m.undecodable, m.fenced, m.trimmedPast, m.waiting,
		m.publishFailed, m.readAheadPause, m.heartbeats,
	} {
		v.DeletePartialMatch(l)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder == shard {
		m.holdingW.DeleteLabelValues(shard)
		m.holder = ""
	}
}

// promKCLMetrics is the KCL worker's metric set (its MonitoringService, plugged through
// consumer.WithKCLMonitoring as a kclMonitor): per shard bytes, leases and call durations. Records
// are counted through consumer.Metrics (IncrRecordsProcessed would count them twice); the KCL
// adds bytes, lag on empty reads too (into the consumer's series), lease events and call
// durations. A shard's lease ending removes its series here and the consumer's.
type promKCLMetrics struct {
	// shards is the consumer's set: lag, and the per-shard series a released shard drops.
	shards *promConsumerMetrics

	bytes        *prometheus.CounterVec
	lease        *prometheus.GaugeVec
	leaseEvents  *prometheus.CounterVec
	getRecords   *prometheus.HistogramVec
	processBatch *prometheus.HistogramVec
}

// newPromKCLMetrics registers the KCL worker's metrics on r; shards is the consumer's set.
func newPromKCLMetrics(r *promRegistry, shards *promConsumerMetrics) *promKCLMetrics {
	const shard = "shard"
	return &promKCLMetrics{
		shards: shards,
		bytes:  r.counter("shard", "bytes_total", "Bytes of Kinesis record data read from the shard.", shard),
		lease:  r.gauge("shard", "lease_held", "1 while this worker holds the shard's lease.", shard),
		leaseEvents: r.counter("shard", "lease_events_total",
			"Lease events of this worker's shards (gained, lost, renewed); not per shard, so that lost leases stay counted.", "event"),
		getRecords: r.histogram("shard", "get_records_seconds", "Time from the start of a GetRecords call until its records reach the processor.", callBuckets, shard),
		processBatch: r.histogram("shard", "process_records_seconds",
			"Time the shard processor spends on one delivery (decode and hand over, including backpressure and the read spacing: at least 210 ms from the start of the read, so that the KCL keeps to 5 reads per second per shard).",
			callBuckets, shard),
	}
}

func (m *promKCLMetrics) IncrRecordsProcessed(string, int) {}

func (m *promKCLMetrics) IncrBytesProcessed(shard string, n int64) {
	m.bytes.WithLabelValues(shard).Add(float64(n))
}

func (m *promKCLMetrics) MillisBehindLatest(shard string, ms float64) {
	m.shards.setBehind(shard, ms/1e3)
}

func (m *promKCLMetrics) DeleteMetricMillisBehindLatest(shard string) { m.shards.deleteBehind(shard) }

func (m *promKCLMetrics) LeaseGained(shard string) {
	m.lease.WithLabelValues(shard).Set(1)
	m.leaseEvents.WithLabelValues("gained").Inc()
}

// LeaseLost is the KCL's release of a shard consumer: the lease was lost or given up, the shard
// ended (closed by a reshard) or the worker stops. Every series of the shard is removed, so that
// closed shards do not stay on /metrics; a shard gained again starts its counters from zero.
func (m *promKCLMetrics) LeaseLost(shard string) {
	m.leaseEvents.WithLabelValues("lost").Inc()
	l := prometheus.Labels{"shard": shard}
	for _, v := range []partialDeleter{m.bytes, m.lease, m.getRecords, m.processBatch} {
		v.DeletePartialMatch(l)
	}
	m.shards.release(shard)
}

func (m *promKCLMetrics) LeaseRenewed(shard string) {
	m.lease.WithLabelValues(shard).Set(1)
	m.leaseEvents.WithLabelValues("renewed").Inc()
}

// RecordGetRecordsTime and RecordProcessRecordsTime receive milliseconds.
func (m *promKCLMetrics) RecordGetRecordsTime(shard string, ms float64) {
	m.getRecords.WithLabelValues(shard).Observe(ms / 1e3)
}

func (m *promKCLMetrics) RecordProcessRecordsTime(shard string, ms float64) {
	m.processBatch.WithLabelValues(shard).Observe(ms / 1e3)
}

// kclMonitor is the KCL's MonitoringService: the KCL worker's metric set, with Start and
// Shutdown bracketing the worker's event loop to drive readiness through onStart and onStop.
type kclMonitor struct {
	*promKCLMetrics
	// onStart and onStop are called when the worker's event loop starts and after it ended.
	onStart, onStop func()
}

var _ kclmetrics.MonitoringService = kclMonitor{}

func (k kclMonitor) Init(_, _, _ string) error { return nil }

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
