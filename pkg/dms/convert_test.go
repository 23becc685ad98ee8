package dms

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

var (
	tInt     = iceberg.PrimitiveTypes.Int32
	tLong    = iceberg.PrimitiveTypes.Int64
	tFloat   = iceberg.PrimitiveTypes.Float32
	tDouble  = iceberg.PrimitiveTypes.Float64
	tBool    = iceberg.PrimitiveTypes.Bool
	tDate    = iceberg.PrimitiveTypes.Date
	tTime    = iceberg.PrimitiveTypes.Time
	tTS      = iceberg.PrimitiveTypes.Timestamp
	tTSTZ    = iceberg.PrimitiveTypes.TimestampTz
	tStr     = iceberg.PrimitiveTypes.String
	tBin     = iceberg.PrimitiveTypes.Binary
	tUUID    = iceberg.PrimitiveTypes.UUID
	tDec102  = iceberg.DecimalTypeOf(10, 2)
	tDec380  = iceberg.DecimalTypeOf(38, 0)
	tDec200  = iceberg.DecimalTypeOf(20, 0)
	tDec3810 = iceberg.DecimalTypeOf(38, 10)
	tFixed4  = iceberg.FixedTypeOf(4)
)

func num(s string) change.Value   { return change.Value{Kind: change.KindNumber, Text: s} }
func str(s string) change.Value   { return change.Value{Kind: change.KindString, Text: s} }
func boolv(s string) change.Value { return change.Value{Kind: change.KindBool, Text: s} }
func jsonv(s string) change.Value { return change.Value{Kind: change.KindJSON, Text: s} }

var nullv = change.Value{Kind: change.KindNull}

type convertCase struct {
	t    iceberg.Type
	v    change.Value
	want string // Render of the result; "" with err set for a rejection
	err  string // substring of the rejection reason
}

