package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The tests drive a real sink (through its exported API, with its own maintenance off) to make
// the CDC commits that maintenance works on and races with.

var usersIdent = table.Identifier{"shop", "users"}

var usersDef = sink.TableConfig{PrimaryKey: []string{"id"}, Columns: []sink.ColumnSpec{
	{Name: "id", Type: "INT4"}, {Name: "name", Type: "WSTRING", Length: 20}, {Name: "amount", Type: "NUMERIC", Precision: 10, Scale: 2}}}

type counter struct{ n atomic.Int64 }

func (c *counter) Done(n int) { c.n.Add(int64(n)) }

type nopDLQ struct{}

func (nopDLQ) DeadLetter(context.Context, change.DeadLetter) error { return nil }

type harness struct {
	t    *testing.T
	cat  catalog.Catalog
	s    *sink.Iceberg
	ack  *counter
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
	h := &harness{t: t, cat: cat, ack: &counter{}, done: make(chan error, 1)}
	h.s, err = sink.New(cfg, cat, nopDLQ{}, sink.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
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
	ev := &change.Event{Schema: "shop", Table: "users", Op: op, Columns: cols,
		Pos: change.Position{Stream: "st", Shard: shard, Seq: fmt.Sprint(seq)}, Raw: []byte(`{"raw":true}`), Ack: h.ack}
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

func num(name string, v int) change.Column {
	return change.Column{Name: name, Value: change.Value{Kind: change.KindNumber, Text: fmt.Sprint(v)}}
}

func str(name, v string) change.Column {
	return change.Column{Name: name, Value: change.Value{Kind: change.KindString, Text: v}}
}

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
	tbl, err := cat.LoadTable(context.Background(), usersIdent)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
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
	fields := tbl.Schema().Fields()
	var out []string
	_, it, err := tbl.Scan(opts...).ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var parts []string
			for _, f := range fields {
				idx := rec.Schema().FieldIndices(f.Name)
				if len(idx) == 0 {
					continue
				}
				v, ok := dms.RenderArrow(rec.Column(idx[0]), i, f.Type)
				if !ok {
					v = "null"
				}
				parts = append(parts, f.Name+"="+v)
			}
			out = append(out, strings.Join(parts, ","))
		}
		rec.Release()
	}
	sort.Strings(out)
	return out
}

func eq(t *testing.T, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// manifestsOf returns tbl's file IO and the manifests of its current snapshot.
func manifestsOf(t *testing.T, tbl *table.Table) (icebergio.IO, []iceberg.ManifestFile) {
	t.Helper()
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mans, err := tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		t.Fatal(err)
	}
	return fs, mans
}

// dataSeqs returns the data sequence number of every live data file of the current snapshot.
func dataSeqs(t *testing.T, tbl *table.Table) map[string]int64 {
	t.Helper()
	fs, mans := manifestsOf(t, tbl)
	out := map[string]int64{}
	for _, mf := range mans {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				t.Fatal(err)
			}
			out[e.DataFile().FilePath()] = e.SequenceNum()
		}
	}
	return out
}
