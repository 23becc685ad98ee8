package dms

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Datum is one converted column value in a compact form the sink can buffer without boxing.
// The meaning of the fields depends on the Iceberg type the value was converted to:
//
//	int, long                 I
//	date                      I = days since 1970-01-01
//	time                      I = microseconds since midnight
//	timestamp, timestamptz    I = microseconds since 1970-01-01T00:00:00 (UTC for timestamptz)
//	boolean                   I = 0 or 1
//	float                     I = int64(math.Float32bits(f)) (zero-extended)
//	double                    I = int64(math.Float64bits(f))
//	decimal(p,s)              the unscaled 128-bit two's complement value: Hi = high 64 bits,
//	                          I = low 64 bits (bit pattern of decimal128.New(Hi, uint64(I)))
//	string                    S (may share memory with the change.Value it came from)
//	binary, fixed(L)          S = the raw bytes
//	uuid                      S = the 16 raw bytes
//
// Null is true for SQL NULL; the other fields are then zero.
type Datum struct {
	Null bool
	I    int64
	Hi   int64
	S    string
}

// ConvertError reports a value that cannot be converted to its column type.
type ConvertError struct {
	// Column is the column name. Convert leaves it empty; the caller fills it in.
	Column string
	// Type is the Iceberg type, as iceberg.Type.String prints it.
	Type string
	// Text is the offending value text, truncated to 64 bytes.
	Text string
	// Reason says why the value was rejected.
	Reason string
}

func (e *ConvertError) Error() string {
	var b strings.Builder
	b.WriteString("dms: convert ")
	if e.Column != "" {
		b.WriteString("column ")
		b.WriteString(strconv.Quote(e.Column))
		b.WriteString(" ")
	}
	b.WriteString("value ")
	b.WriteString(strconv.Quote(e.Text))
	b.WriteString(" to ")
	b.WriteString(e.Type)
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func convErr(t iceberg.Type, text, reason string) *ConvertError {
	if len(text) > 64 {
		n := 64
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	ts := "<nil>"
	if t != nil {
		ts = t.String()
	}
	return &ConvertError{Type: ts, Text: text, Reason: reason}
}

// Convert converts a DMS value to a Datum of Iceberg type t, exactly: no value is rounded
// except floats (to the nearest representable value) and sub-microsecond digits of times and
// timestamps, which are truncated (Iceberg stores microseconds). A JSON null is
// Datum{Null: true} for every type. Convert checks the Iceberg type only; ConvertIn also checks
// the range of the column's DMS source type (unsigned integers).
//
//   - int, long: the integer literal of a JSON number or string (an optional sign, digits, and
//     an optional fraction of zeros only, "12.0"). Exponent forms are rejected: DMS writes
//     BIGINTs of more than 16 digits as 1.2345678901234568E+18 when UseLargeIntegerValue is
//     off, and digits are already lost then. int is range-checked to 32 bits.
//   - decimal(p,s): the number (JSON number or numeric string, exponent allowed) exactly at
//     scale s; extra fractional digits must be zeros, and the value must fit p digits.
//   - float, double: a decimal number (JSON number or numeric string, exponent allowed)
//     rounded to the nearest representable value; overflow (beyond the largest finite value)
//     and underflow (a nonzero value that rounds to 0; 1e-400) are rejected, subnormals kept.
//     The words nan, inf and infinity in any case, with an optional sign, are NaN, +Inf and
//     -Inf (the decoder rejects them as bare JSON tokens, so they arrive quoted). Go-only
//     syntax (hex floats, underscores) is rejected.
//   - boolean: JSON true/false; numbers 1/0; strings true/false/t/f/1/0/yes/no/y/n in any case.
//   - date: "YYYY-MM-DD", or a full timestamp text whose wall-clock date is taken.
//   - time: "HH:MM:SS" with an optional fraction of 1-9 digits; 00-23 hours only.
//   - timestamp, timestamptz: "YYYY-MM-DD[T| ]HH:MM:SS[.f{1,9}][Z|±hh[:mm]]" or a bare date
//     (midnight). timestamptz converts an offset to UTC (no offset means UTC); timestamp keeps
//     the wall-clock digits and ignores any zone, because DMS appends Z to zone-less values.
//     Primary-key columns are not truncated: see KeyType and KeyDomain (ConvertIn).
//   - string: any kind; numbers keep their literal text, booleans are "true"/"false", JSON
//     objects and arrays their compact text.
//   - binary, fixed(L): hex, with or without a 0x/0X prefix, either case (fixed: exactly L
//     bytes).
//   - uuid: the textual forms github.com/google/uuid accepts (canonical, 32 hex digits,
//     braces, urn:uuid:).
//
// Other types (nested, nanosecond timestamps, variant, geometry) are rejected. Errors are
// *ConvertError.
func Convert(t iceberg.Type, v change.Value) (Datum, error) {
	if v.Kind == change.KindNull {
		return Datum{Null: true}, nil
	}
	s := v.Text
	switch t.(type) {
	case iceberg.StringType:
		return Datum{S: s}, nil
	case iceberg.Int32Type, iceberg.Int64Type, iceberg.DecimalType, iceberg.Float32Type, iceberg.Float64Type:
		return convertNumber(t, v)
	case iceberg.BooleanType:
		if v.Kind == change.KindJSON {
			return Datum{}, convErr(t, s, "not a boolean")
		}
		b, ok := parseBool(s)
		if !ok {
			return Datum{}, convErr(t, s, "not a boolean (want true/false, t/f, 1/0, yes/no, y/n)")
		}
		if b {
			return Datum{I: 1}, nil
		}
		return Datum{}, nil
	case iceberg.DateType, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
		return convertTemporal(t, v)
	case iceberg.BinaryType, iceberg.FixedType, iceberg.UUIDType:
		return convertBytes(t, v)
	}
	return Datum{}, convErr(t, s, "unsupported column type")
}

// parseFloat converts the text of a float (bitSize 32) or double (64) value; it returns a
// non-empty reason on failure. The words nan, inf and infinity (any case, optional sign) are
// NaN and ±Inf; any other text must be a decimal number ([sign] digits [. digits] [e [sign]
// digits], as parseDecimal reads it), rounded to the nearest representable value. A value
// beyond the largest finite one (overflow to ±Inf) and a nonzero value that rounds to ±0
// (underflow) are rejected: neither is the source value. Subnormal results are kept.
func parseFloat(s string, bitSize int) (float64, string) {
	if f, ok := nonFinite(s); ok {
		return f, ""
	}
	nonzero, ok := decimalSyntax(s)
	if !ok {
		return 0, "not a number"
	}
	f, err := strconv.ParseFloat(s, bitSize)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, "out of range"
		}
		return 0, "not a number"
	}
	if f == 0 && nonzero {
		return 0, "underflow: a nonzero value rounds to 0 at this precision"
	}
	return f, ""
}

