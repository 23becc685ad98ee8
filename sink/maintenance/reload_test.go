package maintenance_test

import (
	"context"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// While a reload is in progress (tableprop.ReloadBefore set) the maintainer does not compact:
// the rewritten files would carry the rows from before the reload above its sequence number,
// where the reload's replace would not remove them. Once the mark is gone it compacts again.
func TestNoCompactionWhileReloading(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	ctx := context.Background()
	setProps := func(set iceberg.Properties, remove []string) {
		txn := loadUsers(t, h.cat).NewTransaction()
		if len(set) > 0 {
			if err := txn.SetProperties(set); err != nil {
				t.Fatal(err)
			}
		}
		if len(remove) > 0 {
			if err := txn.RemoveProperties(remove); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	setProps(iceberg.Properties{tableprop.ReloadBefore: "4", tableprop.ReloadRows: "0", tableprop.ReloadStarted: "2025-01-01T00:00:00.000000Z"}, nil)
	mt := testMaintainer(t, h.cat, testConfig())
	mt.IgnoreLease()
	rep, err := mt.Maintain(ctx, maintenance.CompactOnly)
	if err != nil || rep.Compacted {
		t.Fatalf("compacted %v (%v) while a reload is in progress", rep.Compacted, err)
	}
	setProps(nil, tableprop.ReloadProps)
	if rep, err = mt.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted {
		t.Fatalf("not compacted (%v) after the reload ended", err)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}
