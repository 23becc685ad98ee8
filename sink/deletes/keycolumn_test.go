package deletes

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
)

// A cached column yields exactly the rows whose key is wanted, with their positions in the file,
// as a visit of every row would: with null keys left out (their positions skipped), duplicate
// keys, a want list shorter and longer than the column, and a column already in key order
// (kept without positions).
func TestKeyColumnLooksUpKeys(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	type row struct{ key, pos int64 }
	for _, tc := range []struct {
		name         string
		rows, wanted int
		sorted       bool
	}{
		{"few wanted", 5000, 40, false},
		{"more wanted than rows", 300, 2000, false},
		{"in key order", 5000, 200, true},
	} {
		var keys []int64
		var pos []uint32
		var rows []row
		for i := 0; i < tc.rows; i++ {
			if !tc.sorted && i%17 == 3 {
				continue // a null key: not given
			}
			k := int64(rnd.IntN(3 * tc.rows)) // some keys twice
			if tc.sorted {
				k = int64(2 * i)
			}
			keys, pos = append(keys, k), append(pos, uint32(i))
			rows = append(rows, row{k, int64(i)})
		}
		want := make([]int64, tc.wanted)
		for i := range want {
			want[i] = int64(rnd.IntN(3 * tc.rows))
		}
		slices.Sort(want)
		want = slices.Compact(want)
		col := newKeyColumn(keyColumnID{path: "f", field: 1}, keys, pos)
		if tc.sorted != (col.pos == nil) {
			t.Fatalf("%s: positions kept %v, want %v", tc.name, col.pos != nil, !tc.sorted)
		}
		var got, exp []row
		col.lookup(want, func(key, pos int64) { got = append(got, row{key, pos}) })
		for _, r := range rows {
			if _, ok := slices.BinarySearch(want, r.key); ok {
				exp = append(exp, r)
			}
		}
		byPos := func(a, b row) int { return cmp.Compare(a.pos, b.pos) }
		slices.SortFunc(got, byPos)
		if len(exp) == 0 || !slices.Equal(got, exp) {
			t.Fatalf("%s: looked up %d rows, want %d", tc.name, len(got), len(exp))
		}
	}
}

// put evicts the least recently used columns to stay within the bound, and a hit refreshes a
// column's place; a column used within activeFor is not evicted (the new one is not cached).
func TestKeyCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	col := func(path string, n int) *keyColumn {
		return &keyColumn{id: keyColumnID{path: path, field: 1}, keys: make([]int64, n)}
	}
	a, b, c := col("a", 100), col("b", 100), col("c", 100) // 864 bytes each
	cache := NewKeyCache(2 * a.bytes())
	clock := time.Unix(1000, 0)
	cache.now = func() time.Time { return clock }
	cache.put(a)
	cache.put(b)
	clock = clock.Add(activeFor)
	if cache.get(a.id) == nil { // a is now the most recently used
		t.Fatal("a not cached")
	}
	cache.put(c) // evicts b, unused for activeFor
	if cache.get(b.id) != nil || cache.get(a.id) == nil || cache.get(c.id) == nil {
		t.Fatal("want b evicted, a and c cached")
	}
	if held, _, _ := cache.Stats(); held != 2*a.bytes() {
		t.Fatalf("held %d, want %d", held, 2*a.bytes())
	}
	cache.put(col("big", 1000)) // larger than the bound: not cached, nothing evicted
	if cache.get(keyColumnID{path: "big", field: 1}) != nil || cache.get(a.id) == nil {
		t.Fatal("a column above the bound was cached or evicted others")
	}
	clock = clock.Add(activeFor - time.Second)
	cache.put(b) // a and c were used a second ago: b is not cached
	if cache.get(b.id) != nil || cache.get(a.id) == nil || cache.get(c.id) == nil {
		t.Fatal("a column in use was evicted for another")
	}
}

// Probes that visit more columns than the bound holds, in turn (every commit probes a table's
// files in the same order), keep hitting the cached part: least-recently-used eviction would
// drop each column just before its next probe and read every file every time.
func TestKeyCacheKeepsItsWorkingSet(t *testing.T) {
	t.Parallel()
	cache := NewKeyCache(3 * (&keyColumn{keys: make([]int64, 100)}).bytes())
	clock := time.Unix(1000, 0)
	cache.now = func() time.Time { return clock }
	paths := []string{"a", "b", "c", "d", "e"}
	for round := 0; round < 4; round++ {
		clock = clock.Add(time.Second)
		for _, p := range paths {
			id := keyColumnID{path: p, field: 1}
			if cache.get(id) == nil {
				cache.put(&keyColumn{id: id, keys: make([]int64, 100)})
			}
		}
	}
	_, hits, reads := cache.Stats()
	if hits != 3*3 || reads != 5+3*2 {
		t.Fatalf("%d hits, %d reads over 4 rounds of 5 columns with room for 3; want 9 and 11", hits, reads)
	}
}

// BenchmarkKeyColumnLookup is a conversion's probe of one cached 1M-row column for the keys of
// five 1,000-change commits: the sorted lookup against a visit of every row through the
// scope's bit set (the probe before 2026-12-06).
func BenchmarkKeyColumnLookup(b *testing.B) {
	const rows, wanted = 1_000_000, 5000
	rnd := rand.New(rand.NewPCG(3, 4))
	keys, pos := make([]int64, rows), make([]uint32, rows)
	for i := range keys {
		keys[i], pos[i] = rnd.Int64N(1<<40), uint32(i)
	}
	sc := newKeyScope()
	for range wanted {
		sc.intSeq[keys[rnd.IntN(rows)]] = 2
	}
	sc.index(iceberg.PrimitiveTypes.Int64)
	fileOrder := slices.Clone(keys)
	col := newKeyColumn(keyColumnID{path: "f", field: 1}, keys, pos)
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			n := 0
			col.lookup(sc.ints, func(key, pos int64) { n++ })
			if n < wanted*9/10 {
				b.Fatalf("%d rows found", n)
			}
		}
	})
	b.Run("every-row", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, k := range fileOrder {
				if sc.seqOfInt(k) > 1 {
					n++
				}
			}
			if n < wanted*9/10 {
				b.Fatalf("%d rows found", n)
			}
		}
	})
}
