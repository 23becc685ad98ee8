package checkpoint_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

func TestFairShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ open, workers, floor, ceil int }{
		{16, 3, 5, 6}, {16, 4, 4, 4}, {64, 1, 64, 64}, {3, 4, 0, 1}, {0, 2, 0, 0}, {5, 0, 0, 0},
	} {
		if f, cl := checkpoint.FairShare(c.open, c.workers); f != c.floor || cl != c.ceil {
			t.Errorf("FairShare(%d, %d) = %d, %d, want %d, %d", c.open, c.workers, f, cl, c.floor, c.ceil)
		}
	}
}

func shardIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("shardId-%012d", i)
	}
	return ids
}

// owned returns rows giving the shards to the workers by counts, in order, plus presence rows.
func owned(now time.Time, ids []string, counts map[string]int) []checkpoint.LeaseRow {
	var rows []checkpoint.LeaseRow
	i := 0
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		rows = append(rows, checkpoint.LeaseRow{Exists: true, Worker: w, WorkerUntil: now.Add(time.Minute)})
		for range counts[w] {
			rows = append(rows, checkpoint.LeaseRow{Exists: true, Shard: ids[i], Owner: w, Epoch: 1, LeaseTimeout: now.Add(time.Minute)})
			i++
		}
	}
	return rows
}

func TestComputeShare(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ids := shardIDs(16)
	// 6/5/5 is balanced: no hand-off.
	sh := checkpoint.ComputeShare("A", checkpoint.Snapshot{Now: now, Open: ids, Rows: owned(now, ids, map[string]int{"A": 6, "B": 5, "C": 5})})
	if sh.Floor != 5 || sh.Ceil != 6 || sh.Free != 0 || len(sh.Plan) != 0 || len(sh.Workers) != 3 {
		t.Fatalf("6/5/5: %+v", sh)
	}
	// A fourth worker joins with none: each of the three gives one (6-0, 5-1, 5-2 >= 2).
	rows := append(owned(now, ids, map[string]int{"A": 6, "B": 5, "C": 5}), checkpoint.LeaseRow{Exists: true, Worker: "D", WorkerUntil: now.Add(time.Minute)})
	sh = checkpoint.ComputeShare("B", checkpoint.Snapshot{Now: now, Open: ids, Rows: rows})
	if sh.Floor != 4 || sh.Ceil != 4 || !maps.Equal(sh.Plan, map[string]string{"A": "D", "B": "D", "C": "D"}) {
		t.Fatalf("a fourth worker joined: %+v", sh)
	}
	// The plan is the same whoever computes it.
	if other := checkpoint.ComputeShare("D", checkpoint.Snapshot{Now: now, Open: ids, Rows: rows}); !maps.Equal(other.Plan, sh.Plan) {
		t.Fatalf("D's plan %v, B's %v", other.Plan, sh.Plan)
	}
	// A free shard: no hand-off (the worker below its share takes it).
	free := slices.Clone(rows)
	free[1].Owner = ""
	if sh := checkpoint.ComputeShare("A", checkpoint.Snapshot{Now: now, Open: ids, Rows: free}); sh.Free != 1 || len(sh.Plan) != 0 {
		t.Fatalf("with a free shard: %+v", sh)
	}
	// A reservation counts for its taker, and its giver is busy (one hand-off at a time).
	res := slices.Clone(rows)
	res[1].HandoffTo, res[1].HandoffUntil = "D", now.Add(time.Minute) // A's first shard
	sh = checkpoint.ComputeShare("A", checkpoint.Snapshot{Now: now, Open: ids, Rows: res})
	if sh.Held["D"] != 1 || sh.Held["A"] != 5 || sh.Plan["A"] != "" || sh.Plan["B"] != "D" || sh.Plan["C"] != "D" {
		t.Fatalf("with A's hand-off under way: %+v", sh)
	}
	// An expired presence row is no live worker; a dead worker's expired leases are free.
	dead := owned(now, ids, map[string]int{"A": 8, "B": 8})
	for i := range dead {
		if dead[i].Worker == "B" {
			dead[i].WorkerUntil = now.Add(-time.Second)
		}
		if dead[i].Owner == "B" {
			dead[i].LeaseTimeout = now.Add(-time.Second)
		}
	}
	if sh := checkpoint.ComputeShare("A", checkpoint.Snapshot{Now: now, Open: ids, Rows: dead}); len(sh.Workers) != 1 || sh.Ceil != 16 || sh.Free != 8 {
		t.Fatalf("B dead: %+v", sh)
	}
}

