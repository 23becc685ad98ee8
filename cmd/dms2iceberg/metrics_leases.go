package main

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dms2iceberg/dms2iceberg/consumer"
)

// leaseCollector exports this worker's view of the lease balance (consumer.Consumer.LeaseShare)
// at scrape time: the live workers, the open shards, the fair share, the leases it holds, and
// what it refused and handed off to keep to its share.
type leaseCollector struct {
	src                                         atomic.Pointer[func() consumer.LeaseShare]
	workers, open, share, held, refused, handed *prometheus.Desc
}

func newLeaseCollector() *leaseCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "lease", name), help, nil, nil)
	}
	return &leaseCollector{
		workers: desc("workers", "Live workers of the KCL application, from their presence rows in the lease table."),
		open:    desc("open_shards", "Open shards of the stream, as the last scan of the lease table saw them."),
		share:   desc("fair_share", "The most open shards this worker takes: the ceiling of open shards over live workers."),
		held:    desc("held", "Open shards whose lease this worker holds."),
		refused: desc("refusals_total", "Lease acquisitions this worker refused because it held its fair share."),
		handed:  desc("handoffs_total", "Leases this worker handed to a worker below its share (drained, checkpointed, released)."),
	}
}

// watch makes the scrapes read share; until then there are no series.
func (c *leaseCollector) watch(share func() consumer.LeaseShare) { c.src.Store(&share) }

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.workers, c.open, c.share, c.held, c.refused, c.handed} {
		ch <- d
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	s := (*src)()
	for _, g := range [...]struct {
		d *prometheus.Desc
		v float64
	}{{c.workers, float64(s.Workers)}, {c.open, float64(s.Open)}, {c.share, float64(s.Ceil)}, {c.held, float64(s.Held)}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v)
	}
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refusals))
	ch <- prometheus.MustNewConstMetric(c.handed, prometheus.CounterValue, float64(s.Handoffs))
}
