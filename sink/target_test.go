package sink

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// dlMetrics counts DeadLettered per table.
type dlMetrics struct {
	NopMetrics
	mu sync.Mutex
	n  map[string]int
}

func (m *dlMetrics) DeadLettered(table string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[table]++
}

func (m *dlMetrics) count(table string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[table]
}

// srcData submits a data record of source schema.tbl.
func (h *harness) srcData(shard string, seq int, schema, tbl string, cols []change.Column) {
	h.t.Helper()
	h.event(&change.Event{Schema: schema, Table: tbl, Op: change.OpInsert, Columns: cols,
		Meta: change.Metadata{RecordType: "data", Operation: "insert"},
		Pos:  change.Position{Shard: shard, Seq: fmt.Sprint(seq)}})
}

// crmIntoShop maps source crm.log onto the target shop.log, the default target of source
// shop.log: two sources, one target table.
var crmIntoShop = map[string]TableConfig{"crm.log": {Namespace: "shop", Columns: []ColumnSpec{{Name: "msg", Type: "WSTRING"}}}}

// Two sources writing one table shared its watermark keys. shop.log commits
// s0 watermark 10; crm.log's seq 5 of the same shard was then "covered" and acknowledged
// without being written. Now the table belongs to the source that created it (shop.log) and
// every record of the other source is dead-lettered with a reason naming both, counted.
func TestSecondSourceOfATargetIsDeadLettered(t *testing.T) {
	t.Parallel()
	m := &dlMetrics{}
	h := newHarness(t, t.TempDir(), withTables(crmIntoShop), withMaintenance(nil), withOptions(WithMetrics(m)))
	h.srcData("s0", 10, "shop", "log", []change.Column{col("msg", "'shop'")})
	h.flush()
	h.srcData("s0", 5, "crm", "log", []change.Column{col("msg", "'crm'")})
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "log")
	eq(t, rows, "msg=shop")
	if got := tbl.Properties()[tableprop.Source]; got != "shop.log" {
		t.Fatalf("%s = %q, want shop.log", tableprop.Source, got)
	}
	if len(h.dlq.Letters()) != 1 {
		t.Fatalf("%d dead letters, want 1 (crm.log seq 5): %+v", len(h.dlq.Letters()), h.dlq.Letters())
	}
	dl := h.dlq.Letters()[0]
	if dl.Seq != "5" || dl.Table != "crm.log" || dl.Class != ClassTargetTaken ||
		!strings.Contains(dl.Reason, "shop.log") || !strings.Contains(dl.Reason, "crm.log") || !strings.Contains(dl.Reason, "sink.tables") {
		t.Fatalf("dead letter %+v", dl)
	}
	if got := m.count("shop.log"); got != 1 {
		t.Fatalf("dead-letter metric %d, want 1", got)
	}
	if got := h.ack.N.Load(); got != 2 {
		t.Fatalf("acknowledged %d, want 2", got)
	}
	for _, st := range h.s.TableStatuses() {
		if st.Source == "crm.log" && (st.Status != StatusRefused || !strings.Contains(st.Reason, "shop.log")) {
			t.Fatalf("status of crm.log %+v", st)
		}
	}
}

// The owner is persisted, so every worker agrees on it whatever it sees first, and a record of
// the other source is never taken as covered by the owner's watermarks, nor are its control
// records applied to the owner's table.
func TestTargetOwnerHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := newHarness(t, dir, withTables(crmIntoShop), withMaintenance(nil))
	a.srcData("s0", 5, "crm", "log", []change.Column{col("msg", "'crm'")})
	a.srcData("s0", 20, "crm", "log", []change.Column{col("msg", "'crm2'")})
	a.flush()
	a.close()
	b := newHarness(t, dir, withTables(crmIntoShop), withMaintenance(nil))
	b.event(&change.Event{Schema: "shop", Table: "log", Op: change.OpControl, Control: &change.Control{Op: "create-table",
		TableDef: &change.TableDef{Columns: []change.ColumnDef{{Name: "msg", Type: "WSTRING"}, {Name: "extra", Type: "INT4"}}}},
		Meta: change.Metadata{RecordType: "control", Operation: "create-table"}, Pos: change.Position{Shard: "s0", Seq: "8"}})
	b.srcData("s0", 10, "shop", "log", []change.Column{col("msg", "'shop'")}) // below the owner's watermark 20
	b.flush()
	b.close()
	rows, tbl := scanRows(t, b.cat, "log")
	eq(t, rows, "msg=crm", "msg=crm2")
	if got := tbl.Properties()[tableprop.Source]; got != "crm.log" {
		t.Fatalf("%s = %q, want crm.log", tableprop.Source, got)
	}
	if n := len(tbl.Schema().Fields()); n != 2 { // msg and the keyless table's _dms_record_id
		t.Fatalf("the other source's create-table changed the owner's schema: %s", tbl.Schema())
	}
	if got := classes(b.dlq.Letters()); len(got) != 2 || got[0] != ClassTargetTaken || got[1] != ClassTargetTaken {
		t.Fatalf("dead letters %v, want the control record and seq 10", got)
	}
	if got := b.ack.N.Load(); got != 2 {
		t.Fatalf("acknowledged %d, want 2", got)
	}
}

