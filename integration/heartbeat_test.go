//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// TestHeartbeatsKeepHealthAndStatus runs one service with heartbeat records
// (consumer.heartbeat_interval) and a short stall_timeout on a 4-shard stream in DMS's default
// layout (loads by primary key over every shard, CDC by schema.table, control records on the
// task's key; no per-table configuration), until every shard is consumed. Then only heartbeats
// arrive: they are put and read back on every shard (metrics), /healthz stays 200 for twice the
// stall timeout although a checkpoint passes heartbeats alone only once a minute (they are not
// records waiting for a commit), `status` reports no lag (a heartbeat after the checkpoint is no
// change waiting), and the tables equal the expected state.
func TestHeartbeatsKeepHealthAndStatus(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	s := newOrderingStream(t, bin, orderingCase{name: "heartbeats-health", layout: "dms-default", lagShard: -1, lateShard: -1,
		consumer: map[string]any{"heartbeat_interval": "250ms"}})
	r := s.newRun(t, "arrival", nil)
	addr := opsFreeAddr(t)
	const stall = 3 * time.Second
	editConfig(t, r.config, "", map[string]any{"http_addr": addr, "stall_timeout": stall.String()})
	svc := StartService(t, bin, r.config, "DMS2ICEBERG_WORKER_ID=hb-worker-1")
	base := "http://" + addr
	WaitFor(t, ordConsumeTimeout, time.Second, func() (bool, error) {
		if svc.Exited() {
			return false, fmt.Errorf("service exited early:\n%s", tailFile(svc.LogPath, 8<<10))
		}
		if behind := ordBehind(ordLeases(t, r.app), s.last); behind != "" {
			return false, fmt.Errorf("not consumed:%s", behind)
		}
		return true, nil
	}, "every shard checkpointed at (or past) its last record")

	// Only heartbeats arrive now: health stays good well past the stall timeout.
	until := time.Now().Add(2*stall + time.Second)
	for time.Now().Before(until) {
		if got := opsStatus(base + "/healthz"); got != http.StatusOK {
			t.Fatalf("/healthz = %d while only heartbeats arrive (they must not count as waiting records)", got)
		}
		time.Sleep(250 * time.Millisecond)
	}
	samples, err := metrictest.Scrape(scrapeClient, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range []string{"put", "read"} {
		perShard := map[string]float64{}
		for _, smp := range samples {
			if smp.Name == "dms2iceberg_shard_heartbeats_total" && smp.Labels["event"] == event {
				perShard[smp.Labels["shard"]] += smp.Value
			}
		}
		for shard := range s.last {
			if perShard[shard] < 2 {
				t.Errorf("dms2iceberg_shard_heartbeats_total{event=%q}: %v; want at least 2 on every shard (%s has %v)", event, perShard, shard, perShard[shard])
			}
		}
	}
	for _, smp := range samples {
		if smp.Name == "dms2iceberg_shard_heartbeats_total" && smp.Labels["event"] == "put_failed" && smp.Value != 0 {
			t.Errorf("heartbeat puts failed: %s %v", smp.Labels["shard"], smp.Value)
		}
	}

	WaitFor(t, time.Minute, time.Second, func() (bool, error) {
		stdout, stderr, err := RunCLI(t, bin, "status", "--config", r.config, "--json")
		if err != nil {
			return false, fmt.Errorf("status --json: %v\n%s", err, stderr)
		}
		var rep struct {
			Shards []struct {
				Shard    string
				Lag      *float64 `json:"lag_seconds"`
				LagError string   `json:"lag_error"`
			}
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			return false, err
		}
		for _, sh := range rep.Shards {
			if sh.Lag == nil || *sh.Lag != 0 || sh.LagError != "" {
				return false, fmt.Errorf("shard %s: lag %v (%s), want 0 with only heartbeats after its checkpoint", sh.Shard, sh.Lag, sh.LagError)
			}
		}
		return len(rep.Shards) == len(s.last), nil
	}, "status to show no lag on any shard")

	if err := svc.Stop(90 * time.Second); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
	if stdout, stderr, err := RunCLI(t, bin, "verify", "--config", r.config, "--expected", s.expected, "--max-diffs", "5"); err != nil {
		t.Fatalf("verify: %v\n%s%s", err, stdout, stderr)
	}
}
