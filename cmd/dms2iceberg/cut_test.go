package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The cut is the first snapshot whose complete-through (its summary's or an earlier one's, and
// for the current snapshot the table property) reaches the time; past everything the table is
// not complete yet.
func TestCutPicksTheFirstSnapshotCompleteThroughTheTime(t *testing.T) {
	ctx := t.Context()
	cat, sc := shopCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, table.Identifier{"shop", "orders"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var ids []int64
	commit := func(id int64, through string) {
		t.Helper()
		asc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
		b := array.NewRecordBuilder(mem, asc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		rec := b.NewRecordBatch()
		defer rec.Release()
		rdr, err := array.NewRecordReader(asc, []arrow.RecordBatch{rec})
		if err != nil {
			t.Fatal(err)
		}
		defer rdr.Release()
		var props iceberg.Properties
		if through != "" {
			props = iceberg.Properties{tableprop.CompleteThrough: through}
		}
		if tbl, err = tbl.Append(ctx, rdr, props); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tbl.CurrentSnapshot().SnapshotID)
	}
	commit(1, "2026-12-01T10:00:00.000Z")
	commit(2, "") // a compaction-like commit: no complete-through of its own
	commit(3, "2026-12-01T10:05:00.000Z")
	txn := tbl.NewTransaction() // a quiet table's freshness commit: property only
	if err := txn.SetProperties(iceberg.Properties{tableprop.CompleteThrough: "2026-12-01T10:10:00.000Z"}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	for _, c := range []struct {
		at      string
		snap    int64
		through string
	}{
		{"2026-12-01T09:59:00Z", ids[0], "2026-12-01T10:00:00Z"},
		{"2026-12-01T10:00:00Z", ids[0], "2026-12-01T10:00:00Z"},
		{"2026-12-01T10:01:00Z", ids[2], "2026-12-01T10:10:00Z"}, // the current snapshot: the property counts
		{"2026-12-01T10:07:00Z", ids[2], "2026-12-01T10:10:00Z"},
		{"2026-12-01T10:11:00Z", 0, "2026-12-01T10:10:00Z"},
	} {
		e := cutOf("shop.orders", tbl, at(c.at))
		if e.SnapshotID != c.snap || e.Complete != (c.snap != 0) || e.CompleteThrough == nil || !e.CompleteThrough.Equal(at(c.through)) {
			t.Errorf("cut at %s: %+v (through %v), want snapshot %d through %s", c.at, e, e.CompleteThrough, c.snap, c.through)
		}
	}
	var out bytes.Buffer
	cutReport{At: at("2026-12-01T10:11:00Z"), Tables: []cutEntry{cutOf("shop.orders", tbl, at("2026-12-01T10:11:00Z"))}}.render(&out)
	if !strings.Contains(out.String(), "not complete yet") || !strings.Contains(out.String(), "2026-12-01T10:10:00.000Z") {
		t.Errorf("rendered:\n%s", out.String())
	}
}
