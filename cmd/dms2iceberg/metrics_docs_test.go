package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric the service registers is documented in docs/deploy.md §4, so an operator can look
// up whatever /metrics shows.
func TestEveryMetricIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newPromMetrics()
	names := map[string]bool{}
	fams, err := m.reg.Gather() // what has series already (gauges without labels, build info)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	// A vector with no series is not gathered: ask every collector field for its descriptions.
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanInterface() {
			f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
		}
		c, ok := f.Interface().(prometheus.Collector)
		if !ok || f.IsNil() {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if sm := fq.FindStringSubmatch(d.String()); sm != nil {
				names[sm[1]] = true
			}
		}
	}
	ours := 0
	for name := range names {
		if strings.HasPrefix(name, metricsNamespace+"_") {
			ours++
		}
	}
	if ours < 45 {
		t.Fatalf("found only %d dms2iceberg metrics: the registry walk is broken", ours)
	}
	for name := range names {
		if !strings.HasPrefix(name, metricsNamespace+"_") {
			continue // the Go runtime and process collectors, documented by Prometheus
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("metric %s is not documented in docs/deploy.md", name)
		}
	}
}
