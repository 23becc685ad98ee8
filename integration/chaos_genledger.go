//go:build integration

package integration

// The generator's ledger (genLedger): every record the workload holds was stored in the stream
// exactly once, whatever the generator's PutRecords answers were (partial failures and
// throughput refusals are sent again; a record stored is never sent again), and the rate the
// generator sustained.

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
)

var (
	// genProgressLine is gen's progress line; its last one (forced at the end) has the totals.
	genProgressLine = regexp.MustCompile(`gen: (\d+)/(\d+) records sent, [0-9.]+ records/s, (\d+) requests, (\d+) records re-sent`)
	// genSummaryLine is gen's summary: the records stored and the time it took to send them.
	genSummaryLine = regexp.MustCompile(`gen: stream \S+: (\d+) records in (\S+) \(`)
)

// genLedger is the generator's account of a run, read from its log, beside the stream's.
type genLedger struct {
	// workload is the records the workload holds; sent those Kinesis stored by gen's count,
	// resent the records sent again after a failure, requests its PutRecords requests.
	workload, sent, resent, requests int
	// took is gen's own time from its first request to its last answer.
	took time.Duration
	// stream is the records the stream holds besides the workers' heartbeats.
	stream int
	// partialEntries is the entries the generator's fault proxy refused in partial failures,
	// partialPuts and refusedPuts the requests it failed partly and whole.
	partialEntries, partialPuts, refusedPuts int
}

// readGenLedger reads gen's log; a log without its last lines is an error.
func readGenLedger(path string) (genLedger, error) {
	var l genLedger
	b, err := os.ReadFile(path)
	if err != nil {
		return l, err
	}
	p := genProgressLine.FindAllSubmatch(b, -1)
	s := genSummaryLine.FindAllSubmatch(b, -1)
	if len(p) == 0 || len(s) == 0 {
		return l, fmt.Errorf("gen's log %s has no progress or summary line", path)
	}
	last := p[len(p)-1]
	l.sent, _ = strconv.Atoi(string(last[1]))
	l.workload, _ = strconv.Atoi(string(last[2]))
	l.requests, _ = strconv.Atoi(string(last[3]))
	l.resent, _ = strconv.Atoi(string(last[4]))
	if l.took, err = time.ParseDuration(string(s[len(s)-1][2])); err != nil {
		return l, fmt.Errorf("gen's summary: %w", err)
	}
	return l, nil
}

// noteProxy adds what the generator's fault proxy injected.
func (l *genLedger) noteProxy(px *faultproxy.Proxy) {
	for _, e := range px.Events() {
		switch e.Kind {
		case faultproxy.KindPartialPut:
			l.partialPuts++
			l.partialEntries += e.Failed
		case faultproxy.KindThroughput:
			l.refusedPuts++
		}
	}
}

// rate is the records per second the generator sustained: records stored over its sending time.
func (l genLedger) rate() float64 { return float64(l.sent) / max(l.took.Seconds(), 1e-9) }

// differences lists where the accounts disagree: a record lost, stored twice, or counted wrong.
func (l genLedger) differences() []string {
	var out []string
	if l.sent != l.workload {
		out = append(out, fmt.Sprintf("gen counted %d records stored of the workload's %d", l.sent, l.workload))
	}
	if l.stream != l.sent {
		out = append(out, fmt.Sprintf("the stream holds %d records besides heartbeats, gen counted %d stored", l.stream, l.sent))
	}
	if l.resent < l.partialEntries {
		out = append(out, fmt.Sprintf("the proxy refused %d entries in partial failures, gen re-sent only %d records", l.partialEntries, l.resent))
	}
	return out
}

// checkLedger compares the generator's account with the stream's records (every shard read to
// its end) and logs it; a disagreement is a difference.
func (o *chaosOracle) checkLedger(gen *chaosGenerator) genLedger {
	l, err := readGenLedger(gen.svc.LogPath)
	if err != nil {
		o.led.violation("generator ledger: %v", err)
		return l
	}
	all, _, err := o.stream.shardList()
	if err != nil {
		o.t.Fatalf("generator ledger: list shards: %v", err)
	}
	for _, sh := range all {
		recs, err := o.recs.upTo(o.ctx, *sh.ShardId, "")
		if err != nil {
			o.t.Fatalf("generator ledger: %v", err)
		}
		for _, r := range recs {
			if !r.heartbeat {
				l.stream++
			}
		}
	}
	if gen.px != nil {
		l.noteProxy(gen.px)
	}
	for _, d := range l.differences() {
		o.led.violation("generator ledger: %s", d)
	}
	return l
}
