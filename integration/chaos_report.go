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
)

var (
	fencedLine  = regexp.MustCompile(`lease moved on; this processor stops checkpointing`)
	trimmedLine = regexp.MustCompile(`"trimmed": ([1-9][0-9]*)`)
	landedLine  = regexp.MustCompile(`commit outcome was unknown; the table already holds this batch`)
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
	fenced, trimmed, landed := 0, 0, 0
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
		landed += len(landedLine.FindAll(b, -1))
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
	if c.proxy != nil {
		depFaults = c.proxy.Total()
		for _, e := range c.proxy.Events() {
			if e.Rule == "rest-commit" && (e.Kind == faultproxy.KindLost || e.Kind == faultproxy.KindLost5xx) && e.Upstream == http.StatusOK {
				lostCommits++
			}
		}
	}
	c.t.Logf("CHAOS: seed=%d cycles=%d duration=%s kills=%d faultKills=%d stops=%d leaseMoves=%d splits=%d merges=%d depFaults=%d unknownResolved=%d records=%d recordsPerSec=%.0f rowsChecked=%d orphansAfterCleanup=%d differences=%d",
		c.opt.Seed, st.cycles, time.Since(c.start).Round(time.Second), st.kills, faultKills, st.stops, st.leaseMoves, st.splits, st.merges,
		depFaults, landed, st.records, rate, st.rows, st.orphansAfter, len(st.violations))
	if c.proxy != nil {
		c.t.Logf("CHAOS dependency faults (REST catalog): %s; by rule %s; commits that landed at the server with their answer lost %d; batches found in the reloaded table after a failed commit (unknown outcomes and lost races) %d",
			c.proxy.Summary(), c.proxy.SummaryByRule(), lostCommits, landed)
	}
	c.t.Logf("CHAOS orphans: %d data files unreferenced before cleanup, %d files removed by it, %d unreferenced after",
		st.orphansBefore, st.orphansRemoved, st.orphansAfter)
	samples := st.workerSamples[0] + st.workerSamples[1] + st.workerSamples[2] + st.workerSamples[3]
	share := func(i int) int { return 100 * st.workerSamples[i] / max(1, samples) }
	c.t.Logf("CHAOS detail: time with 0/1/2/3 workers running %d%%/%d%%/%d%%/%d%%; actions %s; fault kills/armed per point: %s; SIGSTOPs during which a lease moved %d/%d; graceful stops %d (longest %s); worker starts %d; lease acquisitions %d; reshards while traffic flowed %d; checkpoint checks %d (the final one over %d records); files checked %d; zombie checkpoints fenced %d; rows trimmed by watermarks %d; batches found committed by another worker after a conflict %d; writer commits %d (failed attempts: lost races and dependency faults %d, commits needing 5 or more attempts %d, most attempts %d); graceful stops past shutdown_timeout %d; problems %d",
		share(0), share(1), share(2), share(3), strings.Join(actions, " "), strings.Join(perPoint, " "), st.stopsMoved, st.stops, st.terms, st.maxStop.Round(100*time.Millisecond),
		st.starts, st.acquisitions, st.reshardsLive, st.checks, st.records, st.files, fenced, trimmed, landed,
		commits, conflicts, contended, maxAttempts, st.slowStops, len(st.problems))
}
