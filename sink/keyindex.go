package sink

import (
	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// keyIndex maps the keys of one plan to their state (an index into the plan's states).
//
// A key of one integer, temporal, decimal or string column is its own map key: the fields of
// its Datum that the type uses, which are equal exactly when AppendKey's encodings are. Every
// other key is encoded with encodeKey into text. In BenchmarkPipeline's profile, encoding every
// row's key and copying it into a new string for the map was most of plan's work and its
// allocations; a single-column key, what most tables have, now costs neither.
type keyIndex struct {
	l    *layout
	kind directKind // how a single-column key is its own map key; directNone: encoded
	one  map[directKey]int
	many map[string]int
	buf  *[]byte // the buffer's scratch for encoded keys
}

// directKind says which fields of its Datum a single-column key is: decided once per plan from
// the key column's type, not per row.
type directKind uint8

const (
	directNone    directKind = iota // several columns, or a type directKey does not represent
	directInt                       // integers, dates, times, timestamps: I
	directDecimal                   // I and Hi
	directString                    // S
)

// directKey is a single-column key's value (the fields its kind uses) or its null flag.
type directKey struct {
	null  bool
	i, hi int64
	s     string
}

func newKeyIndex(l *layout, size int, buf *[]byte) keyIndex {
	x := keyIndex{l: l, buf: buf}
	if len(l.keyIdx) == 1 {
		switch l.types[l.keyIdx[0]].(type) {
		case iceberg.Int32Type, iceberg.Int64Type, iceberg.DateType, iceberg.TimeType,
			iceberg.TimestampType, iceberg.TimestampTzType:
			x.kind = directInt
		case iceberg.DecimalType:
			x.kind = directDecimal
		case iceberg.StringType:
			x.kind = directString
		}
	}
	if x.kind != directNone {
		x.one = make(map[directKey]int, size)
	} else {
		x.many = make(map[string]int, size)
	}
	return x
}

func (x *keyIndex) direct1(key []dms.Datum) directKey {
	switch d := key[0]; {
	case d.Null:
		return directKey{null: true}
	case x.kind == directString:
		return directKey{s: d.S}
	case x.kind == directDecimal:
		return directKey{i: d.I, hi: d.Hi}
	default:
		return directKey{i: d.I}
	}
}

// get returns the state of key, if the plan has one.
func (x *keyIndex) get(key []dms.Datum) (int, bool) {
	if x.kind != directNone {
		si, ok := x.one[x.direct1(key)]
		return si, ok
	}
	*x.buf = encodeKey(x.l, (*x.buf)[:0], key)
	si, ok := x.many[string(*x.buf)]
	return si, ok
}

// put records si as the state of key, which get does not find.
func (x *keyIndex) put(key []dms.Datum, si int) {
	if x.kind != directNone {
		x.one[x.direct1(key)] = si
		return
	}
	*x.buf = encodeKey(x.l, (*x.buf)[:0], key)
	x.many[string(*x.buf)] = si
}
