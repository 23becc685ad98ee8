package sink

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// flakyCatalog fails the first loads and creates of tables the way a catalog server behind a
// load balancer does now and then: a refused request (5xx), and a create that the server
// carried out while its answer was lost.
type flakyCatalog struct {
	catalog.Catalog
	mu        sync.Mutex
	loadFails int // LoadTable calls still to fail
	loadHangs int // LoadTable calls still to hang until their context ends (no answer)
	creates   int
	loads     int
}

var errInjected = errors.New("ServiceFailureException: injected (503)")

func (c *flakyCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	c.mu.Lock()
	c.loads++
	fail := c.loadFails > 0
	if fail {
		c.loadFails--
	}
	hang := !fail && c.loadHangs > 0
	if hang {
		c.loadHangs--
	}
	c.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Catalog.LoadTable(ctx, ident)
}

func (c *flakyCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	c.mu.Lock()
	c.creates++
	first := c.creates == 1
	c.mu.Unlock()
	tbl, err := c.Catalog.CreateTable(ctx, ident, sc, opts...)
	if err == nil && first {
		return nil, errors.New("Post \"http://catalog/v1/namespaces/shop/tables\": read: connection reset by peer") // created, answer lost
	}
	return tbl, err
}

// TestOpenSurvivesTransientCatalogErrors: a table writer that meets a refused load and a create
// whose answer was lost tries again in process (the create then finds the table), instead of
// stopping the service on the first catalog error (found by the dependency-fault test through
// the REST catalog: one injected 503 on a load stopped the worker).
func TestOpenSurvivesTransientCatalogErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fc := &flakyCatalog{loadFails: 2}
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}),
		withCatalogWrap(func(c catalog.Catalog) catalog.Catalog { fc.Catalog = c; return fc }))
	h.submit("s0", 1, change.OpInsert, "users", []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatalf("flush after transient catalog errors: %v", err)
	}
	rows, _ := scanRows(t, h.cat, "users")
	if got := strings.Join(rows, ";"); got != "id=1,name=a,amount=null;id=2,name=b,amount=null" {
		t.Fatalf("rows %q", got)
	}
	fc.mu.Lock()
	if fc.creates != 1 || fc.loads < 4 {
		t.Fatalf("creates %d loads %d: want one create (the lost one) and the loads tried again", fc.creates, fc.loads)
	}
	fc.mu.Unlock()
	h.close()

	// A restart: the table exists, and the first loads of it fail.
	fc2 := &flakyCatalog{loadFails: 3}
	h = newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}),
		withCatalogWrap(func(c catalog.Catalog) catalog.Catalog { fc2.Catalog = c; return fc2 }))
	h.submit("s0", 3, change.OpInsert, "users", []change.Column{col("id", "3"), col("name", "'c'")}, nil)
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatalf("flush after transient catalog errors on an existing table: %v", err)
	}
	rows, _ = scanRows(t, h.cat, "users")
	if got := strings.Join(rows, ";"); !strings.HasSuffix(got, "id=3,name=c,amount=null") || fc2.creates != 0 {
		t.Fatalf("rows %q, creates %d", got, fc2.creates)
	}
}

// A catalog that accepts the table load and never answers (no request timeout in iceberg-go's
// REST client or the AWS SDK) must not hold the writer for ever: each load of open is bounded by
// sink.commit_timeout and tried again.
func TestOpenBoundsAnUnansweredLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedUsers(t, dir)
	fc := &flakyCatalog{loadHangs: 2}
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}),
		withConfig(func(c *Config) { c.CommitTimeout = 200 * time.Millisecond }),
		withCatalogWrap(func(c catalog.Catalog) catalog.Catalog { fc.Catalog = c; return fc }))
	h.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.s.Flush(ctx); err != nil {
		t.Fatalf("flush after two unanswered loads: %v", err)
	}
	rows, _ := scanRows(t, h.cat, "users")
	if len(rows) != 2 {
		t.Fatalf("rows %v", rows)
	}
	h.close()
}

// hangingCommits is a catalog whose first commits are accepted and never answered: they hang
// until their context ends (the commit is not carried out).
type hangingCommits struct {
	catalog.Catalog
	mu    sync.Mutex
	hangs int
}

func (c *hangingCommits) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	c.mu.Lock()
	hang := c.hangs > 0
	if hang {
		c.hangs--
	}
	c.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, ups)
}

func (c *hangingCommits) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil // commits through c
}

func (c *hangingCommits) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	tbl, err := c.Catalog.CreateTable(ctx, ident, sc, opts...)
	if err != nil {
		return nil, err
	}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c), nil
}

// The dead-letter table's commits are bounded by sink.commit_timeout like a table writer's: a
// commit that is never answered is tried again, and the dead letter lands once.
func TestDeadLetterCommitBoundsAnUnansweredCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(t.TempDir())
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	hc := &hangingCommits{Catalog: cat, hangs: 2}
	d := NewTableDeadLetters(hc, cfg.DeadLetters, 5, nil, nil)
	d.attemptTimeout = 200 * time.Millisecond
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.DeadLetter(dctx, change.DeadLetter{Stream: "st", Shard: "s0", Seq: "1", Reason: "bad", Raw: []byte("x")}); err != nil {
		t.Fatalf("dead letter after two unanswered commits: %v", err)
	}
	rows, err := ReadDeadLetters(ctx, cat, d.Ident())
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, err %v", rows, err)
	}
	d.Close()
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("dead-letter loop: %v", err)
	}
}

// A control record for a table that exists loads it (w.load, never creating it) before it
// applies: refused loads there are tried again in process too, and the change lands.
func TestControlLoadSurvivesTransientCatalogErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	def := "id*:INT4 name:WSTRING"
	h := newHarness(t, dir)
	h.ctl("c", 1, "items", "create-table", def)
	h.flush()
	h.close()
	fc := &flakyCatalog{loadFails: 2}
	h = newHarness(t, dir, withCatalogWrap(func(c catalog.Catalog) catalog.Catalog { fc.Catalog = c; return fc }))
	h.ctl("c", 2, "items", "add-column", def+" tier:WSTRING")
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatalf("flush after transient catalog errors on the control record's load: %v", err)
	}
	tbl := loadTable(t, h, "shop", "items")
	if _, ok := tbl.Schema().FindFieldByName("tier"); !ok {
		t.Fatalf("column tier not added: %s", tbl.Schema())
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.loads < 3 || fc.creates != 0 {
		t.Fatalf("loads %d creates %d: want the failed loads tried again and no create", fc.loads, fc.creates)
	}
}
