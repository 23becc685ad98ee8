package deletes

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"
)

// The bit set in front of a scope's integer keys may let a key through that is not deleted (the
// map answers then), but never stops one that is: a deleted row missed is a row the conversion
// would leave visible once the equality delete is dropped.
func TestKeyScopeIntegerKeys(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 7, 1000, 50_000} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		s := newKeyScope()
		for range n {
			s.intSeq[rng.Int64()-rng.Int64()] = 1 + rng.Int64N(100)
		}
		s.index(iceberg.Int64Type{})
		if len(s.ints) != len(s.intSeq) {
			t.Fatalf("n=%d: %d sorted keys for %d", n, len(s.ints), len(s.intSeq))
		}
		for k, seq := range s.intSeq {
			if got := s.seqOfInt(k); got != seq {
				t.Fatalf("n=%d: key %d: seq %d, want %d", n, k, got, seq)
			}
		}
		passed, tries := 0, 100_000
		for range tries {
			k := rng.Int64()
			if _, ok := s.intSeq[k]; ok {
				continue
			}
			if s.seqOfInt(k) != 0 {
				t.Fatalf("n=%d: key %d not deleted, got a seq", n, k)
			}
			if s.mayHoldInt(k) {
				passed++
			}
		}
		// 16 bits per key or more: about 1 in 16 absent keys reaches the map.
		if passed > tries/8 {
			t.Errorf("n=%d: %d of %d absent keys passed the bit set", n, passed, tries)
		}
	}
	var none *keyScope
	if none.seqOfInt(5) != 0 || !none.empty() {
		t.Error("a nil scope holds keys")
	}
	if s := newKeyScope(); !s.empty() || s.seqOfInt(0) != 0 {
		t.Error("an empty scope holds keys")
	}
}
