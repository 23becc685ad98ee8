package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

func TestControlRecordsEvolveTheSchema(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4 price:NUMERIC(10,2)")
	h.data("d", 1, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'"), col("qty", "2"), col("price", "1.50")}, nil)
	h.ctl("c", 2, "items", "add-column", "id*:INT4 name:WSTRING qty:INT4 price:NUMERIC(10,2) tier:WSTRING")
	h.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("qty", "3"), col("price", "2"), col("tier", "'gold'")}, nil)
	h.ctl("c", 3, "items", "rename-column", "id*:INT4 full_name:WSTRING qty:INT4 price:NUMERIC(10,2) tier:WSTRING")
	h.data("d", 3, "items", change.OpUpdate, []change.Column{col("id", "1"), col("full_name", "'a2'"), col("qty", "2"), col("price", "1.5"), col("tier", "null")}, []change.Column{})
	h.ctl("c", 4, "items", "column-type-change", "id*:INT4 full_name:WSTRING qty:INT8 price:NUMERIC(14,2) tier:WSTRING")
	h.data("d", 4, "items", change.OpInsert, []change.Column{col("id", "3"), col("full_name", "'c'"), col("qty", "3000000000"), col("price", "123456789012.34"), col("tier", "'x'")}, nil)
	h.ctl("c", 5, "items", "drop-column", "id*:INT4 full_name:WSTRING qty:INT8 price:NUMERIC(14,2)")
	h.data("d", 5, "items", change.OpUpdate, []change.Column{col("id", "2"), col("full_name", "'b2'"), col("qty", "4"), col("price", "2")}, []change.Column{})
	// An incompatible change (decimal scale) is dead-lettered; the table keeps decimal(14,2) and
	// the records that still convert go on; one that does not is dead-lettered.
	h.ctl("c", 6, "items", "change-columns", "id*:INT4 full_name:WSTRING qty:INT8 price:NUMERIC(14,4)")
	h.data("d", 6, "items", change.OpInsert, []change.Column{col("id", "4"), col("full_name", "'d'"), col("qty", "1"), col("price", "1.2500")}, nil)
	h.data("d", 7, "items", change.OpInsert, []change.Column{col("id", "5"), col("full_name", "'e'"), col("qty", "1"), col("price", "1.2345")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows,
		"id=1,full_name=a2,qty=2,price=1.50,tier=null",
		"id=2,full_name=b2,qty=4,price=2.00,tier=null",
		"id=3,full_name=c,qty=3000000000,price=123456789012.34,tier=x",
		"id=4,full_name=d,qty=1,price=1.25,tier=null")
	s := tbl.Schema()
	qty, _ := s.FindFieldByName("qty")
	price, _ := s.FindFieldByName("price")
	tier, _ := s.FindFieldByName("tier")
	if qty.Type.String() != "long" || price.Type.String() != "decimal(14, 2)" || !strings.HasPrefix(tier.Doc, droppedDoc) || tier.Required {
		t.Fatalf("schema after evolution: %v", s)
	}
	if name, ok := s.FindFieldByName("name"); ok {
		t.Fatalf("renamed column still there: %v", name)
	}
	if got := classes(h.dlq.Letters()); !slices.Equal(got, []string{ClassIncompatible, ClassConvert}) {
		t.Fatalf("dead letters %v, want incompatible_schema then convert", got)
	}
	if !strings.Contains(tbl.Properties()[tableprop.IncompatibleChange], "price") {
		t.Fatalf("incompatible change not recorded: %v", tbl.Properties())
	}
	if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["c"] != "6" || wm["d"] != "6" {
		t.Fatalf("watermarks %v, want c=6 (control records) d=6 (last committed data)", wm)
	}
	if got := h.ack.N.Load(); got != 13 {
		t.Fatalf("acknowledged %d, want 13", got)
	}
	h.close()
}

func TestReplayedControlRecordsAreSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func() *harness {
		h := newHarness(t, dir, withMaintenance(nil))
		h.ctl("c", 1, "items", "create-table", "id*:INT4 name:WSTRING")
		h.data("d", 1, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
		h.ctl("c", 2, "items", "rename-column", "id*:INT4 full_name:WSTRING")
		h.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("full_name", "'b'")}, nil)
		h.flush()
		h.close()
		return h
	}
	h := run()
	snaps := len(loadTable(t, h, "shop", "items").Metadata().Snapshots())
	h = run()
	rows, tbl := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,full_name=a", "id=2,full_name=b")
	if n := len(tbl.Metadata().Snapshots()); n != snaps {
		t.Fatalf("replay added snapshots: %d, was %d", n, snaps)
	}
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters on replay: %+v", h.dlq.Letters())
	}
}

func TestDataBeforeControlRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	// Data first: the table is created from the values (keyless), an unknown column is added.
	h.data("d", 1, "late", change.OpInsert, []change.Column{col("id", "1"), col("v", "'a'")}, nil)
	h.data("d", 2, "late", change.OpUpdate, []change.Column{col("id", "1"), col("v", "'b'")}, nil) // keyless: dead letter
	h.data("d", 3, "late", change.OpInsert, []change.Column{col("id", "2"), col("v", "'c'"), col("extra", "7")}, nil)
	// The create-table arrives late: the key is applied, types stay as inferred where compatible.
	h.ctl("c", 1, "late", "create-table", "id*:INT8 v:WSTRING extra:INT4")
	h.data("d", 4, "late", change.OpUpdate, []change.Column{col("id", "2"), col("v", "'c2'"), col("extra", "8")}, []change.Column{})
	h.data("d", 5, "late", change.OpDelete, []change.Column{col("id", "1")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "late")
	eq(t, rows, "id=2,v=c2,extra=8")
	if ids := tbl.Schema().IdentifierFieldIDs; len(ids) != 1 {
		t.Fatalf("identifier fields %v, want the id column", ids)
	}
	if got := classes(h.dlq.Letters()); !slices.Equal(got, []string{ClassKeyless}) {
		t.Fatalf("dead letters %v", got)
	}
	h.close()
}

func TestDropTableMarkAndRecreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.DropTable = DropTableMark }), withTableDLQ())
	h.ctl("c", 1, "gone", "create-table", "id*:INT4 v:WSTRING")
	h.data("d", 1, "gone", change.OpInsert, []change.Column{col("id", "1"), col("v", "'a'")}, nil)
	h.ctl("c", 2, "gone", "drop-table", "")
	h.data("d", 2, "gone", change.OpInsert, []change.Column{col("id", "2"), col("v", "'late'")}, nil)
	h.flush()
	tbl := loadTable(t, h, "shop", "gone")
	if tbl.Properties()[tableprop.Status] != tableprop.StatusDropped {
		t.Fatalf("not marked dropped: %v", tbl.Properties())
	}
	st := h.s.TableStatuses()
	if len(st) != 1 || st[0].Status != tableprop.StatusDropped {
		t.Fatalf("statuses %+v", st)
	}
	h.ctl("c", 3, "gone", "create-table", "id*:INT4 v:WSTRING w:INT4")
	h.data("d", 3, "gone", change.OpInsert, []change.Column{col("id", "3"), col("v", "'new'"), col("w", "1")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "gone")
	eq(t, rows, "id=1,v=a,w=null", "id=3,v=new,w=1")
	if tbl.Properties()[tableprop.Status] != tableprop.StatusActive {
		t.Fatalf("mark not lifted: %v", tbl.Properties())
	}
	h.close()
	dls, err := ReadDeadLetters(context.Background(), h.cat, table.Identifier{"dms2iceberg", "dead_letters"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Class != ClassDropped || dls[0].Seq != "2" || dls[0].Table != "shop.gone" || string(dls[0].Raw) != `{"seq":"2"}` {
		t.Fatalf("dead letters %+v", dls)
	}
	if got := h.ack.N.Load(); got != 6 {
		t.Fatalf("acknowledged %d, want 6", got)
	}
}

func TestPausedTableDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		// The configured key names a column the table-def does not have.
		c.Tables = map[string]TableConfig{"shop.bad": {PrimaryKey: []string{"nope"}}}
	}))
	h.ctl("c", 1, "bad", "create-table", "id*:INT4 v:WSTRING")
	h.data("d", 1, "bad", change.OpInsert, []change.Column{col("id", "1"), col("v", "'a'")}, nil)
	h.data("d", 2, "good", change.OpInsert, []change.Column{col("id", "1")}, nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "good")
	eq(t, rows, "id=1")
	if got := classes(h.dlq.Letters()); !slices.Equal(got, []string{ClassPaused}) {
		t.Fatalf("dead letters %v", got)
	}
	var paused bool
	for _, st := range h.s.TableStatuses() {
		paused = paused || (st.Source == "shop.bad" && st.Status == tableprop.StatusPaused && strings.Contains(st.Reason, "nope"))
	}
	if !paused {
		t.Fatalf("statuses %+v", h.s.TableStatuses())
	}
	if got := h.ack.N.Load(); got != 3 {
		t.Fatalf("acknowledged %d, want 3", got)
	}
	h.close()
}

func TestIncludeExcludeAndPerTableSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.HashKey = []byte("secret")
		c.Include = []string{"shop.*"}
		c.Exclude = []string{"shop.tmp_*"}
		c.Tables = map[string]TableConfig{
			"shop.off": {Enabled: new(bool)},
			"shop.people": {PrimaryKey: []string{"id"}, Namespace: "crm", Name: "persons",
				ExcludeColumns: []string{"secret"}, HashColumns: []string{"email"}, MaskColumns: []string{"phone"},
				TimestampTZColumns: []string{"seen"}, Partition: []PartitionField{{Column: "id", Transform: "bucket", N: 4}}},
		}
	}))
	h.data("d", 1, "tmp_x", change.OpInsert, []change.Column{col("id", "1")}, nil)
	h.data("d", 2, "off", change.OpInsert, []change.Column{col("id", "1")}, nil)
	h.event(&change.Event{Schema: "other", Table: "t", Op: change.OpInsert, Columns: []change.Column{col("id", "1")},
		Pos: change.Position{Shard: "d", Seq: "3"}})
	h.ctl("c", 1, "people", "create-table", "id*:INT4 email:WSTRING phone:WSTRING secret:WSTRING seen:DATETIME at:DATETIME")
	h.data("d", 4, "people", change.OpInsert, []change.Column{col("id", "1"), col("email", "'a@x'"), col("phone", "'555'"),
		col("secret", "'pw'"), col("seen", "'2024-01-01T10:00:00+02:00'"), col("at", "'2024-01-01T10:00:00Z'")}, nil)
	h.data("d", 5, "people", change.OpInsert, []change.Column{col("id", "2"), col("email", "null"), col("phone", "null"), col("secret", "'pw'")}, nil)
	h.data("d", 6, "people", change.OpDelete, []change.Column{col("id", "2")}, nil)
	h.flush()
	tbl, err := h.cat.LoadTable(context.Background(), table.Identifier{"crm", "persons"})
	if err != nil {
		t.Fatal(err)
	}
	if spec := tbl.Spec(); spec.NumFields() != 1 {
		t.Fatalf("partition spec %v", spec)
	}
	if _, ok := tbl.Schema().FindFieldByName("secret"); ok {
		t.Fatal("excluded column created")
	}
	for name, want := range map[string]string{"email": "string", "phone": "string", "seen": "timestamptz", "at": "timestamp"} {
		if f, _ := tbl.Schema().FindFieldByName(name); f.Type.String() != want {
			t.Fatalf("column %s is %s, want %s", name, f.Type, want)
		}
	}
	_, recs, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		n += int(rec.NumRows())
		s := fmt.Sprint(rec)
		if strings.Contains(s, "a@x") || strings.Contains(s, "555") || !strings.Contains(s, maskText) || !strings.Contains(s, "[1704096000000000]") {
			t.Fatalf("row not transformed: %s", s)
		}
		rec.Release()
	}
	if n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	for _, src := range []string{"tmp_x", "off"} {
		if _, err := h.cat.LoadTable(context.Background(), table.Identifier{"shop", src}); err == nil {
			t.Fatalf("filtered table %s was created", src)
		}
	}
	if got := h.ack.N.Load(); got != 7 {
		t.Fatalf("acknowledged %d, want 7", got)
	}
	h.close()
}

func TestPartialBeforeImageKeyChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "bi", "create-table", "id*:INT4 region*:WSTRING qty:INT4")
	h.data("d", 1, "bi", change.OpInsert, []change.Column{col("id", "1"), col("region", "'eu'"), col("qty", "1")}, nil)
	h.flush()
	// Oracle-style before-image: only the changed key column.
	h.data("d", 2, "bi", change.OpUpdate, []change.Column{col("id", "1"), col("region", "'us'"), col("qty", "2")}, []change.Column{col("region", "'eu'")})
	h.flush()
	rows, _ := scanRows(t, h.cat, "bi")
	eq(t, rows, "id=1,region=us,qty=2")
	h.close()
}

func TestPerTableFlushRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) {
		c.Tables = map[string]TableConfig{"shop.*": {FlushRows: 2, PrimaryKey: []string{"id"}}}
	}))
	for i := 1; i <= 4; i++ {
		h.data("d", i, "fast", change.OpInsert, []change.Column{col("id", fmt.Sprint(i))}, nil)
	}
	WaitUntil(t, func() bool { return h.ack.N.Load() == 4 })
	if n := len(loadTable(t, h, "shop", "fast").Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots, want 2 (flush_rows 2 from the shop.* entry)", n)
	}
	h.close()
}

// WaitUntil polls cond for up to 20s.
func WaitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReplayEventsBypassWatermarks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "r", "create-table", "id*:INT4 v:INT4")
	h.data("d", 5, "r", change.OpInsert, []change.Column{col("id", "1"), col("v", "1")}, nil)
	h.flush()
	// A dead letter of seq 3 replayed after a fix: below the watermark, still applied.
	h.event(&change.Event{Table: "r", Op: change.OpInsert, Columns: []change.Column{col("id", "2"), col("v", "2")},
		Pos: change.Position{Shard: "d", Seq: "3"}, Replay: true})
	h.flush()
	rows, tbl := scanRows(t, h.cat, "r")
	eq(t, rows, "id=1,v=1", "id=2,v=2")
	if wm := tableprop.Watermarks(tbl.Properties(), "st"); wm["d"] != "5" {
		t.Fatalf("watermark moved: %v", wm)
	}
	h.close()
}

func TestDeadLetterTableIsExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(dir)
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	d := NewTableDeadLetters(cat, cfg.DeadLetters, 5, nil, nil)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dl := change.DeadLetter{Stream: "st", Shard: "s" + fmt.Sprint(i%2), Seq: fmt.Sprint(100 + i%10), Reason: "bad", Raw: []byte{0xff, byte(i)}}
			if err := d.DeadLetter(ctx, dl); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	rows, err := ReadDeadLetters(ctx, cat, d.Ident())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 20/2 {
		t.Fatalf("%d rows, want 10 (each key twice, upserted)", len(rows))
	}
	for _, r := range rows {
		if r.Class != ClassDecode || len(r.Raw) != 2 || r.At.IsZero() || !r.ReplayedAt.IsZero() {
			t.Fatalf("row %+v", r)
		}
	}
	if err := d.MarkReplayed(ctx, rows[:3], time.Now()); err != nil {
		t.Fatal(err)
	}
	rows, _ = ReadDeadLetters(ctx, cat, d.Ident())
	marked := 0
	for _, r := range rows {
		if !r.ReplayedAt.IsZero() {
			marked++
		}
	}
	if len(rows) != 10 || marked != 3 {
		t.Fatalf("%d rows, %d marked; want 10, 3", len(rows), marked)
	}
	d.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := d.DeadLetter(ctx, change.DeadLetter{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeadLetter after Close: %v", err)
	}
}

