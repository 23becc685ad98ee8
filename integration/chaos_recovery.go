//go:build integration

package integration

// The chaos run's account of the workers' recoveries from dependency faults (recoveryTotals):
// the counters of the workers' /metrics that a recovery moves (commits retried, lease events,
// heartbeat puts), and the KCL's lines in the workers' logs (kclEvidence): shard consumers that
// ended on a GetRecords error (the next one starts from the checkpoint with a new iterator),
// lease renewals that failed.

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// recoveryMetrics are the counters of recoveries, each summed by the label that says which
// ("" sums every series).
var recoveryMetrics = map[string]string{
	"dms2iceberg_table_commit_failures_total": "",
	"dms2iceberg_shard_lease_events_total":    "event",
	"dms2iceberg_shard_heartbeats_total":      "event",
}

// recoverySeries is one series of a recovery counter: what it is summed under (name{label=value}),
// and its largest value seen.
type recoverySeries struct {
	sum   string
	value float64
}

// noteRecoveries keeps the largest value of every recovery series (counters only grow; a series
// removed with its shard and recreated from zero is counted at its largest, a lower bound).
// Called under the scraper's lock.
func (p *procMetrics) noteRecoveries(samples []metrictest.Sample) {
	for _, s := range samples {
		label, ok := recoveryMetrics[s.Name]
		if !ok {
			continue
		}
		sum := s.Name
		if label != "" {
			sum = fmt.Sprintf("%s{%s=%s}", s.Name, label, s.Labels[label])
		}
		key := s.Key()
		if old, ok := p.recovery[key]; !ok || s.Value > old.value {
			p.recovery[key] = recoverySeries{sum: sum, value: s.Value}
		}
	}
}

// recoveryTotals sums the recovery counters over every process.
func (s *scraper) recoveryTotals() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, p := range s.procs {
		for _, r := range p.recovery {
			out[r.sum] += r.value
		}
	}
	return out
}

// The KCL's lines about recoveries (vmware-go-kcl-v2, logged through the workers' "kcl" logger).
var (
	// getRecordsEnded is a shard consumer that ended on a GetRecords error the KCL does not
	// retry (an expired iterator, a 5xx or reset after the SDK's retries): the shard's lease is
	// released and its next consumer starts from the checkpoint with a new iterator.
	getRecordsEnded = regexp.MustCompile(`Error getting records from Kinesis that cannot be retried`)
	expiredIterator = regexp.MustCompile(`Error getting records from Kinesis that cannot be retried[^\n]*ExpiredIterator`)
	// throughputGaveUp is a shard consumer that ended after too many throughput refusals.
	throughputGaveUp = regexp.MustCompile(`Throughput Exceeded Error`)
	// renewalFailed is a lease renewal that failed (the consumer ends; the lease is taken again
	// by this worker or another).
	renewalFailed = regexp.MustCompile(`Error in refreshing lease`)
	// heartbeatPutFailed is the consumer's warning after a failed heartbeat put.
	heartbeatPutFailed = regexp.MustCompile(`could not put heartbeat records`)
)

// kclEvidence counts the KCL's recovery lines in one log.
type kclEvidence struct {
	consumersEnded, iteratorsExpired, throughputGaveUp, renewalsFailed, heartbeatWarnings int
}

func (k *kclEvidence) scan(b []byte) {
	k.consumersEnded += len(getRecordsEnded.FindAll(b, -1))
	k.iteratorsExpired += len(expiredIterator.FindAll(b, -1))
	k.throughputGaveUp += len(throughputGaveUp.FindAll(b, -1))
	k.renewalsFailed += len(renewalFailed.FindAll(b, -1))
	k.heartbeatWarnings += len(heartbeatPutFailed.FindAll(b, -1))
}

// recoveries logs the recoveries the workers counted and logged, and the generator's rate; a
// kind of fault that an enabled dependency's rules could inject but never did is a problem (the
// run did not test it).
func (r *chaosReport) recoveries() {
	for _, d := range r.proxies {
		counts := d.px.Counts()
		var never []string
		for _, k := range d.kinds {
			if counts[k] == 0 {
				never = append(never, string(k))
			}
		}
		if len(never) > 0 {
			r.led.problem("dependency %s: fault kinds never injected: %s (injected %s)", d.dep, strings.Join(never, ", "), d.px.Summary())
		}
	}
	if len(r.proxies) == 0 {
		return
	}
	totals := r.scr.recoveryTotals()
	keys := make([]string, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.0f", strings.TrimPrefix(k, "dms2iceberg_"), totals[k]))
	}
	r.t.Logf("CHAOS recoveries (workers' /metrics, summed over processes as last scraped): %s", strings.Join(parts, " "))
	k := r.ev.kcl
	r.t.Logf("CHAOS recoveries (workers' logs): shard consumers ended on a GetRecords error and restarted from the checkpoint with a new iterator %d (expired iterators %d), consumers ended after too many throughput refusals %d, lease renewals failed %d, heartbeat put warnings %d, commit attempts failed %d, unknown commit outcomes resolved %d",
		k.consumersEnded, k.iteratorsExpired, k.throughputGaveUp, k.renewalsFailed, k.heartbeatWarnings, r.ev.conflicts, r.ev.resolvedLogged)
	r.lostLeaseWrites()
}

// lostLeaseWrites logs the lease-table writes that took effect with their answer lost.
func (r *chaosReport) lostLeaseWrites() {
	for _, d := range r.proxies {
		if d.dep != "dynamodb" {
			continue
		}
		lost := map[string]int{}
		for _, e := range d.px.Events() {
			if (e.Kind == faultproxy.KindLost || e.Kind == faultproxy.KindLost5xx) && e.Upstream == 200 {
				lost[strings.TrimPrefix(e.Target, "DynamoDB_20120810.")]++
			}
		}
		r.t.Logf("CHAOS lease-table writes that took effect with their answer lost, by operation: %v", lost)
	}
}

// generator logs the generator's account: the rate asked and sustained (records stored over
// its sending time), its requests, the records it sent again, the faults its proxy injected,
// and the stream's count.
func (r *chaosReport) generator() {
	gl := r.gl
	r.t.Logf("CHAOS generator: asked %.0f records/s, sustained %.1f records/s (%d records stored in %s); workload %d records, stream %d besides heartbeats; %d PutRecords requests; %d records re-sent after a failure (proxy: %d partial failures refusing %d entries, %d requests refused for throughput)",
		r.opt.Rate, gl.rate(), gl.sent, gl.took.Round(time.Millisecond), gl.workload, gl.stream, gl.requests, gl.resent, gl.partialPuts, gl.partialEntries, gl.refusedPuts)
}