// A table created before owners were recorded is claimed by the first source that opens it.
func TestUnownedTableIsClaimed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(crmIntoShop), withMaintenance(nil))
	ctx := context.Background()
	if err := h.cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	schema := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "msg", Type: iceberg.PrimitiveTypes.String})
	if _, err := h.cat.CreateTable(ctx, table.Identifier{"shop", "log"}, schema); err != nil {
		t.Fatal(err)
	}
	h.srcData("s0", 5, "crm", "log", []change.Column{col("msg", "'crm'")})
	h.flush()
	h.srcData("s0", 10, "shop", "log", []change.Column{col("msg", "'shop'")})
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "log")
	eq(t, rows, "msg=crm")
	if got := tbl.Properties()[tableprop.Source]; got != "crm.log" {
		t.Fatalf("%s = %q, want crm.log", tableprop.Source, got)
	}
	if got := classes(h.dlq.Letters()); len(got) != 1 || got[0] != ClassTargetTaken {
		t.Fatalf("dead letters %v", got)
	}
}

// With the ordering guard both writers hold their first record until the table exists and then
// race to create it: whichever wins owns it, the other's record is dead-lettered, never written
// nor covered.
func TestGuardedSourcesRaceForOneTarget(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	fb.ms.Store(1 << 40)
	h := guardHarness(t, OrderingArrival, fb, withTables(crmIntoShop))
	for _, src := range []string{"shop", "crm"} {
		seq := map[string]int{"shop": 10, "crm": 5}[src]
		h.event(&change.Event{Schema: src, Table: "log", Op: change.OpInsert, Columns: []change.Column{col("msg", "'"+src+"'")},
			Arrival: time.UnixMilli(int64(1000 + seq)), Meta: change.Metadata{RecordType: "data", Operation: "insert"},
			Pos: change.Position{Shard: "s0", Seq: fmt.Sprint(seq)}})
	}
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "log")
	owner := tbl.Properties()[tableprop.Source]
	loser := map[string]string{"shop.log": "crm.log", "crm.log": "shop.log"}[owner]
	if loser == "" || len(rows) != 1 || rows[0] != "msg="+strings.TrimSuffix(owner, ".log") {
		t.Fatalf("owner %q, rows %v", owner, rows)
	}
	if len(h.dlq.Letters()) != 1 || h.dlq.Letters()[0].Table != loser || h.dlq.Letters()[0].Class != ClassTargetTaken {
		t.Fatalf("dead letters %+v, want the one record of %s", h.dlq.Letters(), loser)
	}
	if got := h.ack.N.Load(); got != 2 {
		t.Fatalf("acknowledged %d, want 2", got)
	}
}

// A drop-table of a source that does not own the table never marks the owner's table dropped.
func TestDropOfAnotherSourceIsDeadLettered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := withConfig(func(c *Config) { c.DropTable = DropTableMark })
	a := newHarness(t, dir, withTables(crmIntoShop), withMaintenance(nil), mark)
	a.srcData("s0", 5, "crm", "log", []change.Column{col("msg", "'crm'")})
	a.flush()
	a.close()
	b := newHarness(t, dir, withTables(crmIntoShop), withMaintenance(nil), mark)
	b.event(&change.Event{Schema: "shop", Table: "log", Op: change.OpControl, Control: &change.Control{Op: "drop-table"},
		Meta: change.Metadata{RecordType: "control", Operation: "drop-table"}, Pos: change.Position{Shard: "s0", Seq: "6"}})
	b.flush()
	b.close()
	tbl := loadTable(t, b, "shop", "log")
	if st := tbl.Properties()[tableprop.Status]; st == tableprop.StatusDropped {
		t.Fatal("the other source's drop-table marked the owner's table dropped")
	}
	if got := classes(b.dlq.Letters()); len(got) != 1 || got[0] != ClassTargetTaken {
		t.Fatalf("dead letters %v", got)
	}
}