// nonFinite reads the words nan, inf and infinity in any case with an optional sign.
func nonFinite(s string) (float64, bool) {
	sign := 1
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	switch {
	case len(s) == 3 && equalFold3(s, "nan"):
		return math.NaN(), true
	case len(s) == 3 && equalFold3(s, "inf"), len(s) == 8 && strings.EqualFold(s, "infinity"):
		return math.Inf(sign), true
	}
	return 0, false
}

// decimalSyntax reports whether s is [sign] (digits [. digits*] | . digits) [(e|E) [sign]
// digits], and whether its coefficient has a nonzero digit.
func decimalSyntax(s string) (nonzero, ok bool) {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	n := 0
	for ; i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.'); i++ {
		if s[i] == '.' {
			if n < 0 {
				return false, false // a second dot
			}
			n = -n - 1 // mark the dot, keep the digit count
			continue
		}
		nonzero = nonzero || s[i] != '0'
		if n >= 0 {
			n++
		} else {
			n--
		}
	}
	if n == 0 || n == -1 {
		return false, false // no digit
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return false, false
		}
	}
	return nonzero, i == len(s)
}

// parseInteger parses an integer literal; it returns a non-empty reason on failure.
func parseInteger(s string) (int64, string) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var u uint64
	overflow := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if u > (math.MaxUint64-9)/10 {
			overflow = true
			continue
		}
		u = u*10 + uint64(s[i]-'0')
	}
	if i == start {
		return 0, "not an integer"
	}
	fraction := false
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			fraction = fraction || s[i] != '0'
		}
		if i == fs {
			return 0, "not an integer"
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		return 0, "scientific notation: DMS rendered the integer through a double and digits may be lost (set UseLargeIntegerValue=true on the endpoint)"
	}
	if i != len(s) {
		return 0, "not an integer"
	}
	if fraction {
		return 0, "has a fractional part"
	}
	if overflow || (!neg && u > math.MaxInt64) || (neg && u > 1<<63) {
		return 0, "out of range for a 64-bit long"
	}
	if neg {
		return int64(-u), ""
	}
	return int64(u), ""
}

