package maintenance

import (
	"slices"
	"testing"
)

// A cached column with null keys yields each non-null key at its position in the file, as
// probeInts does, including nulls past the first word of the validity bits and trailing nulls.
func TestKeyColumnSkipsNullKeys(t *testing.T) {
	col := &keyColumn{}
	nulls := map[int]bool{0: true, 5: true, 63: true, 64: true, 130: true}
	const rows = 140 // rows 130..139: 130 null, the rest set
	for i := 0; i < rows; i++ {
		if nulls[i] {
			col.setNull(i)
			col.keys = append(col.keys, 0)
			continue
		}
		col.keys = append(col.keys, int64(1000+i))
	}
	var got, want []int64
	col.each(func(key, pos int64) {
		if key != 1000+pos {
			t.Fatalf("key %d at position %d", key, pos)
		}
		got = append(got, pos)
	})
	for i := 0; i < rows; i++ {
		if !nulls[i] {
			want = append(want, int64(i))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("positions %v, want %v", got, want)
	}
	// Without nulls there are no validity bits and every row is yielded.
	plain := &keyColumn{keys: []int64{7, 8, 9}}
	n := 0
	plain.each(func(key, pos int64) { n++ })
	if n != 3 || plain.valid != nil {
		t.Fatalf("%d keys yielded, validity %v", n, plain.valid)
	}
}

// put evicts the least recently used columns to stay within the bound, and a hit refreshes a
// column's place.
func TestKeyCacheEvictsLeastRecentlyUsed(t *testing.T) {
	col := func(path string, n int) *keyColumn {
		return &keyColumn{id: keyColumnID{path, 1}, keys: make([]int64, n)}
	}
	a, b, c := col("a", 100), col("b", 100), col("c", 100) // 864 bytes each
	cache := NewKeyCache(2 * a.bytes())
	cache.put(a)
	cache.put(b)
	if cache.get(a.id) == nil { // a is now the most recently used
		t.Fatal("a not cached")
	}
	cache.put(c) // evicts b
	if cache.get(b.id) != nil || cache.get(a.id) == nil || cache.get(c.id) == nil {
		t.Fatal("want b evicted, a and c cached")
	}
	if cache.Held() != 2*a.bytes() {
		t.Fatalf("held %d, want %d", cache.Held(), 2*a.bytes())
	}
	cache.put(col("big", 1000)) // larger than the bound: not cached, nothing evicted
	if cache.get(keyColumnID{"big", 1}) != nil || cache.get(a.id) == nil {
		t.Fatal("a column above the bound was cached or evicted others")
	}
}
