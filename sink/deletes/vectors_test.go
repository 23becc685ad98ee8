package deletes_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// The planner's tests make their tables with iceberg-go alone (no sink): a table of an int64 key
// and a name, with a data file per append.

var ident = table.Identifier{"shop", "users"}

// newTable creates shop.users at formatVersion with rows of keys from..to, one data file per
// range given.
func newTable(t *testing.T, mem memory.Allocator, formatVersion int, ranges ...[2]int64) (catalog.Catalog, *table.Table) {
	t.Helper()
	ctx := context.Background()
	cat := sinktest.Catalog(t, t.TempDir())
	if err := cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String})
	tbl, err := cat.CreateTable(ctx, ident, sc, catalog.WithProperties(iceberg.Properties{"format-version": fmt.Sprint(formatVersion)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		tbl = appendRows(t, mem, tbl, r[0], r[1])
	}
	return cat, tbl
}

// appendRows commits rows of keys from..to (name "n<key>") as one data file.
func appendRows(t *testing.T, mem memory.Allocator, tbl *table.Table, from, to int64) *table.Table {
	t.Helper()
	asc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(mem, asc)
	defer b.Release()
	for k := from; k <= to; k++ {
		b.Field(0).(*array.Int64Builder).Append(k)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("n%d", k))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	at := array.NewTableFromRecords(asc, []arrow.RecordBatch{rec})
	defer at.Release()
	txn := tbl.NewTransaction()
	if err := txn.AppendTable(context.Background(), at, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	tbl, err = txn.Commit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// eqDeletes writes (does not commit) an equality-delete file of keys on tbl.
func eqDeletes(t *testing.T, mem memory.Allocator, tbl *table.Table, keys []int64) []iceberg.DataFile {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64,
		Metadata: arrow.NewMetadata([]string{table.ArrowParquetFieldIDKey}, []string{"1"})}}, nil)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues(keys, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	files, err := tbl.NewTransaction().WriteEqualityDeletes(context.Background(), []int{1},
		func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// commit commits v on tbl as a writer does.
func commit(t *testing.T, tbl *table.Table, v *deletes.Vectors) *table.Table {
	t.Helper()
	ctx := context.Background()
	txn := tbl.NewTransaction()
	rd := txn.NewRowDelta(nil).AddDeletes(v.Add...)
	if len(v.Remove) > 0 {
		rd.RemoveDeletes(v.Remove...)
	}
	if err := rd.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// want renders the rows of keys 1..n but those deleted.
func want(n int64, deleted ...int64) []string {
	var out []string
	for k := int64(1); k <= n; k++ {
		if !slices.Contains(deleted, k) {
			out = append(out, fmt.Sprintf("id=%d,name=n%d", k, k))
		}
	}
	return out
}

// Keys held in memory become deletion vectors on the head: one per data file holding a key, at
// the keys' positions, with no file written but the vectors; a later batch merges its positions
// with the live vectors it replaces. The table reads the rows left. Through a key cache or not,
// the plans are the same.
func TestVectorsOfKeys(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			t.Parallel()
			mem := sinktest.Allocator(t)
			_, tbl := newTable(t, mem, 3, [2]int64{1, 100}, [2]int64{101, 200})
			var cache *deletes.KeyCache
			if cached {
				cache = deletes.NewKeyCache(1 << 20)
			}
			pl := deletes.NewPlanner(cache)
			ctx := context.Background()
			v, err := pl.VectorsOfKeys(ctx, tbl, []int{1}, []deletes.Keys{{Values: []int64{3, 1, 150, 5000}}})
			if err != nil {
				t.Fatal(err)
			}
			if v.Probed != 2 || v.Positions != 3 || len(v.Add) != 2 || len(v.Remove) != 0 {
				t.Fatalf("first batch: %+v, want 2 files probed, 3 positions in 2 new vectors", v)
			}
			got := slices.Sorted(maps.Values(mapLen(sinktest.VectorPositions(t, tbl, v.Add))))
			if !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("positions per vector %v, want 1 and 2", got)
			}
			tbl = commit(t, tbl, v)
			sinktest.Eq(t, sinktest.Rows(t, tbl, nil), want(200, 1, 3, 150)...)

			v, err = pl.VectorsOfKeys(ctx, tbl, []int{1}, []deletes.Keys{{Values: []int64{2}}})
			if err != nil {
				t.Fatal(err)
			}
			if v.Probed != 1 || v.Positions != 3 || len(v.Add) != 1 || len(v.Remove) != 1 {
				t.Fatalf("second batch: %+v, want the first file's vector replaced by one of 3 positions", v)
			}
			tbl = commit(t, tbl, v)
			sinktest.Eq(t, sinktest.Rows(t, tbl, nil), want(200, 1, 2, 3, 150)...)
		})
	}
}

