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
	l      *layout
	direct bool // the key is one column of a type directKey represents
	one    map[directKey]int
	many   map[string]int
	buf    *[]byte // the buffer's scratch for encoded keys
}

// directKey is a single-column key's value: I (integers, dates, times, timestamps; a
// decimal's low half), Hi (a decimal's high half), S (strings), null flag.
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
			iceberg.TimestampType, iceberg.TimestampTzType, iceberg.DecimalType, iceberg.StringType:
			x.direct = true
		}
	}
	if x.direct {
		x.one = make(map[directKey]int, size)
	} else {
		x.many = make(map[string]int, size)
	}
	return x
}

func (x *keyIndex) direct1(key []dms.Datum) directKey {
	d := key[0]
	if d.Null {
		return directKey{null: true}
	}
	switch x.l.types[x.l.keyIdx[0]].(type) {
	case iceberg.StringType:
		return directKey{s: d.S}
	case iceberg.DecimalType:
		return directKey{i: d.I, hi: d.Hi}
	}
	return directKey{i: d.I}
}

// get returns the state of key, if the plan has one.
func (x *keyIndex) get(key []dms.Datum) (int, bool) {
	if x.direct {
		si, ok := x.one[x.direct1(key)]
		return si, ok
	}
	*x.buf = encodeKey(x.l, (*x.buf)[:0], key)
	si, ok := x.many[string(*x.buf)]
	return si, ok
}

// put records si as the state of key, which get does not find.
func (x *keyIndex) put(key []dms.Datum, si int) {
	if x.direct {
		x.one[x.direct1(key)] = si
		return
	}
	*x.buf = encodeKey(x.l, (*x.buf)[:0], key)
	x.many[string(*x.buf)] = si
}
