//go:build integration

package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// waitConsumed waits until the pipeline's KCL application has checkpointed every shard at its
// last record: everything was read and committed (checkpoints follow commits).
func (p *pipeline) waitConsumed(timeout time.Duration, svc *Service) {
	p.t.Helper()
	last := p.lastSequenceNumbers()
	WaitFor(p.t, timeout, time.Second, func() (bool, error) {
		if svc.Exited() {
			return false, fmt.Errorf("service exited early:\n%s", tailFile(svc.LogPath, 8<<10))
		}
		cps := p.checkpoints()
		for shard, seq := range last {
			if cps[shard] != seq {
				return false, fmt.Errorf("shard %s checkpointed at %q, last record %q", shard, cps[shard], seq)
			}
		}
		return true, nil
	}, "every shard checkpointed at its last record")
}

var (
	partialTableLine = regexp.MustCompile(`(?m)^table (\S+): rows=(\d+) expected=(\d+) (ok|DIFF \((.*)\))$`)
	// partialColumnDiff is one differing column of a "key K: ..." line: name, got, want.
	partialColumnDiff = regexp.MustCompile(`(\w+) got (null|"(?:[^"\\]|\\.)*"…?) want (null|"(?:[^"\\]|\\.)*"…?)`)
)

// TestPartialUpdatesEndToEnd proves sink.absent_columns keep end to end: the generator writes
// its workload with partial update images (`gen --partial-updates`: updates carry the key and
// only the changed columns, as Oracle without ALL COLUMNS supplemental logging sends them) to a
// 4-shard stream, and a service with absent_columns keep must reconstruct the full rows (verify
// equal; the absent columns were completed from the batch and from the stored rows, and never
// found missing). A second service with its own KCL application and catalog consumes the same
// stream with the default absent_columns null: verify must then report the keyed tables as
// differing, and only by columns the partial images left out (the same keys; every differing
// column is NULL where a value is expected), which shows the first check can fail.
func TestPartialUpdatesEndToEnd(t *testing.T) {
	p := preparePipeline(t)
	start := time.Now()
	_, stderr, err := RunCLI(t, p.bin, "gen", "--stream", p.stream, "--shards", "4", "--changes", "3000",
		"--load-rows", "200", "--seed", "31", "--partial-updates", "--expected", p.expected, "--tables-config", p.tablesCfg)
	if err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	p.records = countRecords(t, p.stream)
	t.Logf("gen --partial-updates wrote %d records in %s", p.records, time.Since(start).Round(time.Millisecond))

	// keep: the service under test, with /metrics to see where the absent columns came from.
	// The stream is complete before the service starts, so one read per shard could put every
	// change of a table in one batch and complete every partial image from the batch alone. The
	// ordering guard commits everything within its bound at once, so small flushes alone no
	// longer split the stream: a read-ahead of one second makes the shards hand on (and so
	// commit) the stream in slices of about a second of arrivals, and the later slices' partial
	// images read the rows the table holds.
	p.writeConfig(map[string]any{"absent_columns": "keep", "flush_rows": 100})
	addr := opsFreeAddr(t)
	editConfig(t, p.config, "", map[string]any{"http_addr": addr})
	editConfig(t, p.config, "consumer", map[string]any{"max_read_ahead": "1s"})
	// null: the same stream into its own catalog (data directory) with its own KCL application.
	q := p.withCatalog(t, "null", t.TempDir(), nil, "")
	editConfig(t, q.config, "sink", map[string]any{"absent_columns": "null"})

	// Both consume at once: the machine has two cores and most of the time is waiting.
	start = time.Now()
	keepSvc := StartService(t, p.bin, p.config)
	nullSvc := StartService(t, q.bin, q.config)
	p.waitVerified(3*time.Minute, keepSvc)
	keepTook := time.Since(start)
	samples, err := metrictest.Scrape(scrapeClient, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	from := metrictest.ByLabel(samples, "dms2iceberg_table_partial_images_total", "completed_from")
	if err := keepSvc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop (keep): %v", err)
	}
	report := p.mustVerify()
	t.Logf("partial images completed from: batch %.0f, table %.0f, none %.0f", from["batch"], from["table"], from["none"])
	if from["table"] == 0 || from["none"] != 0 {
		t.Fatalf("partial update images: %v completed from the batch, the table, nowhere; want some from the table and none from nowhere", from)
	}

	q.waitConsumed(3*time.Minute, nullSvc)
	nullTook := time.Since(start)
	if err := nullSvc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop (null): %v", err)
	}
	stdout, stderr, err := RunCLI(t, q.bin, "verify", "--config", q.config, "--expected", q.expected, "--max-diffs", "1000000")
	if err == nil {
		t.Fatalf("verify passed with absent_columns null, so the partial images prove nothing:\n%s", stdout)
	}
	if !strings.Contains(stdout, "verify: 3 of 4 tables differ") {
		t.Fatalf("verify with absent_columns null: want the 3 keyed tables to differ:\n%s%s", stdout, stderr)
	}
	// Only values differ, never keys, and every difference is a NULL where the partial image
	// left a column out.
	nulled := map[string]int{}
	var summary []string
	for _, m := range partialTableLine.FindAllStringSubmatch(stdout, -1) {
		summary = append(summary, m[0])
		name, rows, want, status, why := m[1], m[2], m[3], m[4], m[5]
		if rows != want {
			t.Errorf("%s: %s rows, want %s", name, rows, want)
		}
		if name == "shop.events" {
			if status != "ok" {
				t.Errorf("keyless shop.events differs: %s", m[0])
			}
			continue
		}
		if !strings.HasSuffix(why, " differing rows") || strings.Contains(why, ",") {
			t.Errorf("%s: %s; want differing rows only", name, m[0])
		}
	}
	if len(summary) != 4 {
		t.Fatalf("verify reported %d tables:\n%s", len(summary), stdout)
	}
	diffLines := 0
	for _, line := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(line, "  key ") {
			continue
		}
		diffLines++
		cols := partialColumnDiff.FindAllStringSubmatch(line, -1)
		if len(cols) == 0 {
			t.Fatalf("unparsed difference %q", line)
		}
		for _, c := range cols {
			if c[2] != "null" || c[3] == "null" {
				t.Fatalf("difference that is not a NULLed column: %q", line)
			}
			nulled[c[1]]++
		}
	}
	if diffLines == 0 {
		t.Fatalf("no differing rows listed:\n%s", stdout)
	}
	t.Logf("verify with absent_columns keep:\n%s", report)
	t.Logf("verify with absent_columns null:\n%s\n%d rows differ; NULLed columns: %v", strings.Join(summary, "\n"), diffLines, nulled)
	t.Logf("MEASURED: %d records (partial updates, 4 shards): keep verified in %s, null consumed in %s (both running at once)",
		p.records, keepTook.Round(time.Millisecond), nullTook.Round(time.Millisecond))
}
