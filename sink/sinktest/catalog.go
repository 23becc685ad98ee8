package sinktest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"

	// The SQL catalog (registers "sql") and the pure-Go SQLite driver (registers "sqlite").
	_ "github.com/apache/iceberg-go/catalog/sql"
	_ "modernc.org/sqlite"
)

// Catalog opens a SQL catalog on SQLite with its warehouse under dir, as the sink's embedded
// catalog, for tests that make their tables without a sink; it is closed when the test ends.
func Catalog(t testing.TB, dir string) catalog.Catalog {
	t.Helper()
	wh := filepath.Join(dir, "warehouse")
	if err := os.MkdirAll(wh, 0o755); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(context.Background(), "test", iceberg.Properties{
		"type": "sql", "sql.driver": "sqlite", "sql.dialect": "sqlite",
		"uri":       "file:" + filepath.Join(dir, "catalog.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate",
		"warehouse": "file://" + wh,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cat.(io.Closer); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	return cat
}
