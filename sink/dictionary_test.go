package sink

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The data files of a created table dictionary-encode the non-key string columns only: the
// key and the numbers are written plain (design.md §8).
func TestDictionaryOnlyOnNonKeyStrings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.users": usersDef}))
	for i := 1; i <= 50; i++ {
		h.submit("s0", i, change.OpLoad, "users", []change.Column{col("id", fmt.Sprint(i)), col("name", "'u"+fmt.Sprint(i%3)+"'"), col("amount", "1.5")}, nil)
	}
	h.flush()
	want := map[string]bool{"id": false, "name": true, "amount": false}
	checkDictionaries(t, h, "users", want)
}

// A string column whose DMS type holds long or unique text (a large object here) is written
// without a dictionary: it would outgrow the dictionary page and be re-encoded plain.
func TestNoDictionaryOnLargeText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir())
	h.ctl("c", 1, "notes", "create-table", "id*:INT4 kind:WSTRING body:NCLOB")
	for i := 1; i <= 50; i++ {
		h.data("d", i, "notes", change.OpInsert, cols(col("id", fmt.Sprint(i)), col("kind", "'k"+fmt.Sprint(i%3)+"'"), col("body", "'text "+fmt.Sprint(i)+"'")), nil)
	}
	h.flush()
	checkDictionaries(t, h, "notes", map[string]bool{"id": false, "kind": true, "body": false})
}

// checkDictionaries fails t unless every data file of table dictionary-encodes exactly the
// columns want marks true.
func checkDictionaries(t *testing.T, h *harness, table string, want map[string]bool) {
	t.Helper()
	_, tbl := scanRows(t, h.cat, table)
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) == 0 {
		t.Fatal("no data files")
	}
	for _, task := range tasks {
		u, err := url.Parse(task.File.FilePath())
		if err != nil {
			t.Fatal(err)
		}
		path := u.Path
		if path == "" {
			path = task.File.FilePath()
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := file.NewParquetReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		rg := r.MetaData().RowGroup(0)
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			name := cc.PathInSchema().String()
			dict := cc.HasDictionaryPage()
			for _, e := range cc.Encodings() {
				dict = dict || e == parquet.Encodings.RLEDict || e == parquet.Encodings.PlainDict
			}
			if w, ok := want[name]; !ok || dict != w {
				t.Errorf("%s: column %q dictionary-encoded = %v, want %v (known %v)", path, name, dict, w, ok)
			}
		}
		_ = r.Close()
	}
}
