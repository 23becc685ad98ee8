package change

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// randomPos draws source positions as DMS writes them, some records with the transaction
// details and some without (only transaction-id), as a task mixing both would.
func randomPos(r *rand.Rand) SourcePos {
	tx := fmt.Sprint(100 + r.IntN(20))
	if r.IntN(2) == 0 {
		return SourcePos{TxID: tx}
	}
	lsn := 0x3000000 + r.IntN(40)
	return SourcePos{CommitTS: fmt.Sprintf("2025-06-01T00:00:0%d.000000Z", r.IntN(3)), TxID: tx,
		TxRecord: fmt.Sprint(1 + r.IntN(3)), Position: fmt.Sprintf("00000002/%08X.1.00000002/%08X", lsn, lsn)}
}

// Order is a total order: antisymmetric and transitive over positions with and without the
// transaction details, where Compare is not (the ordering guard's gates use Order, so that
// workers cannot wait for each other in a cycle).
func TestSourcePosOrderIsTotal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	pos := make([]SourcePos, 60)
	for i := range pos {
		pos[i] = randomPos(r)
	}
	compareCycles := 0
	for i := range pos {
		for j := range pos {
			a, b := &pos[i], &pos[j]
			if a.Order(b) != -b.Order(a) {
				t.Fatalf("Order not antisymmetric: %+v, %+v", *a, *b)
			}
			for k := range pos {
				c := &pos[k]
				if a.Order(b) < 0 && b.Order(c) < 0 && a.Order(c) >= 0 {
					t.Fatalf("Order not transitive: %+v < %+v < %+v", *a, *b, *c)
				}
				if a.Compare(b) < 0 && b.Compare(c) < 0 && c.Compare(a) < 0 {
					compareCycles++
				}
			}
		}
	}
	if compareCycles == 0 {
		t.Fatal("Compare has no cycle on these positions: the test does not show why Order exists")
	}
	// With every field present, Order agrees with Compare wherever Compare decides.
	for i := range pos {
		for j := range pos {
			a, b := &pos[i], &pos[j]
			if a.CommitTS == "" || b.CommitTS == "" || a.TxID == b.TxID {
				continue
			}
			if c := a.Compare(b); c != 0 && c != a.Order(b) {
				t.Fatalf("full positions %+v, %+v: Compare %d, Order %d", *a, *b, c, a.Order(b))
			}
		}
	}
}