var convertCases = []convertCase{
	// int
	{t: tInt, v: num("42"), want: "42"},
	{t: tInt, v: num("-2147483648"), want: "-2147483648"},
	{t: tInt, v: num("2147483647"), want: "2147483647"},
	{t: tInt, v: num("2147483648"), err: "out of range"},
	{t: tInt, v: num("-2147483649"), err: "out of range"},
	{t: tInt, v: num("12.0"), want: "12"},
	{t: tInt, v: num("12.000"), want: "12"},
	{t: tInt, v: num("12.5"), err: "fractional"},
	{t: tInt, v: num("12.01"), err: "fractional"},
	{t: tInt, v: num("1e3"), err: "scientific notation"},
	{t: tInt, v: str("42"), want: "42"},
	{t: tInt, v: str("+42"), want: "42"},
	{t: tInt, v: str(" 42"), err: "not an integer"},
	{t: tInt, v: str("42 "), err: "not an integer"},
	{t: tInt, v: str(""), err: "not an integer"},
	{t: tInt, v: str("0x10"), err: "not an integer"},
	{t: tInt, v: str("12."), err: "not an integer"},
	{t: tInt, v: boolv("true"), err: "not a number"},
	{t: tInt, v: jsonv("[1]"), err: "not a number"},
	// long
	{t: tLong, v: num("9223372036854775807"), want: "9223372036854775807"},
	{t: tLong, v: num("-9223372036854775808"), want: "-9223372036854775808"},
	{t: tLong, v: num("9223372036854775808"), err: "out of range"},
	{t: tLong, v: num("-9223372036854775809"), err: "out of range"},
	{t: tLong, v: num("99999999999999999999999999"), err: "out of range"},
	{t: tLong, v: num("9007199254740993"), want: "9007199254740993"},
	{t: tLong, v: num("1.2345678901234568E+18"), err: "UseLargeIntegerValue"},
	{t: tLong, v: num("-0"), want: "0"},
	{t: tLong, v: str("007"), want: "7"},
	{t: tLong, v: num("NaN"), err: "not an integer"},
	// decimal
	{t: tDec102, v: num("1234.5"), want: "1234.50"},
	{t: tDec102, v: num("1234.50"), want: "1234.50"},
	{t: tDec102, v: num("-1234.50"), want: "-1234.50"},
	{t: tDec102, v: num("0.05"), want: "0.05"},
	{t: tDec102, v: num("-0.05"), want: "-0.05"},
	{t: tDec102, v: num("-0.00"), want: "0.00"},
	{t: tDec102, v: num("7"), want: "7.00"},
	{t: tDec102, v: num("12.3400"), want: "12.34"},
	{t: tDec102, v: num("12.345"), err: "more fractional digits than scale 2"},
	{t: tDec102, v: num("1.5E+2"), want: "150.00"},
	{t: tDec102, v: num("2.5E-1"), want: "0.25"},
	{t: tDec102, v: num("1.25e-1"), err: "more fractional digits"},
	{t: tDec102, v: num("99999999.99"), want: "99999999.99"},
	{t: tDec102, v: num("-99999999.99"), want: "-99999999.99"},
	{t: tDec102, v: num("100000000.00"), err: "exceeds precision 10"},
	{t: tDec102, v: num("0E+1000"), want: "0.00"},
	{t: tDec102, v: num("1E+1000"), err: "exceeds precision"},
	{t: tDec102, v: num("1E-1000"), err: "more fractional digits"},
	{t: tDec102, v: num("1E+99999999999999999999"), err: "exceeds precision"},
	{t: tDec102, v: str("1234.5"), want: "1234.50"},
	{t: tDec102, v: str(".5"), want: "0.50"},
	{t: tDec102, v: str("5."), want: "5.00"},
	{t: tDec102, v: str("+5"), want: "5.00"},
	{t: tDec102, v: str("abc"), err: "not a number"},
	{t: tDec102, v: str("1e"), err: "not a number"},
	{t: tDec102, v: str("."), err: "not a number"},
	{t: tDec102, v: num("NaN"), err: "not a number"},
	{t: tDec102, v: boolv("true"), err: "not a number"},
	{t: tDec380, v: num("99999999999999999999999999999999999999"), want: "99999999999999999999999999999999999999"},
	{t: tDec380, v: num("-99999999999999999999999999999999999999"), want: "-99999999999999999999999999999999999999"},
	{t: tDec380, v: num("999999999999999999999999999999999999999"), err: "exceeds precision 38"},
	{t: tDec380, v: num("00000000000000000000000000000000000000000001"), want: "1"},
	{t: tDec200, v: num("18446744073709551615"), want: "18446744073709551615"},
	{t: tDec200, v: num("-18446744073709551616"), want: "-18446744073709551616"},
	{t: tDec3810, v: num("-1234567890123456789012345678.1234567890"), want: "-1234567890123456789012345678.1234567890"},
	{t: tDec3810, v: num("0.0000000001"), want: "0.0000000001"},
	// float / double
	{t: tFloat, v: num("3.14"), want: "3.14"},
	{t: tFloat, v: num("1e39"), err: "out of range"},
	{t: tFloat, v: num("16777217"), want: "1.6777216e+07"},
	{t: tFloat, v: num("NaN"), want: "NaN"},
	{t: tFloat, v: str("-inf"), want: "-Inf"},
	// Item 9: one rule for NaN and infinities in float and double columns: the words nan, inf
	// and infinity in any case, with an optional sign (ignored for nan), quoted or (from other
	// producers) as a number-kind text, are NaN, +Inf and -Inf. Other text must be a decimal
	// number: Go-only syntax (hex floats, underscores, spaces) is rejected.
	{t: tFloat, v: str("Infinity"), want: "+Inf"},
	{t: tFloat, v: str("-Infinity"), want: "-Inf"},
	{t: tFloat, v: str("nan"), want: "NaN"},
	{t: tDouble, v: str("NaN"), want: "NaN"},
	{t: tDouble, v: str("-nan"), want: "NaN"},
	{t: tDouble, v: str("+INF"), want: "+Inf"},
	{t: tDouble, v: str("infinity"), want: "+Inf"},
	{t: tDouble, v: str("-Infinity"), want: "-Inf"},
	{t: tDouble, v: num("Infinity"), want: "+Inf"},
	{t: tDouble, v: str("Infinityy"), err: "not a number"},
	{t: tDouble, v: str("nanx"), err: "not a number"},
	{t: tDouble, v: str("0x1p-2"), err: "not a number"},
	{t: tDouble, v: str("1_000"), err: "not a number"},
	{t: tDouble, v: str(" 1"), err: "not a number"},
	{t: tDouble, v: str("+1.5"), want: "1.5"},
	{t: tDouble, v: str(".5"), want: "0.5"},
	{t: tLong, v: str("Infinity"), err: "not an integer"},
	{t: tDec102, v: str("Infinity"), err: "not a number"},
	{t: tStr, v: str("Infinity"), want: "Infinity"},
	// Item 9: a nonzero value that rounds to zero (underflow) is dead-lettered, as overflow to
	// infinity is; gradual underflow to a subnormal keeps the nearest representable value.
	// Decimals are exact: a digit beyond the scale is rejected however small.
	{t: tDouble, v: num("1e-400"), err: "underflow"},
	{t: tDouble, v: num("-1e-400"), err: "underflow"},
	{t: tDouble, v: num("2e-324"), err: "underflow"},
	{t: tDouble, v: num("0.000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001"), want: "1e-309"},
	{t: tDouble, v: num("3e-324"), want: "5e-324"},
	{t: tDouble, v: num("4.9e-324"), want: "5e-324"},
	{t: tDouble, v: num("0e-400"), want: "0"},
	{t: tDouble, v: num("-0.0e-400"), want: "-0"},
	{t: tFloat, v: num("1e-46"), err: "underflow"},
	{t: tFloat, v: str("1e-400"), err: "underflow"},
	{t: tFloat, v: num("1e-45"), want: "1e-45"},
	{t: tDec102, v: num("1e-400"), err: "more fractional digits than scale 2"},
	{t: tDec3810, v: num("-1e-400"), err: "more fractional digits than scale 10"},
	{t: tDec102, v: num("0e-400"), want: "0.00"},
	{t: tDouble, v: num("2.718281828459045"), want: "2.718281828459045"},
	{t: tDouble, v: num("1e308"), want: "1e+308"},
	{t: tDouble, v: num("1e309"), err: "out of range"},
	{t: tDouble, v: num("-0"), want: "-0"},
	{t: tDouble, v: num("1.2345678901234568E+18"), want: "1.2345678901234568e+18"},
	{t: tDouble, v: str("x"), err: "not a number"},
	{t: tDouble, v: jsonv("{}"), err: "not a number"},
	// boolean in every rendering
	{t: tBool, v: boolv("true"), want: "true"},
	{t: tBool, v: boolv("false"), want: "false"},
	{t: tBool, v: num("1"), want: "true"},
	{t: tBool, v: num("0"), want: "false"},
	{t: tBool, v: num("2"), err: "not a boolean"},
	{t: tBool, v: str("t"), want: "true"},
	{t: tBool, v: str("f"), want: "false"},
	{t: tBool, v: str("T"), want: "true"},
	{t: tBool, v: str("F"), want: "false"},
	{t: tBool, v: str("true"), want: "true"},
	{t: tBool, v: str("TRUE"), want: "true"},
	{t: tBool, v: str("False"), want: "false"},
	{t: tBool, v: str("1"), want: "true"},
	{t: tBool, v: str("0"), want: "false"},
	{t: tBool, v: str("y"), want: "true"},
	{t: tBool, v: str("N"), want: "false"},
	{t: tBool, v: str("yes"), want: "true"},
	{t: tBool, v: str("No"), want: "false"},
	{t: tBool, v: str("tru"), err: "not a boolean"},
	{t: tBool, v: str(""), err: "not a boolean"},
	{t: tBool, v: jsonv("true"), err: "not a boolean"},
	// date
	{t: tDate, v: str("2024-02-29"), want: "2024-02-29"},
	{t: tDate, v: str("1970-01-01"), want: "1970-01-01"},
	{t: tDate, v: str("1969-12-31"), want: "1969-12-31"},
	{t: tDate, v: str("0001-01-01"), want: "0001-01-01"},
	{t: tDate, v: str("9999-12-31"), want: "9999-12-31"},
	{t: tDate, v: str("2000-02-29"), want: "2000-02-29"},
	{t: tDate, v: str("1900-02-29"), err: "no such date"},
	{t: tDate, v: str("2023-02-29"), err: "no such date"},
	{t: tDate, v: str("2023-04-31"), err: "no such date"},
	{t: tDate, v: str("0000-00-00"), err: "no such date"},
	{t: tDate, v: str("2024-2-29"), err: "want YYYY-MM-DD"},
	{t: tDate, v: str("2024-02-29T13:45:12.123456Z"), want: "2024-02-29"},
	{t: tDate, v: str("2024-02-29 23:59:59-05:00"), want: "2024-02-29"},
	{t: tDate, v: str("2024-02-29Tgarbage"), err: "HH:MM:SS"},
	{t: tDate, v: num("20240229"), err: "not a date string"},
	// time
	{t: tTime, v: str("13:45:12"), want: "13:45:12.000000"},
	{t: tTime, v: str("00:00:00"), want: "00:00:00.000000"},
	{t: tTime, v: str("23:59:59.999999"), want: "23:59:59.999999"},
	{t: tTime, v: str("13:45:12.1"), want: "13:45:12.100000"},
	{t: tTime, v: str("13:45:12.123"), want: "13:45:12.123000"},
	{t: tTime, v: str("13:45:12.123456789"), want: "13:45:12.123456"},
	{t: tTime, v: str("13:45:12.1234567890"), err: "1 to 9 digits"},
	{t: tTime, v: str("13:45:12."), err: "1 to 9 digits"},
	{t: tTime, v: str("24:00:00"), err: "out of range"},
	{t: tTime, v: str("13:60:00"), err: "out of range"},
	{t: tTime, v: str("13:45"), err: "HH:MM:SS"},
	{t: tTime, v: str("838:59:59"), err: "HH:MM:SS"},
	{t: tTime, v: str("-01:00:00"), err: "HH:MM:SS"},
	{t: tTime, v: str("13:45:12Z"), err: "HH:MM:SS"},
	// timestamp (zone-less: wall clock digits)
	{t: tTS, v: str("2024-02-29T13:45:12Z"), want: "2024-02-29T13:45:12.000000"},
	{t: tTS, v: str("2024-02-29T13:45:12.123Z"), want: "2024-02-29T13:45:12.123000"},
	{t: tTS, v: str("2024-02-29T13:45:12.123456Z"), want: "2024-02-29T13:45:12.123456"},
	{t: tTS, v: str("2024-02-29T13:45:12.123456789Z"), want: "2024-02-29T13:45:12.123456"},
	{t: tTS, v: str("2024-02-29 13:45:12.5"), want: "2024-02-29T13:45:12.500000"},
	{t: tTS, v: str("2024-02-29T13:45:12"), want: "2024-02-29T13:45:12.000000"},
	{t: tTS, v: str("2024-02-29T13:45:12+02:00"), want: "2024-02-29T13:45:12.000000"},
	{t: tTS, v: str("2024-02-29"), want: "2024-02-29T00:00:00.000000"},
	{t: tTS, v: str("1969-12-31T23:59:59.999999Z"), want: "1969-12-31T23:59:59.999999"},
	{t: tTS, v: str("0001-01-01T00:00:00Z"), want: "0001-01-01T00:00:00.000000"},
	{t: tTS, v: str("9999-12-31T23:59:59.999999Z"), want: "9999-12-31T23:59:59.999999"},
	{t: tTS, v: str("2024-02-29t13:45:12z"), want: "2024-02-29T13:45:12.000000"},
	{t: tTS, v: str("2024-02-29T13:45:12ZZ"), err: "after the time"},
	{t: tTS, v: str("2024-02-29T13:45:12."), err: "1 to 9 digits"},
	{t: tTS, v: str("2024-02-29X13:45:12"), err: "want YYYY-MM-DDTHH"},
	{t: tTS, v: str("2024-02-29T13:45"), err: "HH:MM:SS"},
	{t: tTS, v: str("2024-02-30T13:45:12"), err: "no such date"},
	{t: tTS, v: str("2024-02-29T13:45:12+25:00"), err: "bad zone offset"},
	{t: tTS, v: str("2024-02-29T13:45:12+02:0"), err: "bad zone offset"},
	{t: tTS, v: str("2024-02-29T13:45:12+02-00"), err: "bad zone offset"},
	{t: tTS, v: num("1709214312"), err: "not a timestamp string"},
	// timestamptz (offsets converted to UTC)
	{t: tTSTZ, v: str("2024-02-29T13:45:12Z"), want: "2024-02-29T13:45:12.000000Z"},
	{t: tTSTZ, v: str("2024-02-29T13:45:12.123456789Z"), want: "2024-02-29T13:45:12.123456Z"},
	{t: tTSTZ, v: str("2024-02-29T13:45:12"), want: "2024-02-29T13:45:12.000000Z"},
	{t: tTSTZ, v: str("2024-02-29T13:45:12+02:00"), want: "2024-02-29T11:45:12.000000Z"},
	{t: tTSTZ, v: str("2024-02-29T13:45:12-05:30"), want: "2024-02-29T19:15:12.000000Z"},
	{t: tTSTZ, v: str("2024-02-29T13:45:12+0530"), want: "2024-02-29T08:15:12.000000Z"},
	{t: tTSTZ, v: str("2024-02-29 13:45:12.5+05"), want: "2024-02-29T08:45:12.500000Z"},
	{t: tTSTZ, v: str("2024-03-01T00:30:00+01:00"), want: "2024-02-29T23:30:00.000000Z"},
	{t: tTSTZ, v: str("1970-01-01T00:00:00+00:01"), want: "1969-12-31T23:59:00.000000Z"},
	{t: tTSTZ, v: str("0000-01-01T00:00:00+00:01"), err: "outside years"},
	{t: tTSTZ, v: str("9999-12-31T23:59:59-00:01"), err: "outside years"},
	{t: tTSTZ, v: str("0000-01-01T00:00:00-00:01"), want: "0000-01-01T00:01:00.000000Z"},
	// binary
	{t: tBin, v: str("0x80057D942E"), want: "80057d942e"},
	{t: tBin, v: str("80057D942E"), want: "80057d942e"},
	{t: tBin, v: str("80057d942e"), want: "80057d942e"},
	{t: tBin, v: str("0X0a"), want: "0a"},
	{t: tBin, v: str(""), want: ""},
	{t: tBin, v: str("0x"), want: ""},
	{t: tBin, v: str("0x1"), err: "odd number"},
	{t: tBin, v: str("zz"), err: "not hex"},
	{t: tBin, v: num("12"), err: "not a hex string"},
	{t: tFixed4, v: str("0xDEADBEEF"), want: "deadbeef"},
	{t: tFixed4, v: str("DEAD"), err: "wrong length"},
	// uuid
	{t: tUUID, v: str("123e4567-e89b-12d3-a456-426614174000"), want: "123e4567-e89b-12d3-a456-426614174000"},
	{t: tUUID, v: str("123E4567-E89B-12D3-A456-426614174000"), want: "123e4567-e89b-12d3-a456-426614174000"},
	{t: tUUID, v: str("{123e4567-e89b-12d3-a456-426614174000}"), want: "123e4567-e89b-12d3-a456-426614174000"},
	{t: tUUID, v: str("123e4567e89b12d3a456426614174000"), want: "123e4567-e89b-12d3-a456-426614174000"},
	{t: tUUID, v: str("123e4567"), err: "not a uuid"},
	// string accepts every kind
	{t: tStr, v: str("Grüße"), want: "Grüße"},
	{t: tStr, v: str(""), want: ""},
	{t: tStr, v: num("1.2345678901234568E+18"), want: "1.2345678901234568E+18"},
	{t: tStr, v: num("1234.50"), want: "1234.50"},
	{t: tStr, v: boolv("true"), want: "true"},
	{t: tStr, v: jsonv(`{"a":[1,2]}`), want: `{"a":[1,2]}`},
	// unsupported types
	{t: iceberg.PrimitiveTypes.TimestampNs, v: str("2024-02-29T13:45:12Z"), err: "unsupported"},
	{t: &iceberg.ListType{ElementID: 1, Element: tStr}, v: jsonv("[]"), err: "unsupported"},
}

