//go:build integration

package integration

// The chaos run's report: the CHAOS: lines with the run's numbers and the evidence read from the
// workers' logs.

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
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

// report logs the numbers of the run (the CHAOS: line) and the evidence from the workers' logs.
func (c *chaosRun) report() {
	fenced, trimmed, held, resolvedLogged := 0, 0, 0, 0
	reloads := [3]int{} // started, replaced, cancelled
	conversions := 0
	commits, conflicts, contended, maxAttempts := 0, 0, 0, 0
	errs := map[string]int{}
	for _, p := range c.logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		fenced += len(fencedLine.FindAll(b, -1))
		for _, m := range trimmedLine.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			trimmed += n
		}
		held += len(heldBatchLine.FindAll(b, -1))
		for i, re := range []*regexp.Regexp{reloadStarted, reloadReplaced, reloadCancelled} {
			reloads[i] += len(re.FindAll(b, -1))
		}
		resolvedLogged += len(resolvedLine.FindAll(b, -1))
		conversions += len(convertedLine.FindAll(b, -1))
		for _, m := range attemptsLine.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			commits++
			maxAttempts = max(maxAttempts, n)
			if n >= 5 {
				contended++
			}
		}
		conflicts += len(conflictLine.FindAll(b, -1))
		for _, m := range errorLine.FindAllSubmatch(b, -1) {
			msg := strings.ReplaceAll(string(m[1]), "\t", " ")
			errs[numbers.ReplaceAllString(workerName.ReplaceAllString(msg, "worker: W"), "N")]++
		}
	}
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	// The workers' ERROR lines, by message: none is expected, and each is worth a look.
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool {
		return errs[msgs[i]] > errs[msgs[j]] || (errs[msgs[i]] == errs[msgs[j]] && msgs[i] < msgs[j])
	})
	for i, m := range msgs {
		if i == 10 {
			c.t.Logf("CHAOS error lines: ... %d more messages", len(msgs)-10)
			break
		}
		c.t.Logf("CHAOS error lines: %4d × %s", errs[m], m)
	}
	faultKills := 0
	var perPoint []string
	for _, p := range fault.Points {
		faultKills += st.faultKills[p]
		perPoint = append(perPoint, fmt.Sprintf("%s=%d/%d", p, st.faultKills[p], st.faultsArmed[p]))
	}
	var actions []string
	for _, a := range []string{actKill, actFault, actStop, actTerm, actAdd, actRemove, actSplit, actMerge} {
		actions = append(actions, fmt.Sprintf("%s=%d", a, st.actions[a]))
	}
	rate := 0.0
	if d := st.genEnd.Sub(st.genStart).Seconds(); d > 0 {
		rate = float64(st.records) / d
	}
	depFaults, lostCommits := 0, 0
	var byKind []string
	for _, d := range c.proxies {
		depFaults += d.px.Total()
		byKind = append(byKind, d.dep+": "+d.px.Summary())
		for _, e := range d.px.Events() {
			if e.Rule == "rest-commit" && (e.Kind == faultproxy.KindLost || e.Kind == faultproxy.KindLost5xx) && e.Upstream == http.StatusOK {
				lostCommits++
			}
		}
	}
	// The unknown commit outcomes, from the workers' /metrics (chaos_metrics.go).
	unknown, procs, unscraped := c.scr.unknownTotals()
	resolved := unknown["landed"] + unknown["not_landed"] + unknown["another_writer"]
	c.t.Logf("CHAOS: seed=%d cycles=%d duration=%s perCycle=%s deps=%q kills=%d faultKills=%d stops=%d leaseMoves=%d splits=%d merges=%d depFaults=%d unknownResolved=%.0f records=%d recordsPerSec=%.0f rowsChecked=%d orphansAfterCleanup=%d differences=%d",
		c.opt.Seed, st.cycles, time.Since(c.start).Round(time.Second), (st.cyclesTook / time.Duration(max(st.cycles, 1))).Round(100*time.Millisecond), c.opt.Deps,
		st.kills, faultKills, st.stops, st.leaseMoves, st.splits, st.merges,
		depFaults, resolved, st.records, rate, st.rows, st.orphansAfter, len(st.violations))
	c.t.Logf("CHAOS unknown commit outcomes (dms2iceberg_table_commit_unknown_outcomes_total, summed over the %d worker processes as last scraped; %d never answered a scrape): %s; the workers logged %d resolutions (a process killed or stopping after its last scrape can log more than it was seen to count)",
		procs, unscraped, formatOutcomes(unknown), resolvedLogged)
	for _, d := range c.proxies {
		c.t.Logf("CHAOS dependency faults (%s): %s; by rule %s; forwarded %d", d.dep, d.px.Summary(), d.px.SummaryByRule(), d.px.Forwarded())
	}
	if c.opt.DepsREST {
		c.t.Logf("CHAOS REST commits that landed at the server with their answer lost: %d", lostCommits)
	}
	if len(byKind) > 0 {
		c.t.Logf("CHAOS faults by kind: %s", strings.Join(byKind, "; "))
	}
	// A reload is started once per create-table that a worker applies (again after a crash before
	// its end), and replaced once by the worker whose commit publishes it.
	c.t.Logf("CHAOS reloads (workers' logs): %d started, %d replaced the table's content, %d cancelled",
		reloads[0], reloads[1], reloads[2])
	c.t.Logf("CHAOS conversions of equality deletes (workers' logs, delete_mode %s): %d", c.opt.DeleteMode, conversions)
	if c.opt.DeleteMode != maintenance.DeleteModeEquality && conversions == 0 {
		// A run that never converted did not test the mode it names.
		c.problem("delete_mode %s, but no worker logged a conversion of equality deletes", c.opt.DeleteMode)
	}
	c.t.Logf("CHAOS positional branches checked at the end: %d", st.branches)
	if c.opt.DeleteMode != maintenance.DeleteModeEquality && conversions > 0 && st.branches == 0 {
		// Every conversion moves its table's positional branch: none checked means none kept.
		c.problem("delete_mode %s: %d conversions, but no table has a positional branch", c.opt.DeleteMode, conversions)
	}
	c.t.Logf("CHAOS table batches committed with the writer's deletion vectors (retained snapshots): %d", st.vectorCommits)
	if c.opt.DeleteMode == maintenance.DeleteModeDV && st.vectorCommits == 0 {
		// The tables keyed by one integer column write vectors in dv mode (writer_vectors).
		c.problem("delete_mode dv, but no retained snapshot was committed with the writer's deletion vectors")
	}
	c.t.Logf("CHAOS orphans: %d data files unreferenced before cleanup, %d files removed by it, %d unreferenced after",
		st.orphansBefore, st.orphansRemoved, st.orphansAfter)
	samples := st.workerSamples[0] + st.workerSamples[1] + st.workerSamples[2] + st.workerSamples[3]
	share := func(i int) int { return 100 * st.workerSamples[i] / max(1, samples) }
	c.t.Logf("CHAOS detail: time with 0/1/2/3 workers running %d%%/%d%%/%d%%/%d%%; actions %s; fault kills/armed per point: %s; SIGSTOPs during which a lease moved %d/%d; graceful stops %d (longest %s); worker starts %d; lease acquisitions %d; reshards while traffic flowed %d; checkpoint checks %d (the final one over %d records); files checked %d; zombie processors fenced %d; rows trimmed by watermarks %d; batches the reloaded table already held after a failed attempt %d; writer commits %d (failed attempts: lost races and dependency faults %d, commits needing 5 or more attempts %d, most attempts %d); graceful stops past shutdown_timeout %d; problems %d",
		share(0), share(1), share(2), share(3), strings.Join(actions, " "), strings.Join(perPoint, " "), st.stopsMoved, st.stops, st.terms, st.maxStop.Round(100*time.Millisecond),
		st.starts, st.acquisitions, st.reshardsLive, st.checks, st.records, st.files, fenced, trimmed, held,
		commits, conflicts, contended, maxAttempts, st.slowStops, len(st.problems))
}
