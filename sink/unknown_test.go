package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// unknownMetrics records the resolved unknown outcomes ("table resolution").
type unknownMetrics struct {
	NopMetrics
	mu  sync.Mutex
	got []string
}

func (m *unknownMetrics) CommitUnknown(table, resolution string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, table+" "+resolution)
}

func (m *unknownMetrics) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

// lossyCatalog does to the next commit that adds a snapshot what its next field says: "lose"
// forwards it and loses the answer (the commit landed, the writer cannot know), "refuse"
// answers 503 without forwarding, "" forwards it. before, if set, runs first (another writer
// committing in between).
type lossyCatalog struct {
	catalog.Catalog
	mu     sync.Mutex
	next   string
	before func()
}

// bind makes the table commit through c (iceberg-go commits through the catalog a table was
// loaded from).
func (c *lossyCatalog) bind(t *table.Table, err error) (*table.Table, error) {
	if err != nil {
		return nil, err
	}
	return table.New(t.Identifier(), t.Metadata(), t.MetadataLocation(), t.FS, c), nil
}

func (c *lossyCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return c.bind(c.Catalog.LoadTable(ctx, ident))
}

func (c *lossyCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	return c.bind(c.Catalog.CreateTable(ctx, ident, sc, opts...))
}

func (c *lossyCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	snapshot := slices.ContainsFunc(ups, func(u table.Update) bool { return u.Action() == table.UpdateAddSnapshot })
	c.mu.Lock()
	mode, before := "", (func())(nil)
	if snapshot {
		mode, before = c.next, c.before
		c.next, c.before = "", nil
	}
	c.mu.Unlock()
	if before != nil {
		before()
	}
	switch mode {
	case "refuse":
		return nil, "", errors.New("commit failed due to unknown reason: 503 Service Unavailable")
	case "lose":
		if _, _, err := c.Catalog.CommitTable(ctx, ident, reqs, ups); err != nil {
			return nil, "", err
		}
		return nil, "", errors.New("Post \"http://catalog/v1/namespaces/shop/tables/users\": read: connection reset by peer")
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, ups)
}

func (c *lossyCatalog) arm(mode string, before func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next, c.before = mode, before
}

// Every batch commit whose outcome was unknown is counted once, by how the refresh after it
// resolved it: a commit that landed while its answer was lost (landed), a 503 for a commit the
// catalog never applied (not_landed), a commit another worker made first with the same records
// (another_writer). A lost race with a definite answer is not an unknown outcome and is not
// counted. The table holds every row once.
func TestUnknownCommitOutcomesAreCounted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := &unknownMetrics{}
	lc := &lossyCatalog{}
	tables := withTables(map[string]TableConfig{"shop.users": usersDef})
	a := newHarness(t, dir, tables, withOptions(WithMetrics(m)),
		withCatalogWrap(func(c catalog.Catalog) catalog.Catalog { lc.Catalog = c; return lc }))
	b := newHarness(t, dir, tables)
	row := func(id int) []change.Column {
		return []change.Column{col("id", fmt.Sprint(id)), col("name", "'n'"), col("amount", "1")}
	}
	// The table exists before the first armed commit.
	a.submit("s0", 1, change.OpInsert, "users", row(1), nil)
	a.flush()

	lc.arm("lose", nil)
	a.submit("s0", 2, change.OpInsert, "users", row(2), nil)
	a.flush()
	lc.arm("refuse", nil)
	a.submit("s0", 3, change.OpInsert, "users", row(3), nil)
	a.flush()
	// Another worker (a's lease moved to b, say) commits the same record while a's commit
	// meets a 503.
	lc.arm("refuse", func() {
		b.submit("s0", 4, change.OpInsert, "users", row(4), nil)
		b.flush()
	})
	a.submit("s0", 4, change.OpInsert, "users", row(4), nil)
	a.flush()
	// A lost race: b commits first, then a's commit is refused by the catalog for the changed
	// table (a definite answer).
	lc.arm("", func() {
		b.submit("s1", 1, change.OpInsert, "users", row(5), nil)
		b.flush()
	})
	a.submit("s0", 5, change.OpInsert, "users", row(6), nil)
	a.flush()

	want := []string{"shop.users landed", "shop.users not_landed", "shop.users another_writer"}
	if got := m.list(); !slices.Equal(got, want) {
		t.Fatalf("unknown outcomes %q, want %q", got, want)
	}
	rows, _ := scanRows(t, a.cat, "users")
	if len(rows) != 6 {
		t.Fatalf("rows %v, want 6, each once", rows)
	}
	a.close()
	b.close()
}
