package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// promHookMetrics is the post-commit hook's metric set (hookMetrics): runs by result, drops,
// run durations and the queue length.
type promHookMetrics struct {
	runs     *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	duration prometheus.Histogram
	queue    prometheus.Gauge
}

var _ hookMetrics = (*promHookMetrics)(nil)

// newPromHookMetrics registers the post-commit hook's metrics on r.
func newPromHookMetrics(r *promRegistry) *promHookMetrics {
	m := &promHookMetrics{
		runs: r.counter("post_commit", "runs_total", "Post-commit hook runs by result (ok, error, timeout).", "table", "result"),
		dropped: r.counter("post_commit", "dropped_total",
			"Post-commit notifications dropped because the queue was full (a later snapshot of the table is still notified), or pending at shutdown.", "table"),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: "post_commit", Name: "duration_seconds",
			Help: "Duration of post-commit hook runs.", Buckets: callBuckets}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: "post_commit", Name: "queue_length",
			Help: "Post-commit notifications waiting for the hook."}),
	}
	r.register(m.duration, m.queue)
	return m
}

func (m *promHookMetrics) HookRan(table, result string, took time.Duration) {
	m.runs.WithLabelValues(table, result).Inc()
	m.duration.Observe(took.Seconds())
}

func (m *promHookMetrics) HookDropped(table string) { m.dropped.WithLabelValues(table).Inc() }

func (m *promHookMetrics) HookQueued(n int) { m.queue.Set(float64(n)) }
