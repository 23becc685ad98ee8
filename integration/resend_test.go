//go:build integration

package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeylessResendsEndToEnd proves sink.keyless_identity through Kinesis: the
// generator sends some inserts of the keyless table shop.events twice (`gen --resends`: the same
// record again, a few records later, under a new sequence number, as a DMS PutRecords retry or a
// task restart does; only inserts carrying IncludeTransactionDetails), and the service with the
// default keyless_identity auto must end equal to the expected state, which holds each row once
// (verify compares keyless tables as multisets). A second service with its own KCL application
// and catalog consumes the same stream with keyless_identity off: verify must then report
// shop.events with exactly the re-sent rows too many and the keyed tables equal, which shows
// that the first check can fail.
func TestKeylessResendsEndToEnd(t *testing.T) {
	const resends = 60
	p := preparePipeline(t)
	_, stderr, err := RunCLI(t, p.bin, "gen", "--stream", p.stream, "--shards", "2", "--changes", "3000",
		"--load-rows", "100", "--seed", "41", "--resends", strconv.Itoa(resends), "--expected", p.expected, "--tables-config", p.tablesCfg)
	if err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	p.records = countRecords(t, p.stream)
	t.Logf("gen --resends %d wrote %d records", resends, p.records)
	// Small flushes so that a copy and its original often land in different commits.
	p.writeConfig(map[string]any{"flush_rows": 200})
	q := p.withCatalog(t, "off", t.TempDir(), nil, "")
	editConfig(t, q.config, "sink", map[string]any{"keyless_identity": "off"})

	start := time.Now()
	autoSvc := StartService(t, p.bin, p.config)
	offSvc := StartService(t, q.bin, q.config)
	p.waitVerified(4*time.Minute, autoSvc)
	t.Logf("auto: verified after %s", time.Since(start).Round(time.Millisecond))
	if err := autoSvc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop (auto): %v", err)
	}
	p.mustVerify()

	q.waitConsumed(4*time.Minute, offSvc)
	if err := offSvc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop (off): %v", err)
	}
	stdout, stderr, err := RunCLI(t, q.bin, "verify", "--config", q.config, "--expected", q.expected)
	if err == nil {
		t.Fatalf("verify passed with keyless_identity off, so the re-sends prove nothing:\n%s", stdout)
	}
	for _, m := range partialTableLine.FindAllStringSubmatch(stdout, -1) {
		name, rows, want, status := m[1], m[2], m[3], m[4]
		if name != "shop.events" {
			if status != "ok" {
				t.Errorf("keyed table differs with keyless_identity off: %s", m[0])
			}
			continue
		}
		got, _ := strconv.Atoi(rows)
		exp, _ := strconv.Atoi(want)
		if got != exp+resends {
			t.Errorf("keyless_identity off: %s; want %d rows (the expected %d plus the %d re-sends)", m[0], exp+resends, exp, resends)
		}
	}
	if !strings.Contains(stdout, "verify: 1 of 4 tables differ") {
		t.Fatalf("verify with keyless_identity off: want shop.events alone to differ:\n%s%s", stdout, stderr)
	}
}
