package dms

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// TestTimestampDigits: the fractional digits a timestamp table-def column declares come from
// its scale, else a (n) suffix, else a precision of at most 9; other types declare none.
func TestTimestampDigits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    change.ColumnDef
		want int
	}{
		{change.ColumnDef{Type: "DATETIME", Scale: 7}, 7},
		{change.ColumnDef{Type: "TIMESTAMP(9)"}, 9},
		{change.ColumnDef{Type: "timestamp", Precision: 27, Scale: 7}, 7},
		{change.ColumnDef{Type: "DATETIME", Precision: 6}, 6},
		{change.ColumnDef{Type: "DATETIME", Precision: 27}, 0}, // a width, not digits
		{change.ColumnDef{Type: "DATETIME"}, 0},
		{change.ColumnDef{Type: "NUMERIC", Scale: 7}, 0},
		{change.ColumnDef{Type: "TIME", Scale: 7}, 0},
	} {
		if got := TimestampDigits(tc.c); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.c, got, tc.want)
		}
	}
}

// TestKeyType: a timestamp key column declaring more than 6 fractional digits is a string
// holding the canonical text, marked by its doc; everything else keeps its type.
func TestKeyType(t *testing.T) {
	t.Parallel()
	ts, tz, str := iceberg.PrimitiveTypes.Timestamp, iceberg.PrimitiveTypes.TimestampTz, iceberg.PrimitiveTypes.String
	for _, tc := range []struct {
		c    change.ColumnDef
		t    iceberg.Type
		want iceberg.Type
		dom  Domain
	}{
		{change.ColumnDef{Type: "DATETIME", Scale: 7}, ts, str, DomainTimestampText7},
		{change.ColumnDef{Type: "TIMESTAMP(9)"}, tz, str, DomainTimestampTzText9},
		{change.ColumnDef{Type: "DATETIME", Scale: 8}, ts, str, DomainTimestampText8},
		{change.ColumnDef{Type: "DATETIME", Scale: 6}, ts, ts, DomainMicros},
		{change.ColumnDef{Type: "DATETIME"}, ts, ts, DomainMicros},
		{change.ColumnDef{Type: "DATETIME", Scale: 7}, str, str, DomainAny}, // hashed: already a string
		{change.ColumnDef{Type: "INT4"}, iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int32, DomainAny},
	} {
		got, doc := KeyType(tc.c, tc.t)
		if !got.Equals(tc.want) {
			t.Errorf("%+v %v: type %v, want %v", tc.c, tc.t, got, tc.want)
		}
		if dom := KeyDomain(got, doc); dom != tc.dom {
			t.Errorf("%+v %v: domain %v (doc %q), want %v", tc.c, tc.t, dom, doc, tc.dom)
		}
	}
	if d := KeyDomain(str, ""); d != DomainAny {
		t.Errorf("plain string key: %v", d)
	}
}

// TestConvertTimestampText: a text-stored timestamp key is canonical — the wall clock (UTC
// with Z for timestamptz) with exactly the declared fractional digits — so that every
// spelling of one source value is one key, and values differing in any declared digit differ.
func TestConvertTimestampText(t *testing.T) {
	t.Parallel()
	str := iceberg.PrimitiveTypes.String
	for _, tc := range []struct {
		dom       Domain
		in, want  string
		wantError string
	}{
		{DomainTimestampText7, "2024-01-02T03:04:05.1234567Z", "2024-01-02T03:04:05.1234567", ""},
		{DomainTimestampText7, "2024-01-02T03:04:05.1234568Z", "2024-01-02T03:04:05.1234568", ""},
		{DomainTimestampText7, "2024-01-02 03:04:05.12345Z", "2024-01-02T03:04:05.1234500", ""},
		{DomainTimestampText7, "2024-01-02T03:04:05Z", "2024-01-02T03:04:05.0000000", ""},
		{DomainTimestampText7, "2024-01-02", "2024-01-02T00:00:00.0000000", ""},
		{DomainTimestampText7, "2024-01-02T03:04:05.123456700+02:00", "2024-01-02T03:04:05.1234567", ""}, // timestamp: wall clock
		{DomainTimestampText7, "2024-01-02T03:04:05.12345678Z", "", "more fractional digits than the column's 7"},
		{DomainTimestampText9, "2024-01-02T03:04:05.123456789Z", "2024-01-02T03:04:05.123456789", ""},
		{DomainTimestampText8, "0001-02-03T00:00:00.1Z", "0001-02-03T00:00:00.10000000", ""},
		{DomainTimestampTzText7, "2024-01-02T01:04:05.1234567+02:00", "2024-01-01T23:04:05.1234567Z", ""},
		{DomainTimestampTzText9, "2024-01-02T03:04:05.000000001Z", "2024-01-02T03:04:05.000000001Z", ""},
		{DomainTimestampTzText7, "0000-01-01T00:30:00+01:00", "", "outside years 0000-9999 in UTC"},
		{DomainTimestampText7, "2024-02-30T00:00:00Z", "", "no such date"},
		{DomainTimestampText7, "not a time", "", "want YYYY-MM-DD"},
	} {
		d, err := ConvertIn(str, tc.dom, change.Value{Kind: change.KindString, Text: tc.in})
		switch {
		case tc.wantError != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("%v %q: %v, %v; want error %q", tc.dom, tc.in, d, err, tc.wantError)
			}
		case err != nil:
			t.Errorf("%v %q: %v", tc.dom, tc.in, err)
		case d.S != tc.want:
			t.Errorf("%v %q: %q, want %q", tc.dom, tc.in, d.S, tc.want)
		}
	}
	if d, err := ConvertIn(str, DomainTimestampText7, change.Value{Kind: change.KindNull}); err != nil || !d.Null {
		t.Errorf("null: %v, %v", d, err)
	}
	if _, err := ConvertIn(str, DomainTimestampText7, change.Value{Kind: change.KindNumber, Text: "1"}); err == nil {
		t.Error("a number converted to a timestamp key")
	}
	// The canonical text sorts as the timestamps do.
	a, _ := ConvertIn(str, DomainTimestampText7, change.Value{Kind: change.KindString, Text: "2024-01-02T03:04:05.9Z"})
	b, _ := ConvertIn(str, DomainTimestampText7, change.Value{Kind: change.KindString, Text: "2024-01-02T03:04:05.1000001Z"})
	if b.S >= a.S {
		t.Errorf("order: %q should sort before %q", b.S, a.S)
	}
}

