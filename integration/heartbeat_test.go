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

// TestHeartbeatsKeepHealthAndStatus runs the service with heartbeat records
// (consumer.heartbeat_interval) on a 2-shard stream and a short stall_timeout, after its
// workload is committed: the heartbeats are put and read back (metrics), /healthz stays 200 for
// twice the stall timeout although a checkpoint passes heartbeats alone only once a minute (they
// are not records waiting for a commit), and `status` reports no lag (a heartbeat after the
// checkpoint is no change waiting).
func TestHeartbeatsKeepHealthAndStatus(t *testing.T) {
	p := newPipeline(t, 2, 500, 11)
	addr := opsFreeAddr(t)
	const stall = 3 * time.Second
	editConfig(t, p.config, "", map[string]any{"http_addr": addr, "stall_timeout": stall.String()})
	editConfig(t, p.config, "consumer", map[string]any{"heartbeat_interval": "250ms"})
	svc := StartService(t, p.bin, p.config, "DMS2ICEBERG_WORKER_ID=hb-worker-1")
	base := "http://" + addr
	p.waitVerified(5*time.Minute, svc)

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
	events := map[string]float64{}
	for _, s := range samples {
		if s.Name == "dms2iceberg_shard_heartbeats_total" {
			events[s.Labels["event"]] += s.Value
		}
	}
	if events["put"] < 4 || events["read"] < 4 || events["put_failed"] != 0 {
		t.Fatalf("dms2iceberg_shard_heartbeats_total by event: %v; want puts and reads on both shards, no failure", events)
	}

	WaitFor(t, time.Minute, time.Second, func() (bool, error) {
		stdout, stderr, err := RunCLI(t, p.bin, "status", "--config", p.config, "--json")
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
		for _, s := range rep.Shards {
			if s.Lag == nil || *s.Lag != 0 || s.LagError != "" {
				return false, fmt.Errorf("shard %s: lag %v (%s), want 0 with only heartbeats after its checkpoint", s.Shard, s.Lag, s.LagError)
			}
		}
		return len(rep.Shards) == 2, nil
	}, "status to show no lag on either shard")
}
