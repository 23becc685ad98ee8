package sink

import (
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// TestKeyIndexAgreesWithEncodedKeys: for every key type, two converted values share a state in
// the index exactly when their AppendKey encodings are equal, whether the index keeps the key
// directly or encoded.
func TestKeyIndexAgreesWithEncodedKeys(t *testing.T) {
	dec := iceberg.DecimalTypeOf(12, 2)
	cases := []struct {
		typ    iceberg.Type
		direct bool
		texts  []string
	}{
		{iceberg.PrimitiveTypes.Int32, true, []string{"1", "-1", "2147483647", "0", "1"}},
		{iceberg.PrimitiveTypes.Int64, true, []string{"1", "-1", "9223372036854775807", "1"}},
		{iceberg.PrimitiveTypes.Date, true, []string{"2024-01-01", "2024-01-02", "2024-01-01"}},
		{iceberg.PrimitiveTypes.Timestamp, true, []string{"2024-01-01 00:00:00", "2024-01-01 00:00:00.000001", "2024-01-01 00:00:00"}},
		{dec, true, []string{"1.00", "1", "-1.00", "99999999.99", "0.01"}},
		{iceberg.PrimitiveTypes.String, true, []string{"a", "", "b", "a", "\u00e9"}},
		{iceberg.PrimitiveTypes.Float64, false, []string{"1.5", "-0", "0", "1.5"}},
		{iceberg.PrimitiveTypes.Bool, false, []string{"true", "false", "true"}},
	}
	for _, c := range cases {
		t.Run(c.typ.String(), func(t *testing.T) {
			l := &layout{names: []string{"k"}, types: []iceberg.Type{c.typ}, keyIdx: []int{0}}
			var buf []byte
			x := newKeyIndex(l, 0, &buf)
			if (x.kind != directNone) != c.direct {
				t.Fatalf("direct = %v, want %v", x.kind != directNone, c.direct)
			}
			var keys [][]dms.Datum
			for _, s := range c.texts {
				kind := change.KindString
				if c.typ == iceberg.PrimitiveTypes.Bool {
					kind = change.KindBool
				}
				d, err := dms.Convert(c.typ, change.Value{Kind: kind, Text: s})
				if err != nil {
					t.Fatalf("convert %q: %v", s, err)
				}
				keys = append(keys, []dms.Datum{d})
			}
			keys = append(keys, []dms.Datum{{Null: true}})
			enc := map[string]int{}
			for i, k := range keys {
				e := string(encodeKey(l, nil, k))
				want, seen := enc[e]
				got, found := x.get(k)
				if found != seen || (seen && got != want) {
					t.Fatalf("key %d (%+v): index has (%d, %v), encoded keys (%d, %v)", i, k[0], got, found, want, seen)
				}
				if !seen {
					enc[e] = i
					x.put(k, i)
				}
			}
		})
	}
}
