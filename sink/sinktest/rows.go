package sinktest

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// LoadTable loads ident from cat or fails the test.
func LoadTable(t testing.TB, cat catalog.Catalog, ident table.Identifier) *table.Table {
	t.Helper()
	tbl, err := cat.LoadTable(context.Background(), ident)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// Rows scans tbl through iceberg-go with opts (table.WithSnapshotID: a branch, an older
// snapshot) and renders each row as "c1=v1,c2=v2", sorted. A null is rendered "null", except
// in the columns named in omitNull, which a row shows only when set.
func Rows(t testing.TB, tbl *table.Table, omitNull []string, opts ...table.ScanOption) []string {
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
					if slices.Contains(omitNull, f.Name) {
						continue
					}
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

// Eq fails the test unless got holds the rows of want, in any order (got sorted).
func Eq(t testing.TB, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// ManifestsOf returns tbl's file IO and the manifests of its current snapshot.
func ManifestsOf(t testing.TB, tbl *table.Table) (icebergio.IO, []iceberg.ManifestFile) {
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

// DataSeqs returns the data sequence number of every live data file of tbl's current snapshot.
func DataSeqs(t testing.TB, tbl *table.Table) map[string]int64 {
	t.Helper()
	fs, mans := ManifestsOf(t, tbl)
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

// LiveEntries returns the live files (data and deletes) of tbl's current snapshot.
func LiveEntries(t testing.TB, tbl *table.Table) []iceberg.DataFile {
	t.Helper()
	fs, mans := ManifestsOf(t, tbl)
	var out []iceberg.DataFile
	for _, mf := range mans {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e.DataFile())
		}
	}
	return out
}

// VectorPositions reads deletion vectors: the positions of each, by the data file it references.
func VectorPositions(t testing.TB, tbl *table.Table, vectors []iceberg.DataFile) map[string][]uint64 {
	t.Helper()
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint64{}
	for _, df := range vectors {
		bm, err := dv.ReadDV(fs, df)
		if err != nil {
			t.Fatal(err)
		}
		out[*df.ReferencedDataFile()] = slices.Collect(bm.Positions())
	}
	return out
}