func TestConvert(t *testing.T) {
	t.Parallel()
	for _, tc := range convertCases {
		d, err := Convert(tc.t, tc.v)
		name := tc.t.String() + " " + tc.v.Text
		if tc.err != "" {
			var ce *ConvertError
			if !errors.As(err, &ce) {
				t.Errorf("%s: got %v (%q), want ConvertError %q", name, err, Render(tc.t, d), tc.err)
				continue
			}
			if !strings.Contains(ce.Reason, tc.err) {
				t.Errorf("%s: reason %q, want %q", name, ce.Reason, tc.err)
			}
			if ce.Type != tc.t.String() || ce.Column != "" {
				t.Errorf("%s: error fields %+v", name, ce)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if d.Null {
			t.Errorf("%s: null", name)
		}
		if got := Render(tc.t, d); got != tc.want {
			t.Errorf("%s: rendered %q, want %q", name, got, tc.want)
		}
	}
}

func TestConvertNull(t *testing.T) {
	t.Parallel()
	for _, tc := range convertCases {
		d, err := Convert(tc.t, nullv)
		if err != nil || d != (Datum{Null: true}) {
			t.Errorf("%v: %+v %v", tc.t, d, err)
		}
	}
}

func TestConvertDatumLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		t    iceberg.Type
		v    change.Value
		want Datum
	}{
		{tDec102, num("-1.50"), Datum{I: -150, Hi: -1}},
		{tDec102, num("1.50"), Datum{I: 150}},
		{tDec200, num("18446744073709551615"), Datum{I: -1, Hi: 0}},
		{tDec380, num("18446744073709551616"), Datum{I: 0, Hi: 1}},
		{tDate, str("1970-01-02"), Datum{I: 1}},
		{tDate, str("1969-12-31"), Datum{I: -1}},
		{tTime, str("00:00:01.000001"), Datum{I: 1_000_001}},
		{tTS, str("1970-01-01T00:00:01Z"), Datum{I: 1_000_000}},
		{tTSTZ, str("1970-01-01T01:00:00+01:00"), Datum{I: 0}},
		{tBool, boolv("true"), Datum{I: 1}},
		{tFloat, num("1"), Datum{I: 0x3f800000}},
		{tDouble, num("1"), Datum{I: 0x3ff0000000000000}},
		{tBin, str("0x0102"), Datum{S: "\x01\x02"}},
		{tLong, num("-5"), Datum{I: -5}},
	} {
		got, err := Convert(tc.t, tc.v)
		if err != nil || got != tc.want {
			t.Errorf("%v %q: got %+v %v, want %+v", tc.t, tc.v.Text, got, err, tc.want)
		}
	}
}

