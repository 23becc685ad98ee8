//go:build integration

package integration

// Reading a service's /metrics (the ops tests, the dependency-fault tests and the chaos run)
// through pkg/metrictest.

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// opsFreeAddr returns a loopback address with a port that was free a moment ago.
func opsFreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// scrapeClient bounds a scrape: a frozen or dying process must not hold its caller.
var scrapeClient = &http.Client{Timeout: 3 * time.Second}

// unknownOutcomesMetric counts a service's batch commit attempts of unknown outcome by resolution.
const unknownOutcomesMetric = "dms2iceberg_table_commit_unknown_outcomes_total"

// unknownOutcomes returns the service's unknown outcomes by resolution (landed, not_landed,
// another_writer), summed over its tables.
func unknownOutcomes(samples []metrictest.Sample) map[string]float64 {
	return metrictest.ByLabel(samples, unknownOutcomesMetric, "resolution")
}

// formatOutcomes renders unknown outcomes by resolution: "3 (landed 1, not_landed 2, another_writer 0)".
func formatOutcomes(m map[string]float64) string {
	return fmt.Sprintf("%.0f (landed %.0f, not_landed %.0f, another_writer %.0f)",
		m["landed"]+m["not_landed"]+m["another_writer"], m["landed"], m["not_landed"], m["another_writer"])
}
