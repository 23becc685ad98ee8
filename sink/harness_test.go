package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// The one sink test harness: newHarness with options, and the helpers that submit, flush and
// read back. The harness fields t, cat, s, dlq, ack, done and stop and the methods submit, flush
// and close are also used by the maintenance tests.

// counter counts acknowledged events (the shared sinktest.Acks).
type counter = sinktest.Acks

// memDLQ keeps dead letters in memory (the shared sinktest.DLQ).
type memDLQ = sinktest.DLQ

type harness struct {
	t    *testing.T
	cat  catalog.Catalog
	s    *Iceberg
	dlq  *memDLQ
	ack  *counter
	done chan error
	stop context.CancelFunc
}

// harnessConfig is what the options of newHarness set.
type harnessConfig struct {
	tables   map[string]TableConfig
	mod      func(*Config)
	maint    func(*maintenance.Config)
	maintSet bool
	tableDLQ bool
	opts     []Option
	// wrap, if set, wraps the catalog the sink uses (h.cat stays the plain one).
	wrap func(catalog.Catalog) catalog.Catalog
}

// harnessOption configures newHarness.
type harnessOption func(*harnessConfig)

// withTables sets sink.tables.
func withTables(tables map[string]TableConfig) harnessOption {
	return func(c *harnessConfig) { c.tables = tables }
}

// withConfig opens the whole configuration to mod (after the other options applied).
func withConfig(mod func(*Config)) harnessOption { return func(c *harnessConfig) { c.mod = mod } }

// withMaintenance turns background maintenance off and then lets mod (may be nil) set the
// maintenance configuration. Without it the sink runs with the default maintenance.
func withMaintenance(mod func(*maintenance.Config)) harnessOption {
	return func(c *harnessConfig) { c.maint, c.maintSet = mod, true }
}

// withTableDLQ makes the sink run its own dead-letter table (asynchronous dead letters) instead
// of the in-memory one.
func withTableDLQ() harnessOption { return func(c *harnessConfig) { c.tableDLQ = true } }

// withCatalogWrap makes the sink use wrap(catalog) (a catalog with faults); the harness reads
// through the plain one.
func withCatalogWrap(wrap func(catalog.Catalog) catalog.Catalog) harnessOption {
	return func(c *harnessConfig) { c.wrap = wrap }
}

// withOptions passes sink options to New.
func withOptions(opts ...Option) harnessOption {
	return func(c *harnessConfig) { c.opts = append(c.opts, opts...) }
}

// seedUsers commits row id=1 of shop.users (configured with usersDef) in dir's warehouse and
// closes the sink: the table a test then reopens (its catalog stays readable through the
// returned harness).
func seedUsers(t *testing.T, dir string) *harness {
	t.Helper()
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	h.submit("s0", 1, change.OpInsert, "users", []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	h.close()
	return h
}

// newHarness runs a sink over the SQLite catalog in dir with stream "st" and an hour's flush
// interval (tests flush explicitly), configured by opts, until the test ends.
func newHarness(t *testing.T, dir string, opts ...harnessOption) *harness {
	t.Helper()
	var hc harnessConfig
	for _, o := range opts {
		o(&hc)
	}
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(dir)
	cfg.Stream = "st"
	cfg.FlushInterval = time.Hour // tests flush explicitly
	cfg.Tables = hc.tables
	if hc.maintSet {
		cfg.Maintenance.Enabled = false
		if hc.maint != nil {
			hc.maint(&cfg.Maintenance)
		}
	}
	if hc.mod != nil {
		hc.mod(&cfg)
	}
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cat: cat, dlq: &memDLQ{}, ack: &counter{}, done: make(chan error, 1)}
	var dlq change.DeadLetterer = h.dlq
	if hc.tableDLQ {
		dlq = nil
	}
	sinkCat := cat
	if hc.wrap != nil {
		sinkCat = hc.wrap(cat)
	}
	// A checked allocator: the test fails when it ends if a writer left Arrow memory unreleased
	// (registered before the sink's cleanup, so it checks after the sink has stopped).
	mem := sinktest.Allocator(t)
	h.s, err = New(cfg, sinkCat, dlq, append([]Option{WithAllocator(mem)}, hc.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	h.stop = cancel
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

func col(name, text string) change.Column { return sinktest.Col(name, text) }

func (h *harness) submit(shard string, seq int, op change.Op, table string, cols []change.Column, before []change.Column) {
	h.t.Helper()
	ev := &change.Event{Schema: "shop", Table: table, Op: op, Columns: cols, Before: before,
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

// scanRows scans a table through iceberg-go and renders each row as "c1=v1,c2=v2" sorted (a
// null _dms_record_id left out).
func scanRows(t *testing.T, cat catalog.Catalog, name string) ([]string, *table.Table) {
	t.Helper()
	tbl := sinktest.LoadTable(t, cat, table.Identifier{"shop", name})
	return sinktest.Rows(t, tbl, []string{KeylessIdentityColumn}), tbl
}

func eq(t *testing.T, got []string, want ...string) { t.Helper(); sinktest.Eq(t, got, want...) }

func (h *harness) event(ev *change.Event) {
	h.t.Helper()
	if ev.Raw == nil {
		ev.Raw = []byte(fmt.Sprintf(`{"seq":%q}`, ev.Pos.Seq))
	}
	ev.Pos.Stream = "st"
	ev.Ack = h.ack
	if ev.Schema == "" {
		ev.Schema = "shop"
	}
	if err := h.s.Submit(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

// ctl submits a control record; def is "name:TYPE name:TYPE ..." with key columns marked "*".
func (h *harness) ctl(shard string, seq int, tbl, op, def string) {
	h.t.Helper()
	h.event(ctlEvent(shard, seq, tbl, op, def))
}

// ctlEvent is the control record ctl submits.
func ctlEvent(shard string, seq int, tbl, op, def string) *change.Event {
	c := &change.Control{Op: op}
	if def != "" {
		td := &change.TableDef{}
		for _, part := range strings.Fields(def) {
			name, typ, _ := strings.Cut(part, ":")
			if strings.HasSuffix(name, "*") {
				name = strings.TrimSuffix(name, "*")
				td.PrimaryKey = append(td.PrimaryKey, name)
			}
			td.Columns = append(td.Columns, change.ColumnDef{Name: name, Type: typ, Nullable: true})
		}
		c.TableDef = td
	}
	return &change.Event{Table: tbl, Op: change.OpControl, Control: c,
		Meta: change.Metadata{RecordType: "control", Operation: op, Timestamp: "2025-01-01T00:00:00.000000Z"},
		Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}}
}

func (h *harness) data(shard string, seq int, tbl string, op change.Op, cols []change.Column, before []change.Column) {
	h.t.Helper()
	h.event(&change.Event{Table: tbl, Op: op, Columns: cols, Before: before,
		Meta: change.Metadata{RecordType: "data", Operation: op.String()},
		Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}})
}

func loadTable(t *testing.T, h *harness, ns, name string) *table.Table {
	t.Helper()
	tbl, err := h.cat.LoadTable(context.Background(), table.Identifier{ns, name})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func classes(dls []change.DeadLetter) []string {
	var out []string
	for _, d := range dls {
		out = append(out, d.Class)
	}
	return out
}