func TestWideningKeepsOldAndNewValues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "f", "create-table", "id*:INT4 r:REAL4 n:NUMERIC(5,0) i:INT4")
	h.data("d", 1, "f", change.OpInsert, []change.Column{col("id", "1"), col("r", "3.25"), col("n", "-99999"), col("i", "7")}, nil)
	h.flush()
	h.ctl("c", 2, "f", "column-type-change", "id*:INT4 r:REAL8 n:NUMERIC(10,0) i:INT8")
	h.data("d", 2, "f", change.OpInsert, []change.Column{col("id", "2"), col("r", "1099511627776.25"), col("n", "9999999999"), col("i", "8589934592")}, nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "f")
	eq(t, rows, "id=1,r=3.25,n=-99999,i=7", "id=2,r=1.09951162777625e+12,n=9999999999,i=8589934592")
	h.close()
}

func TestStaleControlRecordIsSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	ctl := func(seq int, op, ts, def string) {
		c := &change.Control{Op: op, TableDef: &change.TableDef{PrimaryKey: []string{"id"}}}
		for _, part := range strings.Fields(def) {
			name, typ, _ := strings.Cut(part, ":")
			c.TableDef.Columns = append(c.TableDef.Columns, change.ColumnDef{Name: name, Type: typ, Nullable: true})
		}
		h.event(&change.Event{Table: "st", Op: change.OpControl, Control: c, Meta: change.Metadata{RecordType: "control", Operation: op, Timestamp: ts},
			Pos: change.Position{Shard: "c", Seq: fmt.Sprint(seq)}})
	}
	ctl(1, "create-table", "2025-01-01T00:00:01.000000Z", "id:INT4 name:WSTRING")
	ctl(2, "rename-column", "2025-01-01T00:00:03.000000Z", "id:INT4 full_name:WSTRING")
	// The task-start create-table, read late from another shard: older than the rename.
	ctl(3, "create-table", "2025-01-01T00:00:00.500000Z", "id:INT4 name:WSTRING")
	h.data("d", 1, "st", change.OpInsert, []change.Column{col("id", "1"), col("full_name", "'a'")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "st")
	eq(t, rows, "id=1,full_name=a")
	if f, _ := tbl.Schema().FindFieldByName("full_name"); f.Doc != "" {
		t.Fatalf("full_name marked dropped by a stale create-table: %q", f.Doc)
	}
	h.close()
}

// A value outside the range of its source type (an unsigned column wider in Iceberg than at the
// source) is dead-lettered with the reason, not stored.
func TestUnsignedSourceRangeIsEnforced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "counters", "create-table", "id*:INT4 n:UINT8")
	h.data("d", 1, "counters", change.OpInsert, []change.Column{col("id", "1"), col("n", "18446744073709551615")}, nil)
	h.data("d", 2, "counters", change.OpInsert, []change.Column{col("id", "2"), col("n", "-1")}, nil)
	h.data("d", 3, "counters", change.OpInsert, []change.Column{col("id", "3"), col("n", "18446744073709551616")}, nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "counters")
	eq(t, rows, "id=1,n=18446744073709551615")
	if len(h.dlq.Letters()) != 2 {
		t.Fatalf("%d dead letters, want the two out-of-range values: %+v", len(h.dlq.Letters()), h.dlq.Letters())
	}
	for _, dl := range h.dlq.Letters() {
		if !strings.Contains(dl.Reason, "outside the range of the source type") {
			t.Errorf("dead letter reason %q, want the source range named", dl.Reason)
		}
	}
}
