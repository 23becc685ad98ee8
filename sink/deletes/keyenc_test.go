package deletes

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

func enc(t iceberg.Type, d dms.Datum) string { return string(AppendKey(nil, t, d)) }

// Values of one type encode in their order (so equal exactly when equal): integers with
// negative ones, decimals, timestamps, floats, strings and binary with NUL bytes and prefixes,
// UUID text among itself; int and long encode alike (a promotion keeps the keys).
func TestKeyEncodingOrdersEachType(t *testing.T) {
	t.Parallel()
	f64 := func(f float64) dms.Datum { return dms.Datum{I: int64(math.Float64bits(f))} }
	dec := func(hi int64, lo uint64) dms.Datum { return dms.Datum{Hi: hi, I: int64(lo)} }
	s := func(v string) dms.Datum { return dms.Datum{S: v} }
	for _, tc := range []struct {
		typ  iceberg.Type
		vals []dms.Datum // ascending
	}{
		{iceberg.PrimitiveTypes.Int64, []dms.Datum{{I: math.MinInt64}, {I: -2}, {I: -1}, {I: 0}, {I: 1}, {I: math.MaxInt64}}},
		{iceberg.PrimitiveTypes.TimestampTz, []dms.Datum{{I: -86400e6}, {I: 0}, {I: 1700000000e6}}},
		{iceberg.DecimalTypeOf(38, 2), []dms.Datum{dec(-1, 0), dec(-1, math.MaxUint64), dec(0, 0), dec(0, 5), dec(1, 0)}},
		{iceberg.PrimitiveTypes.Float64, []dms.Datum{f64(math.Inf(-1)), f64(-2.5), f64(math.Copysign(0, -1)), f64(0), f64(1e-9), f64(3), f64(math.Inf(1))}},
		{iceberg.PrimitiveTypes.String, []dms.Datum{s(""), s("\x00"), s("\x00\x00"), s("\x00a"), s("a"), s("a\x00"), s("ab"), s("b"), s("\xff")}},
		{iceberg.PrimitiveTypes.Binary, []dms.Datum{s(""), s("\x00"), s("\x01"), s("\x01\x00")}},
		{iceberg.PrimitiveTypes.String, []dms.Datum{s("00000000-0000-0000-0000-000000000000"), s("0a000000-0000-0000-0000-000000000000"),
			s("f0000000-0000-0000-0000-00000000000f")}},
	} {
		for i := 1; i < len(tc.vals); i++ {
			a, b := enc(tc.typ, tc.vals[i-1]), enc(tc.typ, tc.vals[i])
			if a >= b {
				t.Errorf("%v: %+v encodes %x, not below %+v's %x", tc.typ, tc.vals[i-1], a, tc.vals[i], b)
			}
		}
	}
	if enc(iceberg.PrimitiveTypes.Int32, dms.Datum{I: -7}) != enc(iceberg.PrimitiveTypes.Int64, dms.Datum{I: -7}) {
		t.Error("int and long values of -7 encode differently")
	}
	if enc(iceberg.PrimitiveTypes.Float32, dms.Datum{I: int64(math.Float32bits(1.5))}) != enc(iceberg.PrimitiveTypes.Float64, f64(1.5)) {
		t.Error("float and double values of 1.5 encode differently")
	}
}

// UUID text is packed into 16 bytes only in its canonical lower-case form: the upper-case and
// the malformed spellings of a UUID are other strings, so they stay distinct keys; the packed
// form decodes to the same text (the bound check of a string key uses it).
func TestKeyEncodingOfUUIDText(t *testing.T) {
	t.Parallel()
	str := iceberg.PrimitiveTypes.String
	lower := "4f1c2d3e-5f60-4a7b-8c9d-0e1f2a3b4c5d"
	for _, other := range []string{"4F1C2D3E-5F60-4A7B-8C9D-0E1F2A3B4C5D", "4f1c2d3e5f604a7b8c9d0e1f2a3b4c5d", "4f1c2d3e-5f60-4a7b-8c9d-0e1f2a3b4c5", "4f1c2d3e-5f60-4a7b-8c9d_0e1f2a3b4c5d"} {
		if enc(str, dms.Datum{S: other}) == enc(str, dms.Datum{S: lower}) {
			t.Errorf("%q encodes as %q", other, lower)
		}
		if got := decodeString(enc(str, dms.Datum{S: other})); got != other {
			t.Errorf("%q decodes as %q", other, got)
		}
	}
	e := enc(str, dms.Datum{S: lower})
	if len(e) != 17 || e[0] != tagUUIDText {
		t.Fatalf("%q encodes in %d bytes (tag %d), want 17 under the UUID text tag", lower, len(e), e[0])
	}
	if got := decodeString(e); got != lower {
		t.Fatalf("decodes as %q", got)
	}
	if got := decodeString(enc(str, dms.Datum{S: "a\x00b"})); got != "a\x00b" {
		t.Fatalf("a string with NUL decodes as %q", got)
	}
}

