package deletes

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// The canonical key encoding of the keys other than one integer column (design.md §10.1): a
// key's columns, each a tag byte and its value, concatenated. Two keys of the same columns are
// equal exactly when their encodings are (no hash: a lookup compares every byte, so a key never
// matches another's rows), and the encodings of values of one form sort as the values do:
//   - null is the tag alone (sorting first);
//   - integers (int and long share a tag: a promotion keeps the keys), dates, times and
//     timestamps: 8 bytes big-endian with the sign bit flipped;
//   - decimals: the 128-bit unscaled value, 16 bytes, sign flipped (a column's scale is fixed);
//   - floats as float64, their bits ordered (negative ones inverted);
//   - strings and binary: the bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00 0x01, so that
//     no key is a prefix of another and bytes sort as bytes;
//   - a string in the canonical lower-case UUID text form (8-4-4-4-12), the common text key, is
//     its 16 bytes under its own tag: 17 bytes instead of 39, still one string for one encoding
//     (these sort among themselves as their text does, and apart from other strings);
//   - uuid: 16 bytes.
//
// The writer encodes the keys it deletes from its batch (dms.Datum) and the probe those of a data
// file, read through dms.DatumView: one function for both, so they agree byte for byte.

// Key tags (their order is that of the forms).
const (
	tagNull byte = iota
	tagInt
	tagFloat
	tagDecimal
	tagDate
	tagTime
	tagTimestamp
	tagTimestampTz
	tagBool
	tagString
	tagUUIDText
	tagBinary
	tagUUID
)

// encodable reports whether the key columns of types can be encoded (every primitive type a key
// column may have: not nested ones).
func encodable(types []iceberg.Type) bool {
	if len(types) == 0 {
		return false
	}
	for _, t := range types {
		if _, ok := t.(iceberg.PrimitiveType); !ok {
			return false
		}
		if tagOf(t) == tagNull {
			return false
		}
	}
	return true
}

// tagOf is the tag of a non-null value of type t; tagNull for a type keys never have.
func tagOf(t iceberg.Type) byte {
	switch t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return tagInt
	case iceberg.Float32Type, iceberg.Float64Type:
		return tagFloat
	case iceberg.DecimalType:
		return tagDecimal
	case iceberg.DateType:
		return tagDate
	case iceberg.TimeType:
		return tagTime
	case iceberg.TimestampType:
		return tagTimestamp
	case iceberg.TimestampTzType:
		return tagTimestampTz
	case iceberg.BooleanType:
		return tagBool
	case iceberg.StringType:
		return tagString
	case iceberg.BinaryType, iceberg.FixedType:
		return tagBinary
	case iceberg.UUIDType:
		return tagUUID
	}
	return tagNull
}

// AppendKey appends the canonical encoding of one key column's value d, of type t, to buf.
func AppendKey(buf []byte, t iceberg.Type, d dms.Datum) []byte {
	if d.Null {
		return append(buf, tagNull)
	}
	tag := tagOf(t)
	switch tag {
	case tagInt, tagDate, tagTime, tagTimestamp, tagTimestampTz:
		return binary.BigEndian.AppendUint64(append(buf, tag), uint64(d.I)^1<<63)
	case tagDecimal:
		buf = binary.BigEndian.AppendUint64(append(buf, tag), uint64(d.Hi)^1<<63)
		return binary.BigEndian.AppendUint64(buf, uint64(d.I))
	case tagFloat:
		f := math.Float64frombits(uint64(d.I))
		if _, ok := t.(iceberg.Float32Type); ok {
			f = float64(math.Float32frombits(uint32(d.I)))
		}
		u := math.Float64bits(f)
		if u>>63 != 0 {
			u = ^u
		} else {
			u |= 1 << 63
		}
		return binary.BigEndian.AppendUint64(append(buf, tag), u)
	case tagBool:
		if d.I != 0 {
			return append(buf, tag, 1)
		}
		return append(buf, tag, 0)
	case tagUUID:
		var u [16]byte
		copy(u[:], d.S)
		return append(append(buf, tag), u[:]...)
	case tagString:
		if u, ok := uuidText(d.S); ok {
			return append(append(buf, tagUUIDText), u[:]...)
		}
	case tagNull:
		panic(fmt.Sprintf("deletes: AppendKey: %v is not a key type", t))
	}
	buf = append(buf, tag)
	for i := 0; i < len(d.S); i++ {
		if c := d.S[i]; c == 0 {
			buf = append(buf, 0, 0xFF)
		} else {
			buf = append(buf, c)
		}
	}
	return append(buf, 0, 1)
}

// AppendKeyOf appends the encoding of a key, its columns' values in key order.
func AppendKeyOf(buf []byte, types []iceberg.Type, key []dms.Datum) []byte {
	for i, t := range types {
		buf = AppendKey(buf, t, key[i])
	}
	return buf
}

// uuidText returns the 16 bytes of s when it is a UUID in canonical lower-case text form.
func uuidText(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 {
		return u, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return u, false
			}
			i++
			continue
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return u, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// keyTypes returns the types of the key columns keyIDs in schema.
func keyTypes(schema *iceberg.Schema, keyIDs []int) ([]iceberg.Type, error) {
	types := make([]iceberg.Type, len(keyIDs))
	for i, id := range keyIDs {
		f, ok := schema.FindFieldByID(id)
		if !ok {
			return nil, fmt.Errorf("key column %d not in the table schema", id)
		}
		types[i] = f.Type
	}
	return types, nil
}

// decodeString returns the string a single string key's encoding (AppendKey) holds.
func decodeString(enc string) string {
	if len(enc) == 0 {
		return ""
	}
	switch enc[0] {
	case tagUUIDText:
		u, _ := uuid.FromBytes([]byte(enc[1:]))
		return u.String()
	case tagString:
		body := enc[1 : len(enc)-2] // the end marker 0x00 0x01 dropped
		return strings.ReplaceAll(body, "\x00\xff", "\x00")
	}
	return ""
}
