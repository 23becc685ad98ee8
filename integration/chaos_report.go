//go:build integration

package integration

// The chaos run's report (chaosReport): the CHAOS: lines with the run's numbers and the evidence
// read from every process's log (logEvidence).

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

var (
	// fencedLine is a zombie processor stopped: its checkpoint or horizon refused, or its
	// lease taken while its worker held it (consumer.leaseLost).
	fencedLine  = regexp.MustCompile(`lease moved on; this processor stops|lease taken by another worker while this one held it`)
	trimmedLine = regexp.MustCompile(`"trimmed": ([1-9][0-9]*)`)
	// heldBatchLine is a batch the reloaded table already held after a failed attempt (an
	// unknown outcome that landed, or a batch another worker committed first).
	heldBatchLine = regexp.MustCompile(`the table already holds this batch after a failed attempt`)
	// reloadStarted, reloadReplaced and reloadCancelled are a DMS reload's steps (sink/reload.go).
	reloadStarted   = regexp.MustCompile(`\treload started: `)
	reloadReplaced  = regexp.MustCompile(`\treload replaced the table's content`)
	reloadCancelled = regexp.MustCompile(`\treload cancelled: `)
	// convertedLine is a conversion of equality deletes to position deletes or deletion
	// vectors (sink/maintenance/position.go), in delete_mode position and dv.
	convertedLine = regexp.MustCompile(`\tconverted equality deletes\t`)
	// resolvedLine is one unknown commit outcome resolved (the log's twin of the metric).
	resolvedLine = regexp.MustCompile(`commit outcome was unknown; resolved`)
	// attemptsLine captures the attempts of a writer's commit; conflictLine is one failed attempt.
	attemptsLine = regexp.MustCompile(`\tcommitted\t\{[^\n]*"attempts": ([0-9]+)`)
	// (The writer logs "commit failed" at WARN for every failed attempt, lost race or not.)
	conflictLine = regexp.MustCompile(`\tcommit failed\t`)
	// errorLine matches a console log line at ERROR level and captures its component and message.
	errorLine = regexp.MustCompile(`(?m)^\S+\tERROR\t([^\n]*?)(?:\t\{[^\n]*)?$`)
	// numbers and workerName make messages that differ only by shard, line or worker one.
	numbers    = regexp.MustCompile(`[0-9]+`)
	workerName = regexp.MustCompile(`worker: \S+`)
)

// logEvidence is what the report counts in every process's log.
type logEvidence struct {
	fenced, trimmed, held, resolvedLogged int
	reloads                               [3]int // started, replaced, cancelled
	conversions                           int
	commits, conflicts, contended         int
	maxAttempts                           int
	errs                                  map[string]int // the ERROR lines, by message
	kcl                                   kclEvidence    // the KCL's recovery lines
}

// scanLogs reads the logs at paths (a missing one is skipped).
func scanLogs(paths []string) logEvidence {
	ev := logEvidence{errs: map[string]int{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		ev.scan(b)
	}
	return ev
}

// scan adds one log's evidence.
func (ev *logEvidence) scan(b []byte) {
	ev.fenced += len(fencedLine.FindAll(b, -1))
	for _, m := range trimmedLine.FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		ev.trimmed += n
	}
	ev.held += len(heldBatchLine.FindAll(b, -1))
	for i, re := range []*regexp.Regexp{reloadStarted, reloadReplaced, reloadCancelled} {
		ev.reloads[i] += len(re.FindAll(b, -1))
	}
	ev.resolvedLogged += len(resolvedLine.FindAll(b, -1))
	ev.conversions += len(convertedLine.FindAll(b, -1))
	for _, m := range attemptsLine.FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		ev.commits++
		ev.maxAttempts = max(ev.maxAttempts, n)
		if n >= 5 {
			ev.contended++
		}
	}
	ev.conflicts += len(conflictLine.FindAll(b, -1))
	ev.kcl.scan(b)
	for _, m := range errorLine.FindAllSubmatch(b, -1) {
		msg := strings.ReplaceAll(string(m[1]), "\t", " ")
		ev.errs[numbers.ReplaceAllString(workerName.ReplaceAllString(msg, "worker: W"), "N")]++
	}
}

