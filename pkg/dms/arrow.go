package dms

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// ArrowSchema converts an Iceberg schema to the Arrow schema the sink builds record batches
// with. It delegates to iceberg-go (table.SchemaToArrowSchema) so the batches are accepted by
// table.WriteRecords: every field carries its PARQUET:field_id metadata, required fields are
// non-nullable, and the types are iceberg-go's: int→int32, long→int64, float→float32,
// double→float64, decimal(p,s)→decimal128(p,s), date→date32, time→time64[us],
// timestamp→timestamp[us], timestamptz→timestamp[us, tz=UTC], string→utf8, binary→binary,
// fixed(L)→fixed_size_binary(L), uuid→the arrow.uuid extension type (fixed_size_binary(16)
// storage), boolean→bool. Large (64-bit offset) types are not used.
func ArrowSchema(s *iceberg.Schema) (*arrow.Schema, error) {
	return table.SchemaToArrowSchema(s, nil, true, false)
}

// AppendDatum appends d to b, a builder of the Arrow type ArrowSchema gives for t (see the
// list there; LargeString/LargeBinary builders are accepted too). A null Datum appends null.
// A builder that does not match is a programming error and panics.
func AppendDatum(b array.Builder, t iceberg.Type, d Datum) {
	if d.Null {
		b.AppendNull()
		return
	}
	switch bb := b.(type) {
	case *array.Int64Builder:
		bb.Append(d.I)
	case *array.Int32Builder:
		bb.Append(int32(d.I))
	case *array.StringBuilder:
		bb.Append(d.S)
	case *array.TimestampBuilder:
		bb.Append(arrow.Timestamp(d.I))
	case *array.Decimal128Builder:
		bb.Append(decimal128.New(d.Hi, uint64(d.I)))
	case *array.Float64Builder:
		bb.Append(math.Float64frombits(uint64(d.I)))
	case *array.Float32Builder:
		bb.Append(math.Float32frombits(uint32(d.I)))
	case *array.BooleanBuilder:
		bb.Append(d.I != 0)
	case *array.Date32Builder:
		bb.Append(arrow.Date32(d.I))
	case *array.Time64Builder:
		bb.Append(arrow.Time64(d.I))
	case *array.LargeStringBuilder:
		bb.Append(d.S)
	case *array.BinaryBuilder: // binary and large binary
		bb.AppendString(d.S)
	case *array.FixedSizeBinaryBuilder:
		bb.Append(unsafe.Slice(unsafe.StringData(d.S), len(d.S)))
	case *extensions.UUIDBuilder:
		var u uuid.UUID
		copy(u[:], d.S)
		bb.Append(u)
	case *array.ExtensionBuilder:
		AppendDatum(bb.StorageBuilder(), t, d)
	default:
		panic(fmt.Sprintf("dms: AppendDatum: builder %T does not match Iceberg type %v", b, t))
	}
}

// Key tags of AppendKey. int and long share a tag (and float and double) so that a type
// promotion does not change the keys of equal values.
const (
	keyNull byte = iota
	keyInt
	keyFloat
	keyDecimal
	keyDate
	keyTime
	keyTimestamp
	keyTimestampTz
	keyBool
	keyString
	keyBinary
	keyUUID
	keyOther = 0xFF
)

// AppendKey appends a canonical, collision-free binary encoding of one key column value to
// buf: a type tag byte, then a fixed-width big-endian payload (integers, dates, times,
// timestamps, floats as float64 bits, decimals as 16 bytes, booleans as one byte, uuids as 16
// bytes) or a uvarint length followed by the bytes (string, binary, fixed). Null is the tag
// alone. Concatenating the encodings of a key's columns gives a map key that is equal exactly
// when all values are equal (floats compare by bit pattern; -0 and 0 differ).
func AppendKey(buf []byte, t iceberg.Type, d Datum) []byte {
	if d.Null {
		return append(buf, keyNull)
	}
	switch t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return binary.BigEndian.AppendUint64(append(buf, keyInt), uint64(d.I))
	case iceberg.Float32Type:
		f := float64(math.Float32frombits(uint32(d.I)))
		return binary.BigEndian.AppendUint64(append(buf, keyFloat), math.Float64bits(f))
	case iceberg.Float64Type:
		return binary.BigEndian.AppendUint64(append(buf, keyFloat), uint64(d.I))
	case iceberg.DecimalType:
		buf = binary.BigEndian.AppendUint64(append(buf, keyDecimal), uint64(d.Hi))
		return binary.BigEndian.AppendUint64(buf, uint64(d.I))
	case iceberg.DateType:
		return binary.BigEndian.AppendUint64(append(buf, keyDate), uint64(d.I))
	case iceberg.TimeType:
		return binary.BigEndian.AppendUint64(append(buf, keyTime), uint64(d.I))
	case iceberg.TimestampType:
		return binary.BigEndian.AppendUint64(append(buf, keyTimestamp), uint64(d.I))
	case iceberg.TimestampTzType:
		return binary.BigEndian.AppendUint64(append(buf, keyTimestampTz), uint64(d.I))
	case iceberg.BooleanType:
		if d.I != 0 {
			return append(buf, keyBool, 1)
		}
		return append(buf, keyBool, 0)
	case iceberg.StringType:
		buf = binary.AppendUvarint(append(buf, keyString), uint64(len(d.S)))
		return append(buf, d.S...)
	case iceberg.BinaryType, iceberg.FixedType:
		buf = binary.AppendUvarint(append(buf, keyBinary), uint64(len(d.S)))
		return append(buf, d.S...)
	case iceberg.UUIDType:
		var u [16]byte
		copy(u[:], d.S)
		return append(append(buf, keyUUID), u[:]...)
	}
	buf = binary.BigEndian.AppendUint64(append(buf, keyOther), uint64(d.I))
	buf = binary.BigEndian.AppendUint64(buf, uint64(d.Hi))
	buf = binary.AppendUvarint(buf, uint64(len(d.S)))
	return append(buf, d.S...)
}

