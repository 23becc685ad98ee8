package sink

import (
	"context"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Tables keep Spark's and Glue's commit retries: dms2iceberg creates them without
// commit.retry.num-retries, and a table an earlier version created with 0 loses it at its next
// commit (iceberg-go does not retry without it either; commit.ReplayGuard refuses values above 0).
func TestTablesLeaveCommitRetriesToOtherWriters(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	h.submit("s0", 1, change.OpInsert, "users", []change.Column{col("id", "1"), col("name", "'a'"), col("amount", "1")}, nil)
	h.flush()
	tbl := loadTable(t, h, "shop", "users")
	if v, ok := tbl.Properties()[table.CommitNumRetriesKey]; ok {
		t.Fatalf("a new table carries %s=%s: Spark and Glue would lose their commit retries", table.CommitNumRetriesKey, v)
	}
	txn := tbl.NewTransaction() // what earlier versions set
	if err := txn.SetProperties(iceberg.Properties{table.CommitNumRetriesKey: "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.close()
	h = newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef})) // a restart on the new version
	h.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'"), col("amount", "2")}, nil)
	h.flush()
	tbl = loadTable(t, h, "shop", "users")
	if v, ok := tbl.Properties()[table.CommitNumRetriesKey]; ok {
		t.Fatalf("after a commit the table still carries %s=%s", table.CommitNumRetriesKey, v)
	}
	rows, _ := scanRows(t, h.cat, "users")
	if len(rows) != 2 {
		t.Fatalf("rows %v, want 2", rows)
	}
}