// Composite keys: column by column (the first column orders first), and no key of one column's
// value split differently collides with another ("a","bc" vs "ab","c"); NULL is its own value,
// sorting first and equal only to NULL.
func TestKeyEncodingOfCompositeKeysAndNull(t *testing.T) {
	t.Parallel()
	types := []iceberg.Type{iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String}
	key := func(i int64, a, b string) string {
		return string(AppendKeyOf(nil, types, []dms.Datum{{I: i}, {S: a}, {S: b}}))
	}
	if key(1, "a", "bc") == key(1, "ab", "c") || key(1, "a\x00", "b") == key(1, "a", "\x00b") {
		t.Fatal("values split differently encode alike")
	}
	asc := []string{key(-1, "z", "z"), key(1, "", "z"), key(1, "a", ""), key(1, "a", "b"), key(1, "b", ""), key(2, "", "")}
	if !slices.IsSorted(asc) {
		t.Fatal("composite keys do not sort column by column")
	}
	null := dms.Datum{Null: true}
	withNull := string(AppendKeyOf(nil, types, []dms.Datum{{I: 1}, null, {S: "x"}}))
	if withNull != string(AppendKeyOf(nil, types, []dms.Datum{{I: 1}, null, {S: "x"}})) || withNull >= key(1, "", "x") {
		t.Fatal("NULL does not equal NULL, or does not sort before every value")
	}
	for _, ty := range types {
		if enc(ty, null) == enc(ty, dms.Datum{}) {
			t.Errorf("%v: NULL encodes as the zero value", ty)
		}
	}
	if encodable([]iceberg.Type{iceberg.PrimitiveTypes.Int64, &iceberg.ListType{ElementID: 3, Element: iceberg.PrimitiveTypes.Int64}}) ||
		encodable(nil) || encodable([]iceberg.Type{iceberg.PrimitiveTypes.TimestampNs}) {
		t.Fatal("a nested, nanosecond or empty key is encodable")
	}
}

// An encoded column yields exactly the rows whose key is wanted, with their positions, as a visit
// of every row would: duplicate keys, keys that are prefixes of others, and want lists missing
// from the column.
func TestEncodedColumnLooksUpKeys(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	str := iceberg.PrimitiveTypes.String
	var data []byte
	var end, pos []uint32
	type row struct {
		key string
		pos int64
	}
	var rows []row
	word := func() string {
		return []string{"a", "ab", "abc", "b", "\x00", "", "zz"}[rnd.IntN(7)] + string(rune('a'+rnd.IntN(3)))
	}
	for i := 0; i < 2000; i++ {
		if i%13 == 5 {
			continue // a null key: not given
		}
		k := enc(str, dms.Datum{S: word()})
		data = append(data, k...)
		end, pos = append(end, uint32(len(data))), append(pos, uint32(i))
		rows = append(rows, row{k, int64(i)})
	}
	col := newEncColumn(data, end, pos)
	for i := 1; i < len(col.end); i++ {
		if bytes.Compare(col.key(i-1), col.key(i)) > 0 {
			t.Fatal("the column is not sorted")
		}
	}
	var want []string
	for i := 0; i < 8; i++ {
		want = append(want, enc(str, dms.Datum{S: word()}))
	}
	want = append(want, enc(str, dms.Datum{S: "missing"}))
	slices.Sort(want)
	want = slices.Compact(want)
	var got, exp []row
	col.lookup(want, func(key []byte, pos int64) { got = append(got, row{string(key), pos}) })
	for _, r := range rows {
		if _, ok := slices.BinarySearch(want, r.key); ok {
			exp = append(exp, r)
		}
	}
	byPos := func(s []row) { sort.Slice(s, func(i, j int) bool { return s[i].pos < s[j].pos }) }
	byPos(got)
	byPos(exp)
	if len(exp) == 0 || !slices.Equal(got, exp) {
		t.Fatalf("looked up %d rows, want %d", len(got), len(exp))
	}
	if n := col.bytes(); n != int64(len(data))+8*int64(len(end)) {
		t.Fatalf("column of %d key bytes and %d rows counts %d bytes", len(data), len(end), n)
	}
}

// BenchmarkEncodedColumn builds the cached column of a 1M-row file of UUID text keys (encoded,
// sorted), as the first probe of a file does.
func BenchmarkEncodedColumn(b *testing.B) {
	const rows = 1_000_000
	rnd := rand.New(rand.NewPCG(5, 6))
	str := iceberg.PrimitiveTypes.String
	var data []byte
	end, pos := make([]uint32, 0, rows), make([]uint32, 0, rows)
	for i := 0; i < rows; i++ {
		u := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rnd.Uint32(), rnd.IntN(1<<16), rnd.IntN(1<<12), rnd.IntN(1<<12), rnd.Int64N(1<<48))
		data = AppendKey(data, str, dms.Datum{S: u})
		end, pos = append(end, uint32(len(data))), append(pos, uint32(i))
	}
	b.ResetTimer()
	for range b.N {
		newEncColumn(data, end, pos)
	}
}
