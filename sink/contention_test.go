package sink

import (
	"sync"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// attemptsMetrics records the attempts of every data commit.
type attemptsMetrics struct {
	NopMetrics
	mu  sync.Mutex
	got []int
}

func (m *attemptsMetrics) Committed(info CommitInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, info.Attempts)
}

func (m *attemptsMetrics) last() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[len(m.got)-1]
}

// Two workers commit to one table in turn. Each stages on the table as its own last commit left
// it, so each loses its first attempt to the other's commit; after that lost race a writer
// refreshes the table before it stages, and its commits land at the first attempt.
func TestContendedWriterRefreshesBeforeItStages(t *testing.T) {
	dir := t.TempDir()
	ma, mb := &attemptsMetrics{}, &attemptsMetrics{}
	tables := withTables(map[string]TableConfig{"shop.users": usersDef})
	a := newHarness(t, dir, tables, withOptions(WithMetrics(ma)))
	b := newHarness(t, dir, tables, withOptions(WithMetrics(mb)))
	id := 0
	commitOn := func(h *harness, shard string) {
		t.Helper()
		id++
		v := string(rune('0' + id%10))
		h.submit(shard, id, change.OpInsert, "users", []change.Column{col("id", v+"0"), col("name", "'n'"), col("amount", v)}, nil)
		h.flush()
	}
	commitOn(a, "s0")
	commitOn(b, "s1")
	commitOn(a, "s0")
	commitOn(b, "s1")
	if ma.last() != 2 || mb.last() != 2 {
		t.Fatalf("attempts %v and %v: want each writer's second commit to lose its first attempt to the other's", ma.got, mb.got)
	}
	for range 2 {
		commitOn(a, "s0")
		commitOn(b, "s1")
		if ma.last() != 1 || mb.last() != 1 {
			t.Fatalf("attempts %v and %v: a writer that lost a race must refresh before it stages", ma.got, mb.got)
		}
	}
	rows, _ := scanRows(t, b.cat, "users")
	if len(rows) != 8 {
		t.Fatalf("rows %v, want 8", rows)
	}
	a.close()
	b.close()
}
