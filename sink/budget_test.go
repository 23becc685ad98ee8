package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// The sink under the process-wide byte budget (pkg/membudget), with the tests' readers doing
// what the shard processors do: admit a record's bytes, then submit it with an acknowledgement
// that releases them. Nothing here is timed: waits end on acknowledgements, and a generous
// deadline only tells a deadlock from progress.

// refusingCatalog refuses every commit to one table while broken is set.
type refusingCatalog struct {
	catalog.Catalog
	table   string
	broken  atomic.Bool
	refused atomic.Int64
}

// bind makes the table commit through c (iceberg-go commits through the catalog a table was
// loaded from).
func (c *refusingCatalog) bind(t *table.Table, err error) (*table.Table, error) {
	if err != nil {
		return nil, err
	}
	return table.New(t.Identifier(), t.Metadata(), t.MetadataLocation(), t.FS, c), nil
}

func (c *refusingCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return c.bind(c.Catalog.LoadTable(ctx, ident))
}

func (c *refusingCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	return c.bind(c.Catalog.CreateTable(ctx, ident, sc, opts...))
}

func (c *refusingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	if c.broken.Load() && strings.Join(ident, ".") == c.table {
		c.refused.Add(1)
		return nil, "", errors.New("503: the catalog refuses commits to this table")
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, ups)
}

// budgetReader submits events of its own account, one admission per event.
type budgetReader struct {
	t     *testing.T
	s     *Iceberg
	acct  *membudget.Account
	acked atomic.Int64
	shard string
	seq   int
}

func (r *budgetReader) Done(int) { r.acked.Add(1) }

func (r *budgetReader) submit(ctx context.Context, tbl string, size int) error {
	r.seq++
	raw := []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", size-10)))
	if err := r.acct.Acquire(ctx, int64(len(raw))); err != nil {
		return err
	}
	ev := &change.Event{Schema: "shop", Table: tbl, Op: change.OpInsert,
		Columns: []change.Column{col("id", fmt.Sprint(r.seq)), col("name", "'n'")},
		Meta:    change.Metadata{RecordType: "data", Operation: "insert"},
		Pos:     change.Position{Stream: "st", Shard: r.shard, Seq: fmt.Sprint(1000 + r.seq)}, Raw: raw}
	ev.Ack = &membudget.Ack{Inner: r, Account: r.acct, N: int64(len(raw))}
	return r.s.Submit(ctx, ev)
}

// waitFor fails the test when cond is still false after a minute (a deadlock, not a timing
// assertion); it polls, since acknowledgements come from the writers' goroutines.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("deadlocked: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var keyed = map[string]TableConfig{"shop.*": {PrimaryKey: []string{"id"}}}

// One table's commits keep failing (the catalog refuses them): its record keeps its bytes, the
// other table's records still flow through a budget far smaller than all of them (the reader
// blocks at the budget and resumes as commits release it), and once the catalog takes the
// commit again everything is released.
func TestBudgetOtherTablesFlowWhileOneTableCommitFails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(t.TempDir())
	cfg.Stream = "st"
	cfg.FlushInterval = 20 * time.Millisecond
	cfg.CommitRetries = 1_000_000 // keeps retrying for the whole test
	cfg.Tables = keyed
	cfg.Maintenance.Enabled = false
	base, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	cat := &refusingCatalog{Catalog: base, table: "shop.bad"}
	b := membudget.New(2000)
	s, err := New(cfg, cat, &memDLQ{}, WithMemoryBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("sink Run: %v", err)
		}
	}()
	bad := &budgetReader{t: t, s: s, acct: b.Account(), shard: "s-bad"}
	good := &budgetReader{t: t, s: s, acct: b.Account(), shard: "s-good"}
	// The bad table exists (created while the catalog still works), then its commits fail.
	if err := bad.submit(ctx, "bad", 100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bad table's first commit", func() bool { return bad.acked.Load() == 1 })
	cat.broken.Store(true)
	if err := bad.submit(ctx, "bad", 500); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a refused commit", func() bool { return cat.refused.Load() > 0 })
	const n = 100 // 100 × 100 bytes: five times the budget
	for range n {
		if err := good.submit(ctx, "good", 100); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the good table's records", func() bool { return good.acked.Load() == n })
	if bad.acked.Load() != 1 {
		t.Fatal("the refused record was acknowledged")
	}
	if b.Waits() == 0 {
		t.Fatal("the reader never waited for the budget: the test did not exercise it")
	}
	if got := b.Held(); got != 500 {
		t.Fatalf("budget holds %d bytes, want the refused record's 500", got)
	}
	cat.broken.Store(false)
	waitFor(t, "the bad table's commit after the catalog recovered", func() bool { return bad.acked.Load() == 2 })
	if got := b.Held(); got != 0 {
		t.Fatalf("budget holds %d bytes after every commit", got)
	}
}

// A reader waiting for the budget makes the biggest buffers flush at once: with an hour's flush
// interval and thresholds never reached, the records of two tables pass through a budget of a
// few of them only because the pressure flushes them early.
func TestBudgetPressureFlushesEarly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := membudget.New(1000)
	h := newHarness(t, dir, withTables(keyed), withMaintenance(nil), withOptions(WithMemoryBudget(b)))
	readers := []*budgetReader{{t: t, s: h.s, acct: b.Account(), shard: "s0"}, {t: t, s: h.s, acct: b.Account(), shard: "s1"}}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, r := range readers {
		wg.Go(func() {
			for range n {
				if err := r.submit(t.Context(), fmt.Sprintf("t%d", i), 100); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	submitted := make(chan struct{})
	go func() { wg.Wait(); close(submitted) }()
	select {
	case <-submitted:
	case <-time.After(time.Minute): // a deadlock, not a timing assertion
		t.Fatalf("deadlocked: the readers still wait for the budget (held %d); acknowledged %d and %d",
			b.Held(), readers[0].acked.Load(), readers[1].acked.Load())
	}
	h.flush() // the last records stay buffered once nobody waits: nothing presses for them
	if readers[0].acked.Load() != n || readers[1].acked.Load() != n {
		t.Fatalf("acknowledged %d and %d of %d", readers[0].acked.Load(), readers[1].acked.Load(), n)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if b.Held() != 0 || b.Waits() == 0 {
		t.Fatalf("held %d, waits %d: want 0 held and some waits", b.Held(), b.Waits())
	}
}