// parseDecimal parses s exactly into the unscaled value at scale, as a 128-bit two's
// complement (hi, lo). It never uses floating point.
func parseDecimal(s string, prec, scale int) (hi int64, lo uint64, reason string) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	intStart := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		fracEnd = i
	}
	if intEnd == intStart && fracEnd == fracStart {
		return 0, 0, "not a number"
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			eneg = s[i] == '-'
			i++
		}
		es := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if exp < 1e12 {
				exp = exp*10 + int64(s[i]-'0')
			}
		}
		if i == es {
			return 0, 0, "not a number"
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		return 0, 0, "not a number"
	}
	// The coefficient's digits are s[intStart:intEnd] followed by s[fracStart:fracEnd]; the
	// unscaled value at the column scale is coefficient × 10^shift.
	nInt, nFrac := intEnd-intStart, fracEnd-fracStart
	digit := func(k int) byte { // k-th coefficient digit
		if k < nInt {
			return s[intStart+k]
		}
		return s[fracStart+k-nInt]
	}
	nDigits := nInt + nFrac
	shift := exp - int64(nFrac) + int64(scale)
	keep := nDigits
	if shift < 0 {
		if -shift >= int64(nDigits) {
			keep = 0
		} else {
			keep = nDigits + int(shift)
		}
		for k := keep; k < nDigits; k++ {
			if digit(k) != '0' {
				return 0, 0, "more fractional digits than scale " + strconv.Itoa(scale)
			}
		}
		shift = 0
	}
	first := 0
	for first < keep && digit(first) == '0' {
		first++
	}
	if first == keep {
		return 0, 0, "" // zero (no negative zero in decimals)
	}
	if int64(keep-first)+shift > int64(prec) {
		return 0, 0, "exceeds precision " + strconv.Itoa(prec)
	}
	var h, l uint64
	for k := first; k < keep; k++ {
		h, l = mul10add(h, l, uint64(digit(k)-'0'))
	}
	for ; shift > 0; shift-- {
		h, l = mul10add(h, l, 0)
	}
	if neg {
		h, l = neg128(h, l)
	}
	return int64(h), l, ""
}

func mul10add(h, l, d uint64) (uint64, uint64) {
	carry, lo := bits.Mul64(l, 10)
	hi := h*10 + carry
	lo, c := bits.Add64(lo, d, 0)
	return hi + c, lo
}

func neg128(h, l uint64) (uint64, uint64) {
	l = ^l + 1
	h = ^h
	if l == 0 {
		h++
	}
	return h, l
}

func parseBool(s string) (bool, bool) {
	switch len(s) {
	case 1:
		switch s[0] {
		case '1', 't', 'T', 'y', 'Y':
			return true, true
		case '0', 'f', 'F', 'n', 'N':
			return false, true
		}
	case 2:
		if strings.EqualFold(s, "no") {
			return false, true
		}
	case 3:
		if strings.EqualFold(s, "yes") {
			return true, true
		}
	case 4:
		if strings.EqualFold(s, "true") {
			return true, true
		}
	case 5:
		if strings.EqualFold(s, "false") {
			return false, true
		}
	}
	return false, false
}

const (
	usPerSecond = int64(1_000_000)
	usPerDay    = 86400 * usPerSecond
)

// The timestamp range Convert produces: years 0000 to 9999, so that Render's four-digit year
// parses back.
var (
	minTimestamp = daysFromCivil(0, 1, 1) * usPerDay
	maxTimestamp = daysFromCivil(10000, 1, 1)*usPerDay - 1
)

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// digits parses exactly n ASCII digits of s starting at i; -1 when they are not digits.
func digits(s string, i, n int) int {
	if i+n > len(s) {
		return -1
	}
	v := 0
	for k := i; k < i+n; k++ {
		c := s[k]
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

// parseDate parses "YYYY-MM-DD" (exactly 10 bytes) into days since the epoch.
func parseDate(s string) (int64, string) {
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return 0, "want YYYY-MM-DD"
	}
	y, m, d := digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2)
	if y < 0 || m < 0 || d < 0 {
		return 0, "want YYYY-MM-DD"
	}
	if m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, "no such date"
	}
	return daysFromCivil(int64(y), m, d), ""
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns days since 1970-01-01 of the proleptic Gregorian date y-m-d.
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := int64(m + 9)
	if m > 2 {
		mp = int64(m - 3)
	}
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := z
	if era < 0 {
		era -= 146096
	}
	era /= 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// parseTime parses "HH:MM:SS[.f{1,9}]" at the start of s and returns microseconds since