func TestConvertErrorText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 40) // 80 bytes
	_, err := Convert(tLong, str(long))
	var ce *ConvertError
	if !errors.As(err, &ce) {
		t.Fatal(err)
	}
	if len(ce.Text) > 64 || !strings.HasPrefix(long, ce.Text) || len(ce.Text) < 62 {
		t.Errorf("text %q (%d bytes)", ce.Text, len(ce.Text))
	}
	ce.Column = "amount"
	if got := ce.Error(); !strings.Contains(got, `column "amount"`) || !strings.Contains(got, "to long") {
		t.Errorf("Error() = %s", got)
	}
}

// TestRenderReconvert: the text Render produces converts back to the same Datum.
func TestRenderReconvert(t *testing.T) {
	t.Parallel()
	for _, tc := range convertCases {
		if tc.err != "" {
			continue
		}
		d, err := Convert(tc.t, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tc.t.(iceberg.StringType); ok {
			continue
		}
		back, err := Convert(tc.t, str(Render(tc.t, d)))
		if err != nil || back != d {
			t.Errorf("%v %q: rendered %q reconverts to %+v %v, want %+v", tc.t, tc.v.Text, Render(tc.t, d), back, err, d)
		}
	}
}

// TestArrowRoundTrip: Convert → AppendDatum → array → RenderArrow equals Render, and DatumAt
// gives back the converted Datum, for every successful conversion case and a null, through the
// Arrow types ArrowSchema produces.
func TestArrowRoundTrip(t *testing.T) {
	t.Parallel()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	byType := map[string][]convertCase{}
	var types []iceberg.Type
	for _, tc := range convertCases {
		if tc.err != "" {
			continue
		}
		k := tc.t.String()
		if _, ok := byType[k]; !ok {
			types = append(types, tc.t)
		}
		byType[k] = append(byType[k], tc)
	}
	fields := make([]iceberg.NestedField, len(types))
	for i, typ := range types {
		fields[i] = iceberg.NestedField{ID: i + 1, Name: "c" + typ.String(), Type: typ, Required: false}
	}
	sc := iceberg.NewSchema(0, fields...)
	as, err := ArrowSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	for i, typ := range types {
		f := as.Field(i)
		if !f.Nullable || !f.HasMetadata() {
			t.Errorf("%v: field %v", typ, f)
		}
		b := array.NewBuilder(mem, f.Type)
		cases := byType[typ.String()]
		var want []string
		var datums []Datum
		for _, tc := range cases {
			d, err := Convert(typ, tc.v)
			if err != nil {
				t.Fatal(err)
			}
			AppendDatum(b, typ, d)
			want = append(want, Render(typ, d))
			datums = append(datums, d)
		}
		AppendDatum(b, typ, Datum{Null: true})
		arr := b.NewArray()
		b.Release()
		if !arrow.TypeEqual(arr.DataType(), f.Type) {
			t.Errorf("%v: built %v, schema says %v", typ, arr.DataType(), f.Type)
		}
		for j := range cases {
			got, ok := RenderArrow(arr, j, typ)
			if !ok || got != want[j] {
				t.Errorf("%v row %d: RenderArrow %q %v, want %q", typ, j, got, ok, want[j])
			}
			if d := DatumView(arr, j); d != datums[j] {
				t.Errorf("%v row %d: DatumView %+v, want %+v", typ, j, d, datums[j])
			}
			if d := DatumAt(arr, j); d != datums[j] {
				t.Errorf("%v row %d: DatumAt %+v, want %+v", typ, j, d, datums[j])
			}
		}
		if got, ok := RenderArrow(arr, len(cases), typ); ok || got != "" {
			t.Errorf("%v: null rendered as %q %v", typ, got, ok)
		}
		if d := DatumAt(arr, len(cases)); d != (Datum{Null: true}) {
			t.Errorf("%v: null read as %+v", typ, d)
		}
		arr.Release()
	}
}

func TestArrowSchemaRequired(t *testing.T) {
	t.Parallel()
	sc := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: tLong, Required: true},
		iceberg.NestedField{ID: 2, Name: "ts", Type: tTSTZ},
		iceberg.NestedField{ID: 3, Name: "t", Type: tTS},
	)
	as, err := ArrowSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	if as.Field(0).Nullable {
		t.Error("required field is nullable")
	}
	if id, ok := as.Field(0).Metadata.GetValue("PARQUET:field_id"); !ok || id != "1" {
		t.Errorf("field id metadata %v", as.Field(0).Metadata)
	}
	if tz := as.Field(1).Type.(*arrow.TimestampType); tz.TimeZone != "UTC" || tz.Unit != arrow.Microsecond {
		t.Errorf("timestamptz as %v", tz)
	}
	if tz := as.Field(2).Type.(*arrow.TimestampType); tz.TimeZone != "" || tz.Unit != arrow.Microsecond {
		t.Errorf("timestamp as %v", tz)
	}
}

