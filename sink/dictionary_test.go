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
	_, tbl := scanRows(t, h.cat, "users")
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
		want := map[string]bool{"id": false, "name": true, "amount": false}
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
