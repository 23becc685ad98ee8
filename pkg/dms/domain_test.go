package dms

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// TestColumnDomain: unsigned DMS types get the range of their width; the ambiguous UINT8 of an
// unknown vocabulary gets the wider (64-bit) range, matching its decimal(20,0) type.
func TestColumnDomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ  string
		v    Vocabulary
		want Domain
	}{
		{"UINT1", VocabularyInternal, DomainUint8},
		{"UINT2", VocabularyInternal, DomainUint16},
		{"UINT4", VocabularyInternal, DomainUint32},
		{"UINT8", VocabularyInternal, DomainUint64},
		{"UINT8", VocabularyUnknown, DomainUint64},
		{"uint8", VocabularyParquet, DomainUint8},
		{"UINT16", VocabularyParquet, DomainUint16},
		{"UINT32", VocabularyParquet, DomainUint32},
		{"UINT64", VocabularyParquet, DomainUint64},
		{"UINT64(20)", VocabularyParquet, DomainUint64},
		{"INT8", VocabularyInternal, DomainAny},
		{"NUMERIC(20,0)", VocabularyInternal, DomainAny},
		{"STRING", VocabularyUnknown, DomainAny},
	} {
		if got := ColumnDomain(change.ColumnDef{Name: "c", Type: tc.typ}, tc.v); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.typ, tc.v, got, tc.want)
		}
	}
}

// TestConvertInDomain: item 9. A UINT8 (unsigned 64-bit) column is decimal(20,0), which also
// holds negatives and values up to 10^20-1; Convert alone stored -1 and 2^64 exactly though no
// source value can be either (DMS rendering an unsigned value as signed would wrap to
// negatives). ConvertIn dead-letters them; the other unsigned widths likewise.
func TestConvertInDomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		t    iceberg.Type
		dom  Domain
		v    change.Value
		want string // rendered; empty: want an error
	}{
		{tDec200, DomainUint64, num("0"), "0"},
		{tDec200, DomainUint64, num("18446744073709551615"), "18446744073709551615"},
		{tDec200, DomainUint64, str("18446744073709551615"), "18446744073709551615"},
		{tDec200, DomainUint64, num("-0"), "0"},
		{tDec200, DomainUint64, num("-1"), ""},
		{tDec200, DomainUint64, num("-18446744073709551616"), ""},
		{tDec200, DomainUint64, num("18446744073709551616"), ""},
		{tDec200, DomainUint64, num("99999999999999999999"), ""},
		{tDec200, DomainAny, num("-1"), "-1"},
		{tLong, DomainUint32, num("4294967295"), "4294967295"},
		{tLong, DomainUint32, num("4294967296"), ""},
		{tLong, DomainUint32, num("-1"), ""},
		{tInt, DomainUint16, num("65535"), "65535"},
		{tInt, DomainUint16, num("65536"), ""},
		{tInt, DomainUint8, num("255"), "255"},
		{tInt, DomainUint8, num("256"), ""},
		{tInt, DomainUint8, num("-1"), ""},
		{tStr, DomainUint64, num("-1"), "-1"}, // hashed or masked columns are strings: no range
		{tDec200, DomainUint64, change.Value{Kind: change.KindNull}, "null"},
	} {
		d, err := ConvertIn(tc.t, tc.dom, tc.v)
		switch {
		case tc.want == "":
			if err == nil || !strings.Contains(err.Error(), "outside the range of the source type "+tc.dom.String()) {
				t.Errorf("%v %v %q: err %v, want out of range", tc.t, tc.dom, tc.v.Text, err)
			}
		case err != nil:
			t.Errorf("%v %v %q: %v", tc.t, tc.dom, tc.v.Text, err)
		case d.Null:
			if tc.want != "null" {
				t.Errorf("%v %v %q: null", tc.t, tc.dom, tc.v.Text)
			}
		default:
			if got := Render(tc.t, d); got != tc.want {
				t.Errorf("%v %v %q: %s, want %s", tc.t, tc.dom, tc.v.Text, got, tc.want)
			}
		}
	}
	if got := (DomainUint64).String(); got != "UINT8 (0 to 18446744073709551615)" {
		t.Errorf("String() = %q", got)
	}
}
