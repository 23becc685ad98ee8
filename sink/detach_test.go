package sink

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// firstVersionFreed commits 6 appends to a new table, each on the table the previous commit
// returned (detached or not), keeps only the last, and reports whether the metadata of the
// first commit's table was garbage-collected.
func firstVersionFreed(t *testing.T, detach bool) bool {
	ctx := context.Background()
	cat, err := OpenCatalog(ctx, DefaultCatalogConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64})
	tbl, err := cat.CreateTable(ctx, table.Identifier{"shop", "t"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	fsF := tbl.FS
	asc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	var freed atomic.Bool
	for i := 1; i <= 6; i++ {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.Append(int64(i))
		rec := array.NewRecordBatch(asc, []arrow.Array{b.NewArray()}, 1)
		txn := tbl.NewTransaction()
		if err := txn.AppendTable(ctx, array.NewTableFromRecords(asc, []arrow.RecordBatch{rec}), 10, nil); err != nil {
			t.Fatal(err)
		}
		if tbl, err = txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if detach {
			tbl = commit.Detach(tbl, cat, fsF)
		}
		if i == 1 {
			runtime.SetFinalizer(tbl.Metadata(), func(table.Metadata) { freed.Store(true) })
		}
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !freed.Load(); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(tbl)
	return freed.Load()
}

// iceberg-go v0.7.0 keeps every version a writer committed alive through its newest snapshot
// (commit.Detach says how): 200 tables committing every second kept 1.1 GiB after 300 s. A
// writer that keeps detached tables keeps only the last.
func TestDetachedTablesKeepNoEarlierVersion(t *testing.T) {
	if !firstVersionFreed(t, true) {
		t.Fatal("a detached table keeps the table of the first commit alive")
	}
	if firstVersionFreed(t, false) {
		t.Fatal("iceberg-go no longer keeps earlier versions alive through a committed table: commit.Detach can go")
	}
}
