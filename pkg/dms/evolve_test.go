package dms

import (
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
)

func TestPlanSchema(t *testing.T) {
	t.Parallel()
	i32, i64, str, f32, f64 := iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.String,
		iceberg.PrimitiveTypes.Float32, iceberg.PrimitiveTypes.Float64
	dec := iceberg.DecimalTypeOf
	cur := []ColumnState{
		{Name: "id", Type: i32, Required: true, Key: true},
		{Name: "name", Type: str},
		{Name: "qty", Type: i32},
		{Name: "price", Type: dec(10, 2)},
		{Name: "old", Type: str, Dropped: true},
		{Name: "must", Type: f32, Required: true},
	}
	cases := []struct {
		name   string
		want   []DesiredColumn
		rename bool
		expect []string
	}{
		{"unchanged", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}, {"qty", i32, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, false, nil},
		{"add and widen", []DesiredColumn{{"id", i64, ""}, {"name", str, ""}, {"qty", i64, ""}, {"price", dec(12, 2), ""}, {"must", f64, ""}, {"tier", str, ""}}, false, []string{
			"add optional column tier string", "widen column id from int to long", "widen column qty from int to long",
			"widen column price from decimal(10, 2) to decimal(12, 2)", "widen column must from float to double"}},
		{"rename by position", []DesiredColumn{{"id", i32, ""}, {"full_name", str, ""}, {"qty", i32, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, true, []string{
			"rename column name to full_name"}},
		{"rename with widening", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}, {"amount", i64, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, true, []string{
			"rename column qty to amount", "widen column amount from int to long"}},
		{"rename not by rename-column", []DesiredColumn{{"id", i32, ""}, {"full_name", str, ""}, {"qty", i32, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, false, []string{
			"add optional column full_name string", "column name dropped at the source: kept with its data, no longer expected"}},
		{"rename with an incompatible type is add plus drop", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}, {"qty2", iceberg.PrimitiveTypes.Date, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, true, []string{
			"add optional column qty2 date", "column qty dropped at the source: kept with its data, no longer expected"}},
		{"drop and make optional", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}}, false, []string{
			"column qty dropped at the source: kept with its data, no longer expected",
			"column price dropped at the source: kept with its data, no longer expected",
			"column must dropped at the source: kept with its data, no longer expected", "column must no longer required"}},
		{"revive", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}, {"qty", i32, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}, {"old", str, ""}}, false, []string{
			"column old is back in the table-def"}},
		{"narrow and over string are kept", []DesiredColumn{{"id", i32, ""}, {"name", i64, ""}, {"qty", i32, ""}, {"price", dec(8, 2), ""}, {"must", f32, ""}}, false, []string{
			"column name stays string (the source now says long; every such value fits)",
			"column price stays decimal(10, 2) (the source now says decimal(8, 2); every such value fits)"}},
		{"incompatible", []DesiredColumn{{"id", i32, ""}, {"name", str, ""}, {"qty", str, ""}, {"price", dec(10, 4), ""}, {"must", f32, ""}}, false, []string{
			"incompatible change of column qty from int to string: kept as int; values that do not convert are dead-lettered",
			"incompatible change of column price from decimal(10, 2) to decimal(10, 4): kept as decimal(10, 2); values that do not convert are dead-lettered"}},
		{"key dropped", []DesiredColumn{{"name", str, ""}, {"qty", i32, ""}, {"price", dec(10, 2), ""}, {"must", f32, ""}}, false, []string{
			"primary-key column id is missing from the table-def: kept"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanSchema(cur, tc.want, tc.rename)
			got := p.Describe()
			if !slices.Equal(got, tc.expect) {
				t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.expect, "\n"))
			}
			after := ApplyPlan(cur, p)
			// Reconciling again with the same table-def is a no-op (idempotent replays).
			if again := PlanSchema(after, tc.want, tc.rename); !again.Empty() {
				t.Fatalf("second plan not empty: %v", again.Describe())
			}
		})
	}
}

func TestScannerSplitsBothFormats(t *testing.T) {
	t.Parallel()
	in := "\n{\"a\":1}\n{\n\t\"b\":\t{\n\t\t\"c\":\t\"}{\"\n\t}\n}\n  \n{\"d\":[1,{\"e\":2}]}{\"f\":3}\ngarbage\n{\"open\":\n{\"x\":1}\n{\"last\":true}"
	sc := NewScanner(strings.NewReader(in))
	var got []string
	var lines []int
	for sc.Scan() {
		got = append(got, strings.TrimSpace(string(sc.Message())))
		lines = append(lines, sc.Line())
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	want := []string{`{"a":1}`, "{\n\t\"b\":\t{\n\t\t\"c\":\t\"}{\"\n\t}\n}", `{"d":[1,{"e":2}]}{"f":3}`, "garbage", `{"open":`, `{"x":1}`, `{"last":true}`}
	if !slices.Equal(got, want) {
		t.Fatalf("messages %q\nwant %q", got, want)
	}
	if !slices.Equal(lines, []int{2, 3, 9, 10, 11, 12, 13}) {
		t.Fatalf("lines %v", lines)
	}
}