// TestRenderArrowVariants covers Arrow types a scan may return instead of the written ones.
func TestRenderArrowVariants(t *testing.T) {
	t.Parallel()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	check := func(name string, arr arrow.Array, typ iceberg.Type, want string) {
		t.Helper()
		defer arr.Release()
		got, ok := RenderArrow(arr, 0, typ)
		if !ok || got != want {
			t.Errorf("%s: got %q %v want %q", name, got, ok, want)
		}
	}
	{
		b := array.NewLargeStringBuilder(mem)
		AppendDatum(b, tStr, Datum{S: "x"})
		check("large string", b.NewArray(), tStr, "x")
		b.Release()
	}
	{
		b := array.NewBinaryBuilder(mem, arrow.BinaryTypes.LargeBinary)
		AppendDatum(b, tBin, Datum{S: "\xab"})
		check("large binary", b.NewArray(), tBin, "ab")
		b.Release()
	}
	{
		b := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Nanosecond})
		b.Append(arrow.Timestamp(1_500_000_999))
		check("timestamp ns", b.NewArray(), tTS, "1970-01-01T00:00:01.500000")
		b.Release()
	}
	{
		b := array.NewTime64Builder(mem, &arrow.Time64Type{Unit: arrow.Nanosecond})
		b.Append(arrow.Time64(1_000_999))
		check("time ns", b.NewArray(), tTime, "00:00:00.001000")
		b.Release()
	}
	{
		b := array.NewInt32Builder(mem)
		b.Append(7)
		check("int read as long", b.NewArray(), tLong, "7")
		b.Release()
	}
	{
		b := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String})
		if err := b.(*array.BinaryDictionaryBuilder).AppendString("dict"); err != nil {
			t.Fatal(err)
		}
		check("dictionary", b.NewArray(), tStr, "dict")
		b.Release()
	}
	{
		b := array.NewDecimal128Builder(mem, &arrow.Decimal128Type{Precision: 10, Scale: 3})
		AppendDatum(b, tDec102, Datum{I: 1500})
		check("decimal stored with another scale", b.NewArray(), tDec102, "1.500")
		b.Release()
	}
}

