//go:build integration

package integration

// Reading a service's /metrics (the ops tests, the dependency-fault tests and the chaos run).

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// opsFreeAddr returns a loopback address with a port that was free a moment ago.
func opsFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// opsSample is one sample of a scrape: the metric name and its labels.
type opsSample struct {
	name   string
	labels map[string]string
	value  float64
}

// opsScrape GETs /metrics and parses the text exposition format.
func opsScrape(url string) ([]opsSample, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var out []opsSample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("bad sample %q: %v", line, err)
		}
		s := opsSample{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[j+1:], "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
			s.name = s.name[:j]
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// opsByLabel returns name's samples keyed by the value of label.
func opsByLabel(samples []opsSample, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.name == name {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// scrapeClient bounds a scrape: a frozen or dying process must not hold its caller.
var scrapeClient = &http.Client{Timeout: 3 * time.Second}

// unknownOutcomesMetric counts a service's batch commit attempts of unknown outcome by resolution.
const unknownOutcomesMetric = "dms2iceberg_table_commit_unknown_outcomes_total"

// unknownOutcomes returns the service's unknown outcomes by resolution (landed, not_landed,
// another_writer), summed over its tables.
func unknownOutcomes(samples []opsSample) map[string]float64 {
	return opsByLabel(samples, unknownOutcomesMetric, "resolution")
}

// formatOutcomes renders unknown outcomes by resolution: "3 (landed 1, not_landed 2, another_writer 0)".
func formatOutcomes(m map[string]float64) string {
	return fmt.Sprintf("%.0f (landed %.0f, not_landed %.0f, another_writer %.0f)",
		m["landed"]+m["not_landed"]+m["another_writer"], m["landed"], m["not_landed"], m["another_writer"])
}