// The same keys planned from memory and from an equality-delete file make the same vectors.
func TestVectorsOfKeysMatchVectorsOfFiles(t *testing.T) {
	t.Parallel()
	mem := sinktest.Allocator(t)
	_, tbl := newTable(t, mem, 3, [2]int64{1, 500}, [2]int64{300, 800})
	keys := []int64{7, 300, 301, 499, 500, 650, 9999}
	pl := deletes.NewPlanner(deletes.NewKeyCache(1 << 20))
	ctx := context.Background()
	files := eqDeletes(t, mem, tbl, keys)
	fromFiles, err := pl.VectorsOfFiles(ctx, tbl, files)
	if err != nil {
		t.Fatal(err)
	}
	fromKeys, err := pl.VectorsOfKeys(ctx, tbl, []int{1}, []deletes.Keys{{Values: keys}})
	if err != nil {
		t.Fatal(err)
	}
	if fromKeys.Probed != fromFiles.Probed || fromKeys.Positions != fromFiles.Positions || fromKeys.Positions != 10 {
		t.Fatalf("from keys %+v, from files %+v: want the same 10 positions", fromKeys, fromFiles)
	}
	if a, b := sinktest.VectorPositions(t, tbl, fromKeys.Add), sinktest.VectorPositions(t, tbl, fromFiles.Add); !maps.EqualFunc(a, b, slices.Equal[[]uint64]) {
		t.Fatalf("positions from keys %v, from files %v", a, b)
	}
}

// VectorsOfKeys refuses a table before format version 3 and a key that is not one integer
// column; a table without a snapshot has nothing to delete.
func TestVectorsOfKeysRefuses(t *testing.T) {
	t.Parallel()
	mem := sinktest.Allocator(t)
	ctx := context.Background()
	pl := deletes.NewPlanner(nil)
	_, v2 := newTable(t, mem, 2, [2]int64{1, 10})
	if _, err := pl.VectorsOfKeys(ctx, v2, []int{1}, []deletes.Keys{{Values: []int64{1}}}); err == nil {
		t.Error("a format v2 table: no error")
	}
	_, empty := newTable(t, mem, 3)
	if _, err := pl.VectorsOfKeys(ctx, empty, []int{2}, []deletes.Keys{{Values: []int64{1}}}); err == nil {
		t.Error("a string key: no error")
	}
	if v, err := pl.VectorsOfKeys(ctx, empty, []int{1}, []deletes.Keys{{Values: []int64{1}}}); err != nil || len(v.Add) != 0 {
		t.Errorf("a table without a snapshot: %+v %v, want no vector", v, err)
	}
}