func TestAppendKey(t *testing.T) {
	t.Parallel()
	type col struct {
		t iceberg.Type
		v change.Value
	}
	key := func(cols ...col) string {
		var buf []byte
		for _, c := range cols {
			d, err := Convert(c.t, c.v)
			if err != nil {
				t.Fatal(err)
			}
			buf = AppendKey(buf, c.t, d)
		}
		return string(buf)
	}
	// Values that must all be distinct.
	distinct := map[string]string{}
	add := func(name string, cols ...col) {
		k := key(cols...)
		if prev, ok := distinct[k]; ok {
			t.Errorf("key collision: %s and %s", prev, name)
		}
		distinct[k] = name
	}
	add("ab|c", col{tStr, str("ab")}, col{tStr, str("c")})
	add("a|bc", col{tStr, str("a")}, col{tStr, str("bc")})
	add("abc|", col{tStr, str("abc")}, col{tStr, str("")})
	add("abc|null", col{tStr, str("abc")}, col{tStr, nullv})
	add("null|abc", col{tStr, nullv}, col{tStr, str("abc")})
	add("long 1", col{tLong, num("1")})
	add("long -1", col{tLong, num("-1")})
	add("long 0", col{tLong, num("0")})
	add("long null", col{tLong, nullv})
	add("str 1", col{tStr, str("1")})
	add("bin 01", col{tBin, str("01")})
	add("date 1", col{tDate, str("1970-01-02")})
	add("ts 1", col{tTS, str("1970-01-01T00:00:00.000001")})
	add("tstz 1", col{tTSTZ, str("1970-01-01T00:00:00.000001")})
	add("time 1", col{tTime, str("00:00:00.000001")})
	add("dec 0.01", col{tDec102, num("0.01")})
	add("dec -0.01", col{tDec102, num("-0.01")})
	add("bool t", col{tBool, boolv("true")})
	add("bool f", col{tBool, boolv("false")})
	add("uuid", col{tUUID, str("123e4567-e89b-12d3-a456-426614174000")})
	add("double 1", col{tDouble, num("1")})
	add("long 1|long 2", col{tLong, num("1")}, col{tLong, num("2")})
	add("long 2|long 1", col{tLong, num("2")}, col{tLong, num("1")})

	// Promotions keep keys equal.
	if key(col{tInt, num("5")}) != key(col{tLong, num("5")}) {
		t.Error("int and long keys differ")
	}
	if key(col{tFloat, num("1.5")}) != key(col{tDouble, num("1.5")}) {
		t.Error("float and double keys differ")
	}
	if key(col{tDec102, num("1.5")}) != key(col{iceberg.DecimalTypeOf(12, 2), num("1.50")}) {
		t.Error("decimal precision widening changes key")
	}
	// Deterministic and append-only.
	prefix := []byte("p")
	d, _ := Convert(tStr, str("x"))
	if got := AppendKey(prefix, tStr, d); !bytes.HasPrefix(got, []byte("p")) || !bytes.Equal(got, AppendKey([]byte("p"), tStr, d)) {
		t.Error("AppendKey not deterministic")
	}
}