// Render returns the canonical text of a non-null value of type t; it is deterministic so
// that expected and actual table contents can be compared as text:
//
//	int, long       decimal digits                     -42
//	decimal(p,s)    digits with exactly s decimals     -1.50, 0.05, 12
//	float, double   strconv 'g' with shortest precision (NaN, +Inf, -Inf)
//	boolean         true, false
//	date            2006-01-02
//	time            15:04:05.000000
//	timestamp       2006-01-02T15:04:05.000000
//	timestamptz     2006-01-02T15:04:05.000000Z (UTC)
//	string          the string itself
//	binary, fixed   lower-case hex without prefix
//	uuid            canonical lower-case 8-4-4-4-12 form
//
// Callers check d.Null first; Render returns "" for a null Datum.
func Render(t iceberg.Type, d Datum) string {
	if d.Null {
		return ""
	}
	switch tt := t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return strconv.FormatInt(d.I, 10)
	case iceberg.DecimalType:
		return renderDecimal(uint64(d.Hi), uint64(d.I), tt.Scale())
	case iceberg.Float32Type:
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(d.I))), 'g', -1, 32)
	case iceberg.Float64Type:
		return strconv.FormatFloat(math.Float64frombits(uint64(d.I)), 'g', -1, 64)
	case iceberg.BooleanType:
		if d.I != 0 {
			return "true"
		}
		return "false"
	case iceberg.DateType:
		return string(appendDate(nil, d.I))
	case iceberg.TimeType:
		return string(appendClock(nil, d.I))
	case iceberg.TimestampType:
		return string(appendTimestamp(nil, d.I))
	case iceberg.TimestampTzType:
		return string(append(appendTimestamp(nil, d.I), 'Z'))
	case iceberg.StringType:
		return d.S
	case iceberg.BinaryType, iceberg.FixedType:
		return hex.EncodeToString([]byte(d.S))
	case iceberg.UUIDType:
		var u uuid.UUID
		copy(u[:], d.S)
		return u.String()
	}
	return fmt.Sprintf("%v(I=%d,Hi=%d,S=%q)", t, d.I, d.Hi, d.S)
}

func appendDate(b []byte, days int64) []byte {
	y, m, d := civilFromDays(days)
	b = appendPad(b, y, 4)
	b = append(b, '-')
	b = appendPad(b, int64(m), 2)
	b = append(b, '-')
	return appendPad(b, int64(d), 2)
}

func appendClock(b []byte, us int64) []byte {
	sec := us / usPerSecond
	b = appendPad(b, sec/3600, 2)
	b = append(b, ':')
	b = appendPad(b, sec/60%60, 2)
	b = append(b, ':')
	b = appendPad(b, sec%60, 2)
	b = append(b, '.')
	return appendPad(b, us%usPerSecond, 6)
}

func appendTimestamp(b []byte, us int64) []byte {
	days := floorDiv(us, usPerDay)
	b = appendDate(b, days)
	b = append(b, 'T')
	return appendClock(b, us-days*usPerDay)
}