// sim is a cluster of workers over one MemLeaseTable, each with its Balance, that acts as the
// KCL (one lease per round) and the consumer's hand-off (reserve, then release) would.
type sim struct {
	tbl     *checkpoint.MemLeaseTable
	ids     []string
	workers map[string]*simWorker
}

type simWorker struct {
	id  string
	st  *checkpoint.MemLeases
	bal *checkpoint.Balance
}

func (s *sim) join(id string) {
	w := &simWorker{id: id, st: s.tbl.Worker(id, time.Hour), bal: checkpoint.NewBalance(id, time.Hour)}
	w.st.WithBalance(w.bal)
	s.workers[id] = w
}

// round: every worker announces, observes, hands off what its plan says (released at once:
// the drain is the consumer's), and takes at most one lease, as one KCL round does.
func (s *sim) round(t *testing.T) {
	t.Helper()
	for _, w := range s.workers {
		if err := w.st.Announce(t.Context(), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.workers)) {
		w := s.workers[id]
		rows, _ := w.st.Rows(t.Context())
		sh := w.bal.Observe(checkpoint.Snapshot{Now: time.Now(), Open: s.ids, Rows: rows})
		if taker := sh.Plan[id]; taker != "" {
			for _, shard := range s.ids {
				if e := w.st.Epoch(shard); e != 0 {
					if err := w.st.Reserve(t.Context(), shard, e, taker, time.Now().Add(time.Minute)); err != nil {
						t.Fatal(err)
					}
					w.bal.Release(shard)
					if err := w.st.GetLease(&par.ShardStatus{ID: shard, Mux: &sync.RWMutex{}}, id); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
						t.Fatalf("renewal of a released lease: %v", err)
					}
					if err := w.st.RemoveLeaseOwner(shard); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		}
		for _, shard := range s.ids {
			if w.st.Epoch(shard) != 0 {
				continue
			}
			if err := w.st.GetLease(&par.ShardStatus{ID: shard, Mux: &sync.RWMutex{}}, id); err == nil {
				break
			}
		}
	}
}

func (s *sim) counts() map[string]int {
	out := map[string]int{}
	for id, w := range s.workers {
		out[id] = 0
		for _, shard := range s.ids {
			if w.st.Epoch(shard) != 0 {
				out[id]++
			}
		}
	}
	return out
}

func balanced(counts map[string]int, open int) bool {
	floor, ceil := checkpoint.FairShare(open, len(counts))
	total := 0
	for _, n := range counts {
		if n < floor || n > ceil {
			return false
		}
		total += n
	}
	return total == open
}

// A worker that joins a balanced cluster gets its share through hand-offs, and nothing is held
// twice.
func TestJoiningWorkerGetsItsShare(t *testing.T) {
	t.Parallel()
	s := &sim{tbl: checkpoint.NewMemLeaseTable(), ids: shardIDs(16), workers: map[string]*simWorker{}}
	for _, id := range []string{"A", "B", "C"} {
		s.join(id)
	}
	n := 0
	for ; n < 40 && !balanced(s.counts(), 16); n++ {
		s.round(t)
	}
	if !balanced(s.counts(), 16) {
		t.Fatalf("three workers after %d rounds: %v", n, s.counts())
	}
	s.join("D")
	for n = 0; n < 40 && !balanced(s.counts(), 16); n++ {
		s.round(t)
	}
	if got := s.counts(); !balanced(got, 16) || got["D"] != 4 {
		t.Fatalf("after D joined, %d rounds: %v", n, got)
	}
	handoffs := int64(0)
	for _, w := range s.workers {
		handoffs += w.bal.Handoffs()
	}
	if handoffs < 4 || handoffs > 6 {
		t.Fatalf("%d hand-offs to give D its 4 shards", handoffs)
	}
	// D leaves (its presence and leases lapse): the three take its shards back.
	delete(s.workers, "D")
	s.tbl.Delete(checkpoint.PresenceKey("D"))
	for _, id := range s.ids {
		if r, _ := s.workers["A"].st.Get(t.Context(), id); r.Owner == "D" {
			s.tbl.Expire(id)
		}
	}
	for n = 0; n < 40 && !balanced(s.counts(), 16); n++ {
		s.round(t)
	}
	if !balanced(s.counts(), 16) {
		t.Fatalf("after D left, %d rounds: %v", n, s.counts())
	}
}
