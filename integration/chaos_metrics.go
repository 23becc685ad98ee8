//go:build integration

package integration

// The chaos run's reading of the workers' /metrics: every worker process serves its own, and the
// driver scrapes each one every second (the observer), right before a SIGKILL, and every 250 ms
// during a graceful stop until the process exits (its /metrics outlive its sink), so that the
// counters a process ends with are known although the process is gone. What a process counted
// after its last scrape (in the moment before a SIGKILL or an armed fault point killed it, or
// in the last 250 ms of a stop) is not seen.

import (
	"sync"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// procMetrics is one worker process's /metrics as last scraped.
type procMetrics struct {
	id, addr string
	// frozen: SIGSTOPped (a scrape would wait for its timeout); done: exited or signalled to
	// stop, never scraped again.
	frozen, done bool
	scrapes      int
	unknown      map[string]float64 // unknown commit outcomes by resolution
	// recovery holds the recovery counters (recoveryMetrics) by series, as last scraped.
	recovery map[string]recoverySeries
}

// scraper holds every worker process's metrics; safe for concurrent use (the driver and the
// observer).
type scraper struct {
	mu    sync.Mutex
	procs []*procMetrics
}

func (s *scraper) add(id, addr string) *procMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &procMetrics{id: id, addr: addr, unknown: map[string]float64{}, recovery: map[string]recoverySeries{}}
	s.procs = append(s.procs, p)
	return p
}

// scrape reads p's /metrics once, unless it is frozen or done; a failed scrape (the process is
// starting, dying or busy) keeps the last values.
func (s *scraper) scrape(p *procMetrics) {
	s.mu.Lock()
	skip := p.frozen || p.done
	s.mu.Unlock()
	if skip {
		return
	}
	samples, err := metrictest.Scrape(scrapeClient, "http://"+p.addr+"/metrics")
	if err != nil {
		return
	}
	u := unknownOutcomes(samples)
	s.mu.Lock()
	defer s.mu.Unlock()
	p.scrapes++
	for k, v := range u {
		p.unknown[k] = max(p.unknown[k], v) // counters only grow
	}
	p.noteRecoveries(samples)
}

// last scrapes p a final time and marks it done (call before signalling it to stop).
func (s *scraper) last(p *procMetrics) {
	s.scrape(p)
	s.setDone(p)
}

func (s *scraper) setDone(p *procMetrics) {
	s.mu.Lock()
	p.done = true
	s.mu.Unlock()
}

func (s *scraper) setFrozen(p *procMetrics, frozen bool) {
	s.mu.Lock()
	p.frozen = frozen
	s.mu.Unlock()
}

// scrapeAll scrapes every live process once.
func (s *scraper) scrapeAll() {
	s.mu.Lock()
	live := make([]*procMetrics, 0, len(s.procs))
	for _, p := range s.procs {
		if !p.done && !p.frozen {
			live = append(live, p)
		}
	}
	s.mu.Unlock()
	for _, p := range live {
		s.scrape(p)
	}
}

// unknownTotals sums the unknown commit outcomes over every process, by resolution, and counts
// the processes and those that were never scraped successfully.
func (s *scraper) unknownTotals() (totals map[string]float64, procs, never int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	totals = map[string]float64{}
	for _, p := range s.procs {
		if p.scrapes == 0 {
			never++
		}
		for k, v := range p.unknown {
			totals[k] += v
		}
	}
	return totals, len(s.procs), never
}
