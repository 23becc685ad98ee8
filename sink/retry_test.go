package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// The SQL catalog reports a lost race as a failed requirement without table.ErrCommitFailed;
// the commit loop still recognises it after the refresh by the moved table (commit.Moved), so the
// re-stage follows quickly.
func TestLostRaceRecognisedAfterRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.users": usersDef}))
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
	// The writer's table is the stale one its commit was staged on; the refresh finds the other
	// commit. A refresh with nothing new in between reports no race.
	fresh, err := h.cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if !commit.Moved(stale, fresh) {
		t.Fatalf("lost race not recognised after refresh: %v", lost)
	}
	again, err := h.cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if commit.Moved(fresh, again) {
		t.Fatal("a refresh of an unchanged table counted as a lost race")
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