// chaosReport logs the numbers of a finished run (the CHAOS: lines) and the evidence from the
// workers' logs; it reports as problems a delete mode that the run did not exercise.
type chaosReport struct {
	t       *testing.T
	opt     chaosOptions
	led     *chaosLedger
	ev      logEvidence
	st      chaosStats // the counters at the end
	proxies []depProxy
	scr     *scraper
	gl      genLedger // the generator's account
}

// report logs the numbers of the run (the CHAOS: line) and the evidence from the workers' logs.
func (c *chaosRun) report(gl genLedger) {
	ev := scanLogs(c.cl.logs)
	r := &chaosReport{t: c.t, opt: c.opt, led: c.led, ev: ev,
		st: c.led.stats(), proxies: c.env.proxies, scr: c.cl.scr, gl: gl}
	r.log()
}

func (r *chaosReport) log() {
	r.errorLines()
	r.summary()
	r.dependencies()
	r.recoveries()
	r.generator()
	r.deleteModes()
	r.detail()
}

// errorLines logs the workers' ERROR lines, by message: none is expected, and each is worth a
// look.
func (r *chaosReport) errorLines() {
	errs := r.ev.errs
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool {
		return errs[msgs[i]] > errs[msgs[j]] || (errs[msgs[i]] == errs[msgs[j]] && msgs[i] < msgs[j])
	})
	for i, m := range msgs {
		if i == 10 {
			r.t.Logf("CHAOS error lines: ... %d more messages", len(msgs)-10)
			break
		}
		r.t.Logf("CHAOS error lines: %4d × %s", errs[m], m)
	}
}

// summary logs the CHAOS: line and the unknown commit outcomes.
func (r *chaosReport) summary() {
	st, opt := r.st, r.opt
	faultKills := 0
	for _, p := range fault.Points {
		faultKills += st.faultKills[p]
	}
	rate := 0.0
	if d := st.genEnd.Sub(st.genStart).Seconds(); d > 0 {
		rate = float64(st.records) / d
	}
	depFaults := 0
	for _, d := range r.proxies {
		depFaults += d.px.Total()
	}
	// The unknown commit outcomes, from the workers' /metrics (chaos_metrics.go).
	unknown, procs, unscraped := r.scr.unknownTotals()
	resolved := unknown["landed"] + unknown["not_landed"] + unknown["another_writer"]
	r.t.Logf("CHAOS: seed=%d layout=%s deleteMode=%s cycles=%d duration=%s perCycle=%s deps=%q kills=%d faultKills=%d stops=%d leaseMoves=%d splits=%d merges=%d depFaults=%d unknownResolved=%.0f records=%d recordsPerSec=%.0f genRecords=%d genRecordsPerSec=%.0f rowsChecked=%d orphansAfterCleanup=%d differences=%d",
		opt.Seed, opt.Layout, opt.DeleteMode, st.cycles, time.Since(r.led.start).Round(time.Second), (st.cyclesTook / time.Duration(max(st.cycles, 1))).Round(100*time.Millisecond), opt.Deps,
		st.kills, faultKills, st.stops, st.leaseMoves, st.splits, st.merges,
		depFaults, resolved, st.records, rate, r.gl.sent, r.gl.rate(), st.rows, st.orphansAfter, len(st.violations))
	r.t.Logf("CHAOS unknown commit outcomes (dms2iceberg_table_commit_unknown_outcomes_total, summed over the %d worker processes as last scraped; %d never answered a scrape): %s; the workers logged %d resolutions (a process killed or stopping after its last scrape can log more than it was seen to count)",
		procs, unscraped, formatOutcomes(unknown), r.ev.resolvedLogged)
}

// dependencies logs the faults the proxies injected.
func (r *chaosReport) dependencies() {
	lostCommits := 0
	var byKind []string
	for _, d := range r.proxies {
		byKind = append(byKind, d.dep+": "+d.px.Summary())
		for _, e := range d.px.Events() {
			if e.Rule == "rest-commit" && (e.Kind == faultproxy.KindLost || e.Kind == faultproxy.KindLost5xx) && e.Upstream == http.StatusOK {
				lostCommits++
			}
		}
	}
	for _, d := range r.proxies {
		r.t.Logf("CHAOS dependency faults (%s): %s; by rule %s; forwarded %d", d.dep, d.px.Summary(), d.px.SummaryByRule(), d.px.Forwarded())
	}
	if r.opt.DepsREST {
		r.t.Logf("CHAOS REST commits that landed at the server with their answer lost: %d", lostCommits)
	}
	if len(byKind) > 0 {
		r.t.Logf("CHAOS faults by kind: %s", strings.Join(byKind, "; "))
	}
}

