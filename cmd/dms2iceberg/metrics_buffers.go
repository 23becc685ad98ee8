package main

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// bufferCollector exports what each table writer holds uncommitted (sink.Iceberg.Buffers) as
// gauges computed at scrape time: the sink's writers pay nothing per event beyond publishing
// their buffer's size with atomic stores, and a table has series from its writer's start.
type bufferCollector struct {
	src                          atomic.Pointer[func() []sink.BufferStat]
	queued, capacity, rows, size *prometheus.Desc
}

func newBufferCollector() *bufferCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "table", name), help, []string{"table"}, nil)
	}
	return &bufferCollector{
		queued:   desc("queue_length", "Events (and flush requests) waiting in the table writer's queue."),
		capacity: desc("queue_capacity", "Length of the table writer's queue (sink.queue_length): Submit blocks, and the shard processor with it, while the queue is full."),
		rows:     desc("buffered_rows", "Changes the table writer has taken in and not committed yet (buffered rows and events held for their turn)."),
		size:     desc("buffered_bytes", "Bytes the table writer holds uncommitted, as they count towards sink.flush_bytes."),
	}
}

func (c *bufferCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queued
	ch <- c.capacity
	ch <- c.rows
	ch <- c.size
}

func (c *bufferCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	for _, b := range (*src)() {
		for _, v := range [...]struct {
			d *prometheus.Desc
			v float64
		}{{c.queued, float64(b.Queued)}, {c.capacity, float64(b.QueueCapacity)}, {c.rows, float64(b.Rows)}, {c.size, float64(b.Bytes)}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v, b.Table)
		}
	}
}

// budgetCollector exports the process-wide byte budget (consumer.max_inflight_bytes) at scrape
// time: what it holds, its limit, and how long shard readers waited for it.
type budgetCollector struct {
	src                  atomic.Pointer[membudget.Budget]
	held, limit, blocked *prometheus.Desc
}

func newBudgetCollector() *budgetCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, nil, nil)
	}
	return &budgetCollector{
		held:    desc("memory_budget_bytes", "Raw bytes of the records read and not yet committed, dead-lettered or acknowledged, over every table (the byte budget's use)."),
		limit:   desc("memory_budget_limit_bytes", "The byte budget (consumer.max_inflight_bytes)."),
		blocked: desc("reader_blocked_seconds_total", "Seconds shard readers waited for the byte budget before handing on a delivery."),
	}
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.limit
	ch <- c.blocked
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.src.Load()
	if b == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(b.Held()))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(b.Limit()))
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.CounterValue, b.Blocked().Seconds())
}

// keyCacheCollector exports the sink's key-column cache (sink.maintenance.key_cache_bytes) at
// scrape time: what it holds, its bound, and the conversion probes it answered or that read the
// data file.
type keyCacheCollector struct {
	src                 atomic.Pointer[func() sink.KeyCacheStat]
	held, limit, probes *prometheus.Desc
}

func newKeyCacheCollector() *keyCacheCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "maintenance", name), help, labels, nil)
	}
	return &keyCacheCollector{
		held:   desc("key_cache_bytes", "Bytes of data files' key columns the position conversion keeps in memory (delete_mode position or dv), over every table."),
		limit:  desc("key_cache_limit_bytes", "The key-column cache's bound (sink.maintenance.key_cache_bytes; 0: off)."),
		probes: desc("key_cache_probes_total", "Data files the position conversion probed, by whether the key column came from the cache (hit) or was read from the file (read).", "result"),
	}
}

func (c *keyCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.limit
	ch <- c.probes
}

func (c *keyCacheCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	st := (*src)()
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit))
	ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(st.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(st.Reads), "read")
}
