// Package metrictest reads a Prometheus /metrics endpoint for tests: the text exposition is
// parsed by the Prometheus parser (expfmt) and flattened into samples as the text format prints
// them (a histogram into its _bucket, _sum and _count samples, a summary into its quantiles, _sum
// and _count). The unit tests of cmd/dms2iceberg and the integration tests share it.
package metrictest

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one sample of an exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Key is the sample as the text format prints it, without the value: name{a="x",b="y"} with
// the labels sorted by name and a histogram's le or a summary's quantile last, or the bare name
// without labels.
func (s Sample) Key() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	names := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if bi, bj := isBound(names[i]), isBound(names[j]); bi != bj {
			return bj
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(escape.Replace(s.Labels[k]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// isBound reports whether label is the one the format adds to a bucket or quantile sample.
func isBound(label string) bool { return label == "le" || label == "quantile" }

// escape escapes a label value as the text format does.
var escape = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Parse parses a text exposition. The samples come in no particular order.
func Parse(r io.Reader) ([]Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out []Sample
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			out = append(out, flatten(name, mf.GetType(), m)...)
		}
	}
	return out, nil
}

// flatten returns the samples of one metric of family name.
func flatten(name string, typ dto.MetricType, m *dto.Metric) []Sample {
	labels := func(extra ...string) map[string]string {
		l := make(map[string]string, len(m.GetLabel())+1)
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	switch typ {
	case dto.MetricType_COUNTER:
		return []Sample{{name, labels(), m.GetCounter().GetValue()}}
	case dto.MetricType_GAUGE:
		return []Sample{{name, labels(), m.GetGauge().GetValue()}}
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		var out []Sample
		for _, b := range h.GetBucket() { // the parser keeps the +Inf bucket as it was written
			out = append(out, Sample{name + "_bucket", labels("le", formatFloat(b.GetUpperBound())), float64(b.GetCumulativeCount())})
		}
		return append(out, Sample{name + "_sum", labels(), h.GetSampleSum()}, Sample{name + "_count", labels(), float64(h.GetSampleCount())})
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		var out []Sample
		for _, q := range s.GetQuantile() {
			out = append(out, Sample{name, labels("quantile", formatFloat(q.GetQuantile())), q.GetValue()})
		}
		return append(out, Sample{name + "_sum", labels(), s.GetSampleSum()}, Sample{name + "_count", labels(), float64(s.GetSampleCount())})
	default:
		return []Sample{{name, labels(), m.GetUntyped().GetValue()}}
	}
}

// formatFloat prints a bound as the text format does.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Scrape GETs url with c and parses the exposition.
func Scrape(c *http.Client, url string) ([]Sample, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}

// ByKey returns the samples keyed by Key.
func ByKey(samples []Sample) map[string]float64 {
	out := make(map[string]float64, len(samples))
	for _, s := range samples {
		out[s.Key()] = s.Value
	}
	return out
}

// ByLabel returns name's samples summed by the value of label.
func ByLabel(samples []Sample, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.Name == name {
			out[s.Labels[label]] += s.Value
		}
	}
	return out
}
