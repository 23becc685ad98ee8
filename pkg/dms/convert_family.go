package dms

import (
	"math"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Convert's type families: numbers, temporal values, bytes.

// convertNumber is Convert for integers, decimals and floating-point numbers.
func convertNumber(t iceberg.Type, v change.Value) (Datum, error) {
	s := v.Text
	switch tt := t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		if v.Kind != change.KindNumber && v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a number")
		}
		n, reason := parseInteger(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		if _, ok := t.(iceberg.Int32Type); ok && (n < math.MinInt32 || n > math.MaxInt32) {
			return Datum{}, convErr(t, s, "out of range for a 32-bit int")
		}
		return Datum{I: n}, nil
	case iceberg.DecimalType:
		if v.Kind != change.KindNumber && v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a number")
		}
		hi, lo, reason := parseDecimal(s, tt.Precision(), tt.Scale())
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{I: int64(lo), Hi: hi}, nil
	case iceberg.Float32Type:
		if v.Kind != change.KindNumber && v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a number")
		}
		f, reason := parseFloat(s, 32)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{I: int64(math.Float32bits(float32(f)))}, nil
	case iceberg.Float64Type:
		if v.Kind != change.KindNumber && v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a number")
		}
		f, reason := parseFloat(s, 64)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{I: int64(math.Float64bits(f))}, nil
	}
	return Datum{}, convErr(t, s, "unsupported column type")
}

// convertTemporal is Convert for dates, times and timestamps.
func convertTemporal(t iceberg.Type, v change.Value) (Datum, error) {
	s := v.Text
	switch t.(type) {
	case iceberg.DateType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a date string")
		}
		if len(s) == 10 {
			days, reason := parseDate(s)
			if reason != "" {
				return Datum{}, convErr(t, s, reason)
			}
			return Datum{I: days}, nil
		}
		us, _, reason := parseTimestamp(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{I: floorDiv(us, usPerDay)}, nil
	case iceberg.TimeType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a time string")
		}
		us, reason := parseTime(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{I: us}, nil
	case iceberg.TimestampType, iceberg.TimestampTzType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a timestamp string")
		}
		us, offset, reason := parseTimestamp(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		if _, tz := t.(iceberg.TimestampTzType); tz {
			us -= offset
			if us < minTimestamp || us > maxTimestamp {
				return Datum{}, convErr(t, s, "outside years 0000-9999 in UTC")
			}
		}
		return Datum{I: us}, nil
	}
	return Datum{}, convErr(t, s, "unsupported column type")
}

// convertBytes is Convert for binary, fixed and uuid columns.
func convertBytes(t iceberg.Type, v change.Value) (Datum, error) {
	s := v.Text
	switch tt := t.(type) {
	case iceberg.BinaryType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a hex string")
		}
		b, reason := parseHex(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		return Datum{S: b}, nil
	case iceberg.FixedType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a hex string")
		}
		b, reason := parseHex(s)
		if reason != "" {
			return Datum{}, convErr(t, s, reason)
		}
		if len(b) != tt.Len() {
			return Datum{}, convErr(t, s, "wrong length: "+strconv.Itoa(len(b))+" bytes")
		}
		return Datum{S: b}, nil
	case iceberg.UUIDType:
		if v.Kind != change.KindString {
			return Datum{}, convErr(t, s, "not a uuid string")
		}
		u, err := uuid.Parse(s)
		if err != nil {
			return Datum{}, convErr(t, s, "not a uuid")
		}
		return Datum{S: string(u[:])}, nil
	}
	return Datum{}, convErr(t, s, "unsupported column type")
}