// midnight. Trailing bytes after the fraction are left to the caller.
func parseTime(s string) (int64, string) {
	us, n, reason := parseClock(s)
	if reason != "" {
		return 0, reason
	}
	if n != len(s) {
		return 0, "want HH:MM:SS[.fraction]"
	}
	return us, ""
}

// parseClock parses "HH:MM:SS[.f{1,9}]" at the start of s; n is the number of bytes used.
func parseClock(s string) (us int64, n int, reason string) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, 0, "want HH:MM:SS[.fraction]"
	}
	h, m, sec := digits(s, 0, 2), digits(s, 3, 2), digits(s, 6, 2)
	if h < 0 || m < 0 || sec < 0 {
		return 0, 0, "want HH:MM:SS[.fraction]"
	}
	if h > 23 || m > 59 || sec > 59 {
		return 0, 0, "time of day out of range"
	}
	us = (int64(h)*3600 + int64(m)*60 + int64(sec)) * usPerSecond
	n = 8
	if n < len(s) && s[n] == '.' {
		n++
		start := n
		var frac int64
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			if n-start < 6 {
				frac = frac*10 + int64(s[n]-'0')
			}
			n++
		}
		nd := n - start
		if nd == 0 || nd > 9 {
			return 0, 0, "fraction must have 1 to 9 digits"
		}
		for k := nd; k < 6; k++ {
			frac *= 10
		}
		us += frac
	}
	return us, n, ""
}

// parseTimestamp parses "YYYY-MM-DD[(T|t| )HH:MM:SS[.f{1,9}][Z|z|±hh[:mm]|±hhmm]]" and returns
// the wall-clock microseconds since the epoch and the zone offset in microseconds (0 for Z or
// none).
func parseTimestamp(s string) (us, offset int64, reason string) {
	if len(s) < 10 {
		return 0, 0, "want YYYY-MM-DDTHH:MM:SS[.fraction][zone]"
	}
	days, reason := parseDate(s[:10])
	if reason != "" {
		return 0, 0, reason
	}
	us = days * usPerDay
	if len(s) == 10 {
		return us, 0, ""
	}
	if c := s[10]; c != 'T' && c != 't' && c != ' ' {
		return 0, 0, "want YYYY-MM-DDTHH:MM:SS[.fraction][zone]"
	}
	clock, n, reason := parseClock(s[11:])
	if reason != "" {
		return 0, 0, reason
	}
	us += clock
	z := s[11+n:]
	switch {
	case z == "":
	case z == "Z" || z == "z":
	case z[0] == '+' || z[0] == '-':
		var oh, om int
		switch len(z) {
		case 3: // ±hh
			oh, om = digits(z, 1, 2), 0
		case 5: // ±hhmm
			oh, om = digits(z, 1, 2), digits(z, 3, 2)
		case 6: // ±hh:mm
			if z[3] != ':' {
				return 0, 0, "bad zone offset"
			}
			oh, om = digits(z, 1, 2), digits(z, 4, 2)
		default:
			return 0, 0, "bad zone offset"
		}
		if oh < 0 || om < 0 || oh > 23 || om > 59 {
			return 0, 0, "bad zone offset"
		}
		offset = (int64(oh)*3600 + int64(om)*60) * usPerSecond
		if z[0] == '-' {
			offset = -offset
		}
	default:
		return 0, 0, "unexpected text after the time"
	}
	return us, offset, ""
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseHex decodes hex with an optional 0x/0X prefix into a string of raw bytes.
func parseHex(s string) (string, string) {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	if len(s)%2 != 0 {
		return "", "odd number of hex digits"
	}
	if len(s) == 0 {
		return "", ""
	}
	var b strings.Builder
	b.Grow(len(s) / 2)
	for i := 0; i < len(s); i += 2 {
		h, ok1 := unhex(s[i])
		l, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return "", "not hex"
		}
		b.WriteByte(h<<4 | l)
	}
	return b.String(), ""
}
