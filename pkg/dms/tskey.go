package dms

import (
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Timestamp keys. Iceberg timestamps hold microseconds, so Convert truncates the digits of
// SQL Server datetime2(7) or Oracle TIMESTAMP(9) values below one. Outside the primary key
// that is a documented precision loss; in the key it would merge two distinct source rows into
// one. So a timestamp key column is stored losslessly:
//
//   - when its table-def declares more than 6 fractional digits (TimestampDigits), KeyType
//     makes it a string column holding the canonical text of the value (the wall clock, or UTC
//     followed by Z for timestamptz, with exactly the declared digits:
//     2024-01-02T03:04:05.1234567), and marks it by its doc, from which KeyDomain gives the
//     DomainTimestampText… that ConvertIn renders with. The text sorts as the timestamps do
//     (years 0000-9999, fixed width), and every engine can compare and join it;
//   - otherwise (6 digits or fewer declared, or none: an inferred or configured table, a
//     table-def without scale) it stays a timestamp with DomainMicros, under which ConvertIn
//     rejects a value with a nonzero digit below the microsecond instead of truncating it.

// The domains of timestamp key columns.
const (
	// DomainMicros: a timestamp or timestamptz key column; a nonzero digit below the
	// microsecond is rejected.
	DomainMicros Domain = iota + DomainUint64 + 1
	// DomainTimestampText7 .. 9: a string key column holding a timestamp's wall clock with 7,
	// 8 or 9 fractional digits (YYYY-MM-DDTHH:MM:SS.fffffff).
	DomainTimestampText7
	DomainTimestampText8
	DomainTimestampText9
	// DomainTimestampTzText7 .. 9: the same for timestamptz, in UTC with a trailing Z.
	DomainTimestampTzText7
	DomainTimestampTzText8
	DomainTimestampTzText9
)

// textDomain returns the fractional digits and zone flag of a DomainTimestamp(Tz)Text….
func textDomain(dm Domain) (digits int, tz, ok bool) {
	switch {
	case dm >= DomainTimestampText7 && dm <= DomainTimestampText9:
		return 7 + int(dm-DomainTimestampText7), false, true
	case dm >= DomainTimestampTzText7 && dm <= DomainTimestampTzText9:
		return 7 + int(dm-DomainTimestampTzText7), true, true
	}
	return 0, false, false
}

func timestampDomainName(dm Domain) (string, bool) {
	if dm == DomainMicros {
		return "timestamp key (microseconds)", true
	}
	if n, tz, ok := textDomain(dm); ok {
		return tsName(tz) + "(" + strconv.Itoa(n) + ") key as text", true
	}
	return "", false
}

func tsName(tz bool) string {
	if tz {
		return "timestamptz"
	}
	return "timestamp"
}

// TimestampDigits returns the fractional-second digits a DATETIME/TIMESTAMP table-def column
// declares: its Scale, else the n of a "TIMESTAMP(n)" type name, else its Precision when that
// is at most 9 (a larger precision is a display width, as SQL Server's 27 for datetime2(7)).
// It returns 0 when the column declares none or is not a timestamp.
func TimestampDigits(c change.ColumnDef) int {
	name, a, _, na, _ := normType(c.Type)
	if name != "DATETIME" && name != "TIMESTAMP" {
		return 0
	}
	switch {
	case c.Scale > 0:
		return c.Scale
	case na && a > 0:
		return a
	case c.Precision > 0 && c.Precision <= 9:
		return c.Precision
	}
	return 0
}

// keyDocPrefix starts the doc of a timestamp key column stored as text.
const keyDocPrefix = "dms2iceberg: "

func keyDoc(digits int, tz bool) string {
	return keyDocPrefix + tsName(tz) + "(" + strconv.Itoa(digits) + ") key stored as text YYYY-MM-DDTHH:MM:SS." +
		strings.Repeat("f", digits) + map[bool]string{true: "Z (UTC)", false: " (wall clock)"}[tz]
}

// KeyType returns the Iceberg type and column doc of a primary-key column whose table-def
// column c maps to type t (IcebergType with the table's options): a timestamp or timestamptz
// declaring more than 6 fractional digits becomes a string with a doc naming the form (see
// KeyDomain); every other column keeps t and gets no doc. Digits beyond 9 count as 9.
func KeyType(c change.ColumnDef, t iceberg.Type) (iceberg.Type, string) {
	var tz bool
	switch t.(type) {
	case iceberg.TimestampType:
	case iceberg.TimestampTzType:
		tz = true
	default:
		return t, ""
	}
	n := TimestampDigits(c)
	if n <= 6 {
		return t, ""
	}
	return iceberg.PrimitiveTypes.String, keyDoc(min(n, 9), tz)
}

// KeyDomain returns the domain of a primary-key column of type t with doc doc, as the table
// stores it: DomainMicros for a timestamp or timestamptz, DomainTimestamp(Tz)Text… for a
// string KeyType made, DomainAny otherwise.
func KeyDomain(t iceberg.Type, doc string) Domain {
	switch t.(type) {
	case iceberg.TimestampType, iceberg.TimestampTzType:
		return DomainMicros
	case iceberg.StringType:
		if !strings.HasPrefix(doc, keyDocPrefix) {
			return DomainAny
		}
		for n := 7; n <= 9; n++ {
			switch doc {
			case keyDoc(n, false):
				return DomainTimestampText7 + Domain(n-7)
			case keyDoc(n, true):
				return DomainTimestampTzText7 + Domain(n-7)
			}
		}
	}
	return DomainAny
}

// fraction returns the fractional-second digits of a timestamp text Convert accepted.
func fraction(s string) string {
	if len(s) <= 20 || s[19] != '.' {
		return ""
	}
	i := 20
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[20:i]
}

// checkMicros rejects a value of a DomainMicros column whose digits below the microsecond are
// not all zero.
func checkMicros(t iceberg.Type, s string) error {
	f := fraction(s)
	if len(f) > 6 && strings.Trim(f[6:], "0") != "" {
		return convErr(t, s, "a primary-key timestamp with digits below a microsecond: Iceberg timestamps hold microseconds and truncating would merge distinct keys (declare the column's precision, scale > 6, in the table-def or the configured type, e.g. DATETIME(7), to store it as text)")
	}
	return nil
}

// convertTimestampText converts v to the canonical text of a DomainTimestamp(Tz)Text… column.
func convertTimestampText(t iceberg.Type, dm Domain, v change.Value) (Datum, error) {
	if v.Kind == change.KindNull {
		return Datum{Null: true}, nil
	}
	n, tz, _ := textDomain(dm)
	s := v.Text
	want := iceberg.Type(iceberg.PrimitiveTypes.Timestamp)
	if tz {
		want = iceberg.PrimitiveTypes.TimestampTz
	}
	d, err := convertTemporal(want, v) // syntax, calendar, zone, and the UTC range for tz
	if err != nil {
		e := err.(*ConvertError)
		e.Type = t.String() + " (" + tsName(tz) + "(" + strconv.Itoa(n) + ") key)"
		return Datum{}, e
	}
	f := fraction(s)
	if len(f) > n && strings.Trim(f[n:], "0") != "" {
		return Datum{}, convErr(t, s, "more fractional digits than the column's "+strconv.Itoa(n))
	}
	if len(f) > n {
		f = f[:n]
	}
	sec := floorDiv(d.I, usPerSecond)
	days := floorDiv(sec, 86400)
	rem := sec - days*86400
	y, m, dd := civilFromDays(days)
	var b strings.Builder
	b.Grow(21 + n)
	pad := func(x int64, w int) {
		s := strconv.FormatInt(x, 10)
		for k := len(s); k < w; k++ {
			b.WriteByte('0')
		}
		b.WriteString(s)
	}
	pad(y, 4)
	b.WriteByte('-')
	pad(int64(m), 2)
	b.WriteByte('-')
	pad(int64(dd), 2)
	b.WriteByte('T')
	pad(rem/3600, 2)
	b.WriteByte(':')
	pad(rem/60%60, 2)
	b.WriteByte(':')
	pad(rem%60, 2)
	b.WriteByte('.')
	b.WriteString(f)
	for k := len(f); k < n; k++ {
		b.WriteByte('0')
	}
	if tz {
		b.WriteByte('Z')
	}
	return Datum{S: b.String()}, nil
}