func mapLen(m map[string][]uint64) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// Keys of one partition delete only in that partition's data files; keys without a partition
// delete in every data file.
func TestVectorsOfKeysByPartition(t *testing.T) {
	t.Parallel()
	mem := sinktest.Allocator(t)
	ctx := context.Background()
	cat := sinktest.Catalog(t, t.TempDir())
	if err := cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "region", Type: iceberg.PrimitiveTypes.Int32, Required: true})
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "region", Transform: iceberg.IdentityTransform{}})
	tbl, err := cat.CreateTable(ctx, ident, sc, catalog.WithPartitionSpec(&spec),
		catalog.WithProperties(iceberg.Properties{"format-version": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	asc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(mem, asc)
	defer b.Release()
	for _, region := range []int32{1, 2} {
		for k := int64(1); k <= 10; k++ {
			b.Field(0).(*array.Int64Builder).Append(k)
			b.Field(1).(*array.Int32Builder).Append(region)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	at := array.NewTableFromRecords(asc, []arrow.RecordBatch{rec})
	defer at.Release()
	txn := tbl.NewTransaction()
	if err := txn.AppendTable(ctx, at, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	if tbl, err = txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _, err := deletes.LiveFilesAll(fs, tbl.CurrentSnapshot())
	if err != nil || len(data) != 2 {
		t.Fatalf("%d data files, %v; want one per region", len(data), err)
	}
	region1 := data[0].File
	if fmt.Sprint(region1.Partition()[1000]) != "1" {
		region1 = data[1].File
	}
	pl := deletes.NewPlanner(deletes.NewKeyCache(1 << 20))
	v, err := pl.VectorsOfKeys(ctx, tbl, []int{1}, []deletes.Keys{
		{SpecID: region1.SpecID(), Partition: region1.Partition(), Values: []int64{5}},
		{Values: []int64{7}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := sinktest.VectorPositions(t, tbl, v.Add)
	if len(got) != 2 || !slices.Equal(got[region1.FilePath()], []uint64{4, 6}) {
		t.Fatalf("positions by data file %v: want 4 and 6 in region 1's %s, 6 in region 2's", got, region1.FilePath())
	}
	tbl = commit(t, tbl, v)
	var rows []string
	for _, region := range []int{1, 2} {
		for k := 1; k <= 10; k++ {
			if k != 7 && (k != 5 || region != 1) {
				rows = append(rows, fmt.Sprintf("id=%d,region=%d", k, region))
			}
		}
	}
	sinktest.Eq(t, sinktest.Rows(t, tbl, nil), rows...)
}

// Keys other than one integer column (a text key, a composite key) are planned from memory
// through the key cache's encoded columns: the first plan reads each probed file's key columns
// once, later plans of the same columns look them up (no read), and a plan of other key columns
// caches its own. A key with a null value and integers for a text key are refused.
func TestVectorsOfEncodedKeys(t *testing.T) {
	t.Parallel()
	mem := sinktest.Allocator(t)
	ctx := context.Background()
	_, tbl := newTable(t, mem, 3, [2]int64{1, 100}, [2]int64{101, 200})
	cache := deletes.NewKeyCache(1 << 20)
	pl := deletes.NewPlanner(cache)
	text := func(s ...string) []deletes.Keys {
		var k deletes.Keys
		for _, v := range s {
			k.Tuples = append(k.Tuples, []dms.Datum{{S: v}})
		}
		return []deletes.Keys{k}
	}
	v, err := pl.VectorsOfKeys(ctx, tbl, []int{2}, text("n3", "n150", "n5000", "n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Probed != 2 || v.Positions != 2 || len(v.Add) != 2 {
		t.Fatalf("text keys: %+v, want 2 files probed, 2 positions in 2 new vectors", v)
	}
	held, hits, reads := cache.Stats()
	if held == 0 || hits != 0 || reads != 2 {
		t.Fatalf("cache after the first plan: %d bytes, %d hits, %d reads; want 2 columns read and held", held, hits, reads)
	}
	tbl = commit(t, tbl, v)
	sinktest.Eq(t, sinktest.Rows(t, tbl, nil), want(200, 3, 150)...)

	v, err = pl.VectorsOfKeys(ctx, tbl, []int{2}, text("n99"))
	if err != nil || v.Probed != 1 || v.Positions != 2 || len(v.Remove) != 1 {
		t.Fatalf("text key again: %+v %v, want the first file's vector replaced by one of 2 positions", v, err)
	}
	if _, hits2, reads2 := cache.Stats(); hits2 != 1 || reads2 != reads {
		t.Fatalf("the second plan: %d hits, %d reads; want its file looked up, not read", hits2, reads2)
	}
	tbl = commit(t, tbl, v)

	composite := []deletes.Keys{{Tuples: [][]dms.Datum{{{I: 7}, {S: "n7"}}, {{I: 8}, {S: "n9"}}, {{I: 120}, {S: "n120"}}}}}
	if v, err = pl.VectorsOfKeys(ctx, tbl, []int{1, 2}, composite); err != nil || v.Positions != 2+3 {
		t.Fatalf("composite keys: %+v %v, want 2 positions with the 3 live ones", v, err)
	}
	tbl = commit(t, tbl, v)
	sinktest.Eq(t, sinktest.Rows(t, tbl, nil), want(200, 3, 7, 99, 120, 150)...)

	if _, err := pl.VectorsOfKeys(ctx, tbl, []int{1, 2}, []deletes.Keys{{Tuples: [][]dms.Datum{{{I: 9}, {Null: true}}}}}); err == nil {
		t.Error("a key with a null value: no error")
	}
	if _, err := pl.VectorsOfKeys(ctx, tbl, []int{2}, []deletes.Keys{{Values: []int64{1}}}); err == nil {
		t.Error("integers for a text key: no error")
	}
	if _, err := pl.VectorsOfKeys(ctx, tbl, []int{1}, text("1")); err == nil {
		t.Error("tuples for an integer key: no error")
	}
}