// deleteModes logs the reloads, the conversions, the positional branches, the writer's vectors
// and the orphans; a delete mode that none of them exercised is a problem.
func (r *chaosReport) deleteModes() {
	st, mode, conversions := r.st, r.opt.DeleteMode, r.ev.conversions
	// A reload is started once per create-table that a worker applies (again after a crash before
	// its end), and replaced once by the worker whose commit publishes it.
	r.t.Logf("CHAOS reloads (workers' logs): %d started, %d replaced the table's content, %d cancelled",
		r.ev.reloads[0], r.ev.reloads[1], r.ev.reloads[2])
	r.t.Logf("CHAOS conversions of equality deletes (workers' logs, delete_mode %s): %d", mode, conversions)
	if mode != maintenance.DeleteModeEquality && conversions == 0 && (mode != maintenance.DeleteModeDV || st.vectorCommits == 0) {
		// A run that never converted did not test the mode it names (in dv mode the writers
		// commit vectors for every key: conversions follow only reloads and declined batches).
		r.led.problem("delete_mode %s, but no worker logged a conversion of equality deletes", mode)
	}
	r.t.Logf("CHAOS positional branches checked at the end: %d", st.branches)
	if mode != maintenance.DeleteModeEquality && conversions > 0 && st.branches == 0 {
		// Every conversion moves its table's positional branch: none checked means none kept.
		r.led.problem("delete_mode %s: %d conversions, but no table has a positional branch", mode, conversions)
	}
	r.t.Logf("CHAOS table batches committed with the writer's deletion vectors (retained snapshots): %d", st.vectorCommits)
	if mode == maintenance.DeleteModeDV && st.vectorCommits == 0 {
		// Every table's writer writes vectors in dv mode (writer_vectors).
		r.led.problem("delete_mode dv, but no retained snapshot was committed with the writer's deletion vectors")
	}
	r.t.Logf("CHAOS orphans: %d data files unreferenced before cleanup, %d files removed by it, %d unreferenced after",
		st.orphansBefore, st.orphansRemoved, st.orphansAfter)
}

// detail logs the CHAOS detail line.
func (r *chaosReport) detail() {
	st, ev := r.st, r.ev
	var perPoint []string
	for _, p := range fault.Points {
		perPoint = append(perPoint, fmt.Sprintf("%s=%d/%d", p, st.faultKills[p], st.faultsArmed[p]))
	}
	var actions []string
	for _, a := range []string{actKill, actFault, actStop, actTerm, actAdd, actRemove, actSplit, actMerge} {
		actions = append(actions, fmt.Sprintf("%s=%d", a, st.actions[a]))
	}
	samples := 0
	for _, n := range st.workerSamples {
		samples += n
	}
	share := func(i int) int { return 100 * st.workerSamples[i] / max(1, samples) }
	running := fmt.Sprintf("0/1/2/3 workers running %d%%/%d%%/%d%%/%d%%", share(0), share(1), share(2), share(3))
	if r.opt.MaxWorkers > 3 {
		running = fmt.Sprintf("0/1/2/3/4/5 workers running %d%%/%d%%/%d%%/%d%%/%d%%/%d%%", share(0), share(1), share(2), share(3), share(4), share(5))
	}
	r.t.Logf("CHAOS detail: time with %s; actions %s; fault kills/armed per point: %s; SIGSTOPs during which a lease moved %d/%d; graceful stops %d (longest %s); worker starts %d; lease acquisitions %d; reshards while traffic flowed %d; checkpoint checks %d (the final one over %d records); files checked %d; zombie processors fenced %d; rows trimmed by watermarks %d; batches the reloaded table already held after a failed attempt %d; writer commits %d (failed attempts: lost races and dependency faults %d, commits needing 5 or more attempts %d, most attempts %d); graceful stops past shutdown_timeout %d; problems %d",
		running, strings.Join(actions, " "), strings.Join(perPoint, " "), st.stopsMoved, st.stops, st.terms, st.maxStop.Round(100*time.Millisecond),
		st.starts, st.acquisitions, st.reshardsLive, st.checks, st.records, st.files, ev.fenced, ev.trimmed, ev.held,
		ev.commits, ev.conflicts, ev.contended, ev.maxAttempts, st.slowStops, len(st.problems))
}
