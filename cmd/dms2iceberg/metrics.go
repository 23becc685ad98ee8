package main

import (
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// metricsNamespace prefixes every metric name: dms2iceberg_<subsystem>_<name>.
const metricsNamespace = "dms2iceberg"

// promMetrics is the process's Prometheus registry with one small metric set per component:
// the sink's (per table, sink.Metrics), the consumer's and the KCL worker's (per shard,
// consumer.Metrics and the KCL's MonitoringService), maintenance's (per table,
// maintenance.Metrics) and the post-commit hook's (hookMetrics). It owns the process-wide
// series itself: readiness, build info and the byte budget. Every set registers on the one
// registry, so tests and several services in one process never share state. All methods of
// every set are safe for concurrent use and never block.
type promMetrics struct {
	*promRegistry
	// now is the clock of every set (tests replace it).
	now func() time.Time

	sink        *promSinkMetrics
	consumer    *promConsumerMetrics
	kcl         *promKCLMetrics
	maintenance *promMaintenanceMetrics
	hook        *promHookMetrics

	ready     prometheus.Gauge
	buildInfo *prometheus.GaugeVec
	// The process-wide byte budget, read at scrape time (metrics_buffers.go).
	budget *budgetCollector
	// leases is this worker's lease balance, read at scrape time (metrics_leases.go).
	leases *leaseCollector
}

// Commit latencies run from tens of milliseconds (a small local commit) to tens of seconds (a
// large batch with retries against a remote catalog).
var commitBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// KCL call durations: GetRecords is a network round trip; ProcessRecords includes waiting for
// a full table queue (backpressure).
var callBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// End-to-end lags run from about a second (DMS, Kinesis and a flush interval) to hours (a
// backlog, a paused task).
var lagBuckets = []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600}

// promRegistry is the one registry every metric set registers on, with the collectors it
// registered (for the docs test).
type promRegistry struct {
	reg        *prometheus.Registry
	registered []prometheus.Collector
}

// register registers cs on the registry and notes them for the docs test.
func (r *promRegistry) register(cs ...prometheus.Collector) {
	r.reg.MustRegister(cs...)
	r.registered = append(r.registered, cs...)
}

// counter registers a counter vector dms2iceberg_<sub>_<name> with labels.
func (r *promRegistry) counter(sub, name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help}, labels)
	r.register(v)
	return v
}

// gauge registers a gauge vector dms2iceberg_<sub>_<name> with labels.
func (r *promRegistry) gauge(sub, name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help}, labels)
	r.register(v)
	return v
}

// histogram registers a histogram vector dms2iceberg_<sub>_<name> with buckets and labels.
func (r *promRegistry) histogram(sub, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: sub, Name: name, Help: help, Buckets: buckets}, labels)
	r.register(v)
	return v
}

func newPromMetrics() *promMetrics {
	r := &promRegistry{reg: prometheus.NewRegistry()}
	m := &promMetrics{promRegistry: r, now: time.Now}
	clock := func() time.Time { return m.now() }
	m.consumer = newPromConsumerMetrics(r, clock)
	m.kcl = newPromKCLMetrics(r, m.consumer)
	m.sink = newPromSinkMetrics(r, clock)
	m.maintenance = newPromMaintenanceMetrics(r)
	m.hook = newPromHookMetrics(r)

	m.budget = newBudgetCollector()
	m.leases = newLeaseCollector()
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "ready",
		Help: "1 while the service is ready (catalog open, KCL worker started, no fatal error, not shutting down)."})
	m.buildInfo = r.gauge("", "build_info", "1, labelled with the module version, VCS revision and Go version of this binary.", "version", "revision", "go_version")
	bi, _ := debug.ReadBuildInfo()
	v := buildVersion(bi)
	m.buildInfo.WithLabelValues(v.Version, v.Revision, v.GoVersion).Set(1)
	r.register(m.budget, m.leases, m.ready, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetReady sets dms2iceberg_ready (the health's onChange).
func (m *promMetrics) SetReady(ok bool) {
	if ok {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// watchBudget makes the scrapes read b; until then there are no series.
func (m *promMetrics) watchBudget(b *membudget.Budget) { m.budget.src.Store(b) }
