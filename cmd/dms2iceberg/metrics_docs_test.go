package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registeredNames returns the name of every metric m registers: every collector registered
// through m.register describes its metrics, whether or not they have series yet.
func registeredNames(t *testing.T, m *promMetrics) map[string]bool {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range m.registered {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if sm := fq.FindStringSubmatch(d.String()); sm != nil {
				names[sm[1]] = true
			}
		}
	}
	// What the registry gathers must all be described above: nothing bypasses m.register.
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !names[f.GetName()] {
			t.Errorf("metric %s is registered without m.register: the docs check cannot see it", f.GetName())
		}
	}
	return names
}

// documentedNames are the metrics of the table in docs/deploy.md §4 (rows "| `name` | ...").
func documentedNames(doc string) map[string]bool {
	row := regexp.MustCompile("(?m)^\\| `(" + metricsNamespace + "_[a-z0-9_]+)` \\|")
	out := map[string]bool{}
	for _, sm := range row.FindAllStringSubmatch(doc, -1) {
		out[sm[1]] = true
	}
	return out
}

// Every metric the service registers is documented in the table of docs/deploy.md §4, so an
// operator can look up whatever /metrics shows, and every metric the table documents exists.
func TestEveryMetricIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newPromMetrics()
	names := registeredNames(t, m)
	ours := 0
	for name := range names {
		if strings.HasPrefix(name, metricsNamespace+"_") {
			ours++
		}
	}
	if ours < 50 {
		t.Fatalf("found only %d dms2iceberg metrics: the registry walk is broken", ours)
	}
	documented := documentedNames(string(doc))
	for name := range names {
		if !strings.HasPrefix(name, metricsNamespace+"_") {
			continue // the Go runtime and process collectors, documented by Prometheus
		}
		if !documented[name] {
			t.Errorf("metric %s is not documented in the table of docs/deploy.md §4", name)
		}
	}
	for name := range documented {
		if !names[name] {
			t.Errorf("docs/deploy.md §4 documents %s, which the service does not register", name)
		}
	}
}
