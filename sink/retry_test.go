package sink

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// A commit that lost to another writer is re-staged soon, at every attempt; other failures back
// off exponentially; a closing writer waits less in both cases.
func TestRetryDelay(t *testing.T) {
	const conflict, other = true, false
	cases := []struct {
		name     string
		conflict bool
		closing  bool
		attempt  int
		min, max time.Duration
	}{
		{"conflict first", conflict, false, 0, 10 * time.Millisecond, 20 * time.Millisecond},
		{"conflict late", conflict, false, 15, 500 * time.Millisecond, time.Second},
		{"conflict closing", conflict, true, 15, 125 * time.Millisecond, 250 * time.Millisecond},
		{"other first", other, false, 0, 25 * time.Millisecond, 50 * time.Millisecond},
		{"other late", other, false, 15, 10 * time.Second, 20 * time.Second},
		{"other closing", other, true, 15, time.Second, 2 * time.Second},
		{"huge attempt", other, false, 1 << 20, 10 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		for range 200 {
			d := retryDelay(c.attempt, c.conflict, c.closing)
			if d < c.min || d > c.max {
				t.Fatalf("%s: retryDelay(%d) = %s, want within [%s, %s]", c.name, c.attempt, d, c.min, c.max)
			}
		}
	}
}

// The SQL catalog reports a lost race as a failed requirement without table.ErrCommitFailed;
// reload still recognises it by the moved table, so the re-stage follows quickly.
func TestLostRaceRecognisedAfterReload(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, t.TempDir(), map[string]TableConfig{"shop.users": usersDef})
	h.submit("s0", 1, change.OpInsert, "users", []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	h.close()
	ident := table.Identifier{"shop", "users"}
	stale, err := h.cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := h.cat.LoadTable(ctx, ident)
	if _, err := other.Append(ctx, oneRow(t, other, 2), nil); err != nil {
		t.Fatal(err)
	}
	_, lost := stale.Append(ctx, oneRow(t, stale, 3), nil)
	if lost == nil {
		t.Fatal("a commit on a stale table succeeded")
	}
	if errors.Is(lost, table.ErrCommitFailed) {
		t.Logf("this catalog wraps table.ErrCommitFailed: %v", lost)
	}
	// The writer's table is the stale one its commit was staged on; the reload finds the other
	// commit. A reload with nothing new in between reports no race.
	w := &writer{s: h.s, ident: ident, name: "shop.users", tbl: stale}
	moved, err := w.reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatalf("lost race not recognised after reload: %v", lost)
	}
	moved, err = w.reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved {
		t.Fatal("a reload of an unchanged table counted as a lost race")
	}
}

// oneRow is a reader of one row of shop.users with the given id (other columns null).
func oneRow(t *testing.T, tbl *table.Table, id int32) array.RecordReader {
	t.Helper()
	as, err := dms.ArrowSchema(tbl.Schema())
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for i := range as.NumFields() {
		if as.Field(i).Name == "id" {
			b.Field(i).(*array.Int32Builder).Append(id)
		} else {
			b.Field(i).AppendNull()
		}
	}
	rec := b.NewRecordBatch()
	rdr, err := array.NewRecordReader(as, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	return rdr
}