// appendPad appends v in decimal with at least width digits (a sign before the padding).
func appendPad(b []byte, v int64, width int) []byte {
	if v < 0 {
		b = append(b, '-')
		v = -v
	}
	var tmp [20]byte
	s := strconv.AppendInt(tmp[:0], v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// renderDecimal renders the 128-bit two's complement unscaled value (hi, lo) with scale
// decimals.
func renderDecimal(hi, lo uint64, scale int) string {
	neg := int64(hi) < 0
	if neg {
		hi, lo = neg128(hi, lo)
	}
	// Split into base-1e19 chunks, least significant first.
	const base = uint64(1e19)
	var chunks [3]uint64
	n := 0
	for {
		qh := hi / base
		r := hi % base
		ql, rem := bits.Div64(r, lo, base)
		chunks[n] = rem
		n++
		hi, lo = qh, ql
		if hi == 0 && lo == 0 {
			break
		}
	}
	var digits []byte
	digits = strconv.AppendUint(digits, chunks[n-1], 10)
	for k := n - 2; k >= 0; k-- {
		s := strconv.FormatUint(chunks[k], 10)
		for i := len(s); i < 19; i++ {
			digits = append(digits, '0')
		}
		digits = append(digits, s...)
	}
	if scale > 0 {
		for len(digits) <= scale {
			digits = append([]byte{'0'}, digits...)
		}
		p := len(digits) - scale
		digits = append(digits[:p], append([]byte{'.'}, digits[p:]...)...)
	}
	if neg {
		return "-" + string(digits)
	}
	return string(digits)
}

// RenderArrow renders element i of an Arrow column read back from an Iceberg table exactly
// as Render renders the Datum that was written; ok is false for null. It accepts the types
// ArrowSchema produces plus what a scan may return instead: large and view string/binary
// variants, other integer widths, date64, time32, timestamps of any unit (truncated to
// microseconds), dictionary-encoded and extension (uuid) arrays.
func RenderArrow(arr arrow.Array, i int, t iceberg.Type) (string, bool) {
	d, ok := datumAt(arr, i)
	if !ok {
		return "", false
	}
	if dt, ok := t.(iceberg.DecimalType); ok {
		if at, ok := arr.DataType().(*arrow.Decimal128Type); ok && int(at.Scale) != dt.Scale() {
			// The column was written with another scale; render with the stored one.
			return renderDecimal(uint64(d.Hi), uint64(d.I), int(at.Scale)), true
		}
	}
	return Render(t, d), true
}

// DatumAt reads element i of an Arrow column read back from an Iceberg table (any type
// RenderArrow accepts) as the Datum Convert produces for a value of the column's type, so that
// a stored value can be written again or encoded with AppendKey. Strings and bytes are copied:
// the Datum outlives the record batch. Decimals keep the unscaled value as stored (an Iceberg
// decimal column never changes its scale).
func DatumAt(arr arrow.Array, i int) Datum {
	d, _ := datumAt(arr, i)
	d.S = strings.Clone(d.S)
	return d
}

// DatumView is DatumAt without the copy: strings and bytes point into arr's buffers and are
// valid only while the record batch is. For comparing and encoding keys (AppendKey).
func DatumView(arr arrow.Array, i int) Datum {
	d, _ := datumAt(arr, i)
	return d
}

func datumAt(arr arrow.Array, i int) (Datum, bool) {
	if arr.IsNull(i) {
		return Datum{Null: true}, false
	}
	switch a := arr.(type) {
	case *array.Int8:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Int16:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Int32:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Int64:
		return Datum{I: a.Value(i)}, true
	case *array.Uint8:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Uint16:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Uint32:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Float32:
		return Datum{I: int64(math.Float32bits(a.Value(i)))}, true
	case *array.Float64:
		return Datum{I: int64(math.Float64bits(a.Value(i)))}, true
	case *array.Decimal128:
		n := a.Value(i)
		return Datum{I: int64(n.LowBits()), Hi: n.HighBits()}, true
	case *array.Boolean:
		if a.Value(i) {
			return Datum{I: 1}, true
		}
		return Datum{}, true
	case *array.Date32:
		return Datum{I: int64(a.Value(i))}, true
	case *array.Date64:
		return Datum{I: floorDiv(int64(a.Value(i)), 86400_000)}, true
	case *array.Time32:
		v := int64(a.Value(i))
		if a.DataType().(*arrow.Time32Type).Unit == arrow.Second {
			return Datum{I: v * usPerSecond}, true
		}
		return Datum{I: v * 1000}, true
	case *array.Time64:
		v := int64(a.Value(i))
		if a.DataType().(*arrow.Time64Type).Unit == arrow.Nanosecond {
			v = floorDiv(v, 1000)
		}
		return Datum{I: v}, true
	case *array.Timestamp:
		v := int64(a.Value(i))
		switch a.DataType().(*arrow.TimestampType).Unit {
		case arrow.Second:
			v *= usPerSecond
		case arrow.Millisecond:
			v *= 1000
		case arrow.Nanosecond:
			v = floorDiv(v, 1000)
		}
		return Datum{I: v}, true
	case *array.String:
		return Datum{S: a.Value(i)}, true
	case *array.LargeString:
		return Datum{S: a.Value(i)}, true
	case *array.StringView:
		return Datum{S: a.Value(i)}, true
	case *array.Binary:
		return Datum{S: string(a.Value(i))}, true
	case *array.LargeBinary:
		return Datum{S: string(a.Value(i))}, true
	case *array.BinaryView:
		return Datum{S: string(a.Value(i))}, true
	case *array.FixedSizeBinary:
		return Datum{S: string(a.Value(i))}, true
	case *array.Dictionary:
		return datumAt(a.Dictionary(), a.GetValueIndex(i))
	case array.ExtensionArray:
		return datumAt(a.Storage(), i)
	}
	return Datum{S: fmt.Sprint(arr.GetOneForMarshal(i))}, true
}