// TestConvertMicrosKey: a timestamp key column of unknown precision rejects a value with a
// nonzero digit below the microsecond instead of truncating it (two such keys would merge);
// zeros there are exact and accepted.
func TestConvertMicrosKey(t *testing.T) {
	t.Parallel()
	for _, typ := range []iceberg.Type{iceberg.PrimitiveTypes.Timestamp, iceberg.PrimitiveTypes.TimestampTz} {
		for _, tc := range []struct {
			in string
			ok bool
		}{
			{"2024-01-02T03:04:05.123456Z", true},
			{"2024-01-02T03:04:05.1234560Z", true},
			{"2024-01-02T03:04:05.123456000Z", true},
			{"2024-01-02T03:04:05Z", true},
			{"2024-01-02T03:04:05.1234567Z", false},
			{"2024-01-02T03:04:05.000000001+01:00", false},
		} {
			v := change.Value{Kind: change.KindString, Text: tc.in}
			_, err := ConvertIn(typ, DomainMicros, v)
			if (err == nil) != tc.ok {
				t.Errorf("%v %q: err %v, want ok=%v", typ, tc.in, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "below a microsecond") {
				t.Errorf("%v %q: reason %v", typ, tc.in, err)
			}
			// Outside a key (DomainAny) the digits are truncated, as documented.
			if _, err := ConvertIn(typ, DomainAny, v); err != nil {
				t.Errorf("%v %q non-key: %v", typ, tc.in, err)
			}
		}
	}
}

// TestNormalizeTimestampKey: the decode command shows a timestamp key whose table-def declares
// scale 7 as the sink stores it, a string with the canonical text, and a non-key timestamp of
// the same table as a truncated timestamp.
func TestNormalizeTimestampKey(t *testing.T) {
	t.Parallel()
	n := NewNormalizer(DefaultConfig(), TypeOptions{})
	meta := `"schema-name":"s","table-name":"t","timestamp":"2025-01-01T00:00:00.000000Z"`
	n.Normalize([]byte(`{"control":{"table-def":{"columns":{"at":{"type":"DATETIME","scale":7,"nullable":false},` +
		`"seen":{"type":"DATETIME","scale":7,"nullable":true}},"primary-key":["at"]}},` +
		`"metadata":{"record-type":"control","operation":"create-table",` + meta + `}}`))
	r := n.Normalize([]byte(`{"data":{"at":"2024-01-02T03:04:05.1234567Z","seen":"2024-01-02T03:04:05.1234567Z"},` +
		`"metadata":{"record-type":"data","operation":"insert",` + meta + `}}`))
	got := map[string]string{}
	for _, f := range r.Columns {
		v := "<nil>"
		if f.Value != nil {
			v = *f.Value
		}
		got[f.Name] = f.Type + " " + v + " " + f.Error
	}
	if got["at"] != "string 2024-01-02T03:04:05.1234567 " || got["seen"] != "timestamp 2024-01-02T03:04:05.123456 " {
		t.Fatalf("columns: %q (record %+v)", got, r)
	}
}
