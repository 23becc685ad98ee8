package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The tests drive a real sink (through its exported API, with its own maintenance off) to make
// the CDC commits that maintenance works on and races with.

var usersIdent = table.Identifier{"shop", "users"}

var usersDef = sink.TableConfig{PrimaryKey: []string{"id"}, Columns: []sink.ColumnSpec{
	{Name: "id", Type: "INT4"}, {Name: "name", Type: "WSTRING", Length: 20}, {Name: "amount", Type: "NUMERIC", Precision: 10, Scale: 2}}}

type harness struct {
	t    *testing.T
	cat  catalog.Catalog
	s    *sink.Iceberg
	ack  *sinktest.Acks
	done chan error
}

// newHarness runs a sink writing shop.users under dir, with background maintenance off.
func newHarness(t *testing.T, dir string) *harness {
	t.Helper()
	return newHarnessFor(t, dir, usersDef)
}

// newHarnessFor is newHarness with shop.users configured as def.
func newHarnessFor(t *testing.T, dir string, def sink.TableConfig) *harness {
	t.Helper()
	ctx := context.Background()
	cfg := sink.DefaultConfig()
	cfg.Catalog = sink.DefaultCatalogConfig(dir)
	cfg.Stream = "st"
	cfg.FlushInterval = time.Hour // tests flush explicitly
	cfg.Tables = map[string]sink.TableConfig{"shop.users": def}
	cfg.Maintenance.Enabled = false
	cat, err := sink.OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cat: cat, ack: &sinktest.Acks{}, done: make(chan error, 1)}
	h.s, err = sink.New(cfg, cat, &sinktest.DLQ{}, sink.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	go func() { h.done <- h.s.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("sink Run: %v", err)
		}
	})
	return h
}

func (h *harness) close() {
	h.t.Helper()
	if err := h.s.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	if err := <-h.done; err != nil {
		h.t.Fatalf("Run: %v", err)
	}
	h.done <- nil
}

func (h *harness) submit(shard string, seq int, op change.Op, cols ...change.Column) {
	h.t.Helper()
	ev := sinktest.Event("st", shard, seq, "shop", "users", op, cols, nil, h.ack)
	if err := h.s.Submit(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) flush() {
	h.t.Helper()
	if err := h.s.Flush(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// num and str are the columns the tests submit.
var (
	num = sinktest.Num
	str = sinktest.Str
)

// model is the expected content of shop.users, applied alongside the submitted changes.
type model struct {
	h    *harness
	seq  int
	rows map[int]string
}

func newModel(h *harness) *model { return &model{h: h, rows: map[int]string{}} }

// seeded opens a harness over dir and commits a table of keys 1..n (load) followed by batches
// 1..batches (batch), each one commit: the usual starting point of a maintenance test.
func seeded(t *testing.T, dir string, n, batches int) (*harness, *model) {
	t.Helper()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(n)
	for b := 1; b <= batches; b++ {
		m.batch(b, n)
	}
	return h, m
}

func (m *model) upsert(shard string, id int, name string) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpUpdate, num("id", id), str("name", name))
	m.rows[id] = name
}

func (m *model) del(shard string, id int) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpDelete, num("id", id))
	delete(m.rows, id)
}

func (m *model) want() []string {
	var out []string
	for id, name := range m.rows {
		out = append(out, fmt.Sprintf("id=%d,name=%s,amount=null", id, name))
	}
	sort.Strings(out)
	return out
}

// load inserts ids 1..n as one batch; batch b then updates every 7th key, deletes every 11th,
// re-inserts some deleted ones, each as one commit.
func (m *model) load(n int) {
	for id := 1; id <= n; id++ {
		m.upsert("s0", id, "v0")
	}
	m.h.flush()
}

func (m *model) batch(b, n int) {
	for id := b % 7; id <= n; id += 7 {
		if id > 0 {
			m.upsert("s0", id, fmt.Sprintf("v%d", b))
		}
	}
	for id := 1 + b%11; id <= n; id += 11 {
		m.del("s0", id)
	}
	for id := 2 + b%13; id <= n; id += 29 {
		m.upsert("s0", id, fmt.Sprintf("r%d", b))
	}
	m.h.flush()
}

func testConfig() maintenance.Config {
	c := maintenance.DefaultConfig()
	c.Owner = "test"
	c.MinInterval = 0
	c.LeaseDuration = time.Minute
	return c
}

func testMaintainer(t *testing.T, cat catalog.Catalog, cfg maintenance.Config) *maintenance.Maintainer {
	return maintenance.NewForTest(cat, usersIdent, "shop.users", cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
}

func loadUsers(t *testing.T, cat catalog.Catalog) *table.Table {
	t.Helper()
	return sinktest.LoadTable(t, cat, usersIdent)
}

func watermarks(tbl *table.Table) map[string]string {
	return tableprop.Watermarks(tbl.Properties(), "st")
}

// scanRows scans shop.users through iceberg-go and renders each row as "c1=v1,c2=v2", sorted.
func scanRows(t *testing.T, cat catalog.Catalog) ([]string, *table.Table) {
	t.Helper()
	tbl := loadUsers(t, cat)
	return scanRowsOf(t, tbl), tbl
}

// scanRowsOf is scanRows on tbl with opts (table.WithSnapshotID: a branch, an older snapshot).
func scanRowsOf(t *testing.T, tbl *table.Table, opts ...table.ScanOption) []string {
	t.Helper()
	return sinktest.Rows(t, tbl, nil, opts...)
}
