package metrictest

import (
	"maps"
	"strings"
	"testing"
)

func TestParseFlattensAsTheTextFormatPrints(t *testing.T) {
	const exposition = `# TYPE req_total counter
req_total{code="200",path="/a\"b"} 3
# TYPE up gauge
up 1
# TYPE lag_seconds histogram
lag_seconds_bucket{table="t",le="0.5"} 1
lag_seconds_bucket{table="t",le="+Inf"} 2
lag_seconds_sum{table="t"} 7.25
lag_seconds_count{table="t"} 2
# TYPE gc summary
gc{quantile="0.5"} 0.001
gc_sum 0.01
gc_count 4
plain 9
`
	samples, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`req_total{code="200",path="/a\"b"}`:      3,
		`up`:                                      1,
		`lag_seconds_bucket{table="t",le="0.5"}`:  1,
		`lag_seconds_bucket{table="t",le="+Inf"}`: 2,
		`lag_seconds_sum{table="t"}`:              7.25,
		`lag_seconds_count{table="t"}`:            2,
		`gc{quantile="0.5"}`:                      0.001,
		`gc_sum`:                                  0.01,
		`gc_count`:                                4,
		`plain`:                                   9,
	}
	if got := ByKey(samples); !maps.Equal(got, want) {
		t.Fatalf("ByKey:\n got %v\nwant %v", got, want)
	}
	if got := ByLabel(samples, "req_total", "path"); got[`/a"b`] != 3 || len(got) != 1 {
		t.Fatalf("ByLabel: %v", got)
	}
}

func TestParseRejectsAMalformedExposition(t *testing.T) {
	if _, err := Parse(strings.NewReader("req_total{code=\"200\" 3\n")); err == nil {
		t.Fatal("a malformed line parsed")
	}
}
