package maintenance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// unansweredCommits is a catalog whose next commits are never answered: the first len(landing)
// commits wait for their context to end, after making the commit land first where landing says
// so (an answer lost after the commit took effect).
type unansweredCommits struct {
	catalog.Catalog
	mu      sync.Mutex
	landing []bool
	hung    int
}

func (c *unansweredCommits) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	c.mu.Lock()
	hang, land := len(c.landing) > 0, false
	if hang {
		land, c.landing = c.landing[0], c.landing[1:]
		c.hung++
	}
	c.mu.Unlock()
	if !hang {
		return c.Catalog.CommitTable(ctx, ident, reqs, ups)
	}
	if land {
		if _, _, err := c.Catalog.CommitTable(context.WithoutCancel(ctx), ident, reqs, ups); err != nil {
			return nil, "", err
		}
	}
	<-ctx.Done()
	return nil, "", ctx.Err()
}

func (c *unansweredCommits) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil // commits through c
}

// A maintenance commit that the catalog never answers is bounded by CommitTimeout
// (sink.commit_timeout) and tried again: one that did not land is committed by the next
// attempt, one that landed is recognised, and the compaction ends with the table's rows intact.
// Not parallel: every other commit of the run must land within its 300 ms bound, which other
// tests on the same cores would make it miss.
func TestMaintenanceCommitBoundsAnUnansweredCommit(t *testing.T) {
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 4)
	for round, landing := range [][]bool{{false}, {true}} {
		cat := &unansweredCommits{Catalog: h.cat, landing: landing}
		cfg := testConfig()
		cfg.CommitTimeout = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep, err := maintenance.RunTable(ctx, cat, usersIdent, cfg, maintenance.RunOptions{IgnoreLease: true, SkipOrphans: true})
		cancel()
		if err != nil {
			t.Fatalf("landing %v: maintenance with an unanswered commit: %v", landing, err)
		}
		if cat.hung != 1 {
			t.Fatalf("landing %v: %d commits left unanswered, want 1", landing, cat.hung)
		}
		rows, after := scanRows(t, h.cat)
		sinktest.Eq(t, rows, m.want()...)
		if _, deletes := maintenance.SummaryCounts(after.CurrentSnapshot()); !rep.Compacted || deletes != 0 {
			t.Fatalf("landing %v: compacted %v, %d delete files left: %+v", landing, rep.Compacted, deletes, rep)
		}
		for b := 1; b <= 4; b++ { // new deletes for the next round
			m.batch(10*(round+1)+b, 100)
		}
	}
	h.close()
}
