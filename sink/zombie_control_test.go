package sink

import (
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// A zombie worker (its lease moved, a newer worker processes the same shard)
// applies an old control record on its stale view of the table; its commit loses the race, the
// table is refreshed, and the record must be re-checked on the refreshed table (watermark of its
// shard, control staleness) before it is re-planned against the newer schema, which would mark
// the newer worker's live columns dropped at the source.

// ctlAt submits a control record (ctl's def syntax) with the given timestamp.
func (h *harness) ctlAt(shard string, seq int, tbl, op, def, ts string) {
	h.t.Helper()
	ev := ctlEvent(shard, seq, tbl, op, def)
	ev.Meta.Timestamp = ts
	h.event(ev)
}

const (
	ts1 = "2025-01-01T00:00:01.000000Z"
	ts2 = "2025-01-01T00:00:02.000000Z"
	ts3 = "2025-01-01T00:00:03.000000Z"
)

// zombieSetup returns the zombie, which created the table (id, name) from a create-table of
// shard c at seq 1 and still holds that view while newer workers commit to the same catalog.
func zombieSetup(t *testing.T, dir string, opts ...harnessOption) *harness {
	t.Helper()
	zombie := newHarness(t, dir, append([]harnessOption{withMaintenance(nil)}, opts...)...)
	zombie.ctlAt("c", 1, "items", "create-table", "id*:INT4 name:WSTRING", ts1)
	zombie.data("d", 1, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	zombie.flush()
	return zombie
}

func assertUnchangedByZombie(t *testing.T, zombie *harness, before string) {
	t.Helper()
	after := loadTable(t, zombie, "shop", "items")
	if after.MetadataLocation() != before {
		t.Fatalf("the zombie committed to the table: %s, was %s; schema %v", after.MetadataLocation(), before, after.Schema())
	}
	for _, f := range after.Schema().Fields() {
		if strings.HasPrefix(f.Doc, droppedDoc) {
			t.Fatalf("live column %s marked %q", f.Name, f.Doc)
		}
	}
}

// The zombie's control record is covered by the refreshed table's watermark of its shard: the
// newer worker applied it (and a newer table-def after it).
func TestZombieControlCoveredAfterRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zombie := zombieSetup(t, dir)
	owner := newHarness(t, dir, withMaintenance(nil))
	owner.ctlAt("c", 5, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4", ts2)
	owner.ctlAt("c", 6, "items", "add-column", "id*:INT4 name:WSTRING qty:INT4 tier:WSTRING", ts3)
	owner.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("qty", "1"), col("tier", "'gold'")}, nil)
	owner.flush()
	owner.close()
	before := loadTable(t, zombie, "shop", "items").MetadataLocation()

	zombie.ctlAt("c", 5, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4", ts2)
	zombie.flush()
	zombie.close()
	assertUnchangedByZombie(t, zombie, before)
	if got := zombie.ack.N.Load(); got != 3 {
		t.Fatalf("zombie acknowledged %d, want 3", got)
	}
	rows, _ := scanRows(t, zombie.cat, "items")
	eq(t, rows, "id=1,name=a,qty=null,tier=null", "id=2,name=b,qty=1,tier=gold")
}

// The zombie's control record comes from a shard the table has no watermark for, but the
// refreshed table applied a newer control record: stale, skipped.
func TestZombieControlStaleAfterRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zombie := zombieSetup(t, dir)
	owner := newHarness(t, dir, withMaintenance(nil))
	owner.ctlAt("c", 2, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4 tier:WSTRING", ts3)
	owner.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("qty", "1"), col("tier", "'gold'")}, nil)
	owner.flush()
	owner.close()
	before := loadTable(t, zombie, "shop", "items").MetadataLocation()

	zombie.ctlAt("c2", 5, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4", ts2)
	zombie.flush()
	zombie.close()
	assertUnchangedByZombie(t, zombie, before)
	if got := zombie.ack.N.Load(); got != 3 {
		t.Fatalf("zombie acknowledged %d, want 3", got)
	}
}

// A zombie's drop-table that the newer worker applied and followed with a create-table must not
// mark the re-created table dropped again.
func TestZombieDropTableAfterRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := withConfig(func(c *Config) { c.DropTable = DropTableMark })
	zombie := zombieSetup(t, dir, mark)
	owner := newHarness(t, dir, withMaintenance(nil), mark)
	owner.ctlAt("c", 5, "items", "drop-table", "", ts2)
	owner.ctlAt("c", 6, "items", "create-table", "id*:INT4 name:WSTRING", ts3)
	owner.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	owner.flush()
	owner.close()
	tbl := loadTable(t, zombie, "shop", "items")
	if tbl.Properties()[tableprop.Status] != tableprop.StatusActive {
		t.Fatalf("setup: the owner left the table %q", tbl.Properties()[tableprop.Status])
	}
	before := tbl.MetadataLocation()

	zombie.ctlAt("c", 5, "items", "drop-table", "", ts2)
	zombie.flush()
	assertUnchangedByZombie(t, zombie, before)
	if st := zombie.s.TableStatuses(); len(st) != 1 || st[0].Status != tableprop.StatusActive {
		t.Fatalf("zombie statuses %+v, want active", st)
	}
	zombie.close()
}

// A zombie's create-table with a primary key, on a table a newer create-table left keyless,
// must not set the key after the refresh.
func TestZombieKeyAfterRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zombie := newHarness(t, dir, withMaintenance(nil))
	zombie.ctlAt("c", 1, "items", "create-table", "id:INT4 name:WSTRING", ts1)
	zombie.data("d", 1, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	zombie.flush()
	owner := newHarness(t, dir, withMaintenance(nil))
	owner.ctlAt("c", 6, "items", "create-table", "id:INT4 name:WSTRING qty:INT4", ts3) // commits ts3
	owner.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("qty", "1")}, nil)
	owner.flush()
	owner.close()
	before := loadTable(t, zombie, "shop", "items").MetadataLocation()

	zombie.ctlAt("c2", 5, "items", "create-table", "id*:INT4 name:WSTRING", ts2)
	zombie.flush()
	zombie.close()
	assertUnchangedByZombie(t, zombie, before)
}

// A zombie that saw the table dropped holds the create-table that re-creates it; the newer
// worker applied it: the zombie commits nothing and takes the lifted mark from the table.
func TestZombieCreateTableAfterDropAfterRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := withConfig(func(c *Config) { c.DropTable = DropTableMark })
	zombie := zombieSetup(t, dir, mark)
	zombie.ctlAt("c", 2, "items", "drop-table", "", ts2)
	zombie.flush()
	owner := newHarness(t, dir, withMaintenance(nil), mark)
	owner.ctlAt("c", 5, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4", ts3)
	owner.data("d", 2, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("qty", "1")}, nil)
	owner.flush()
	owner.close()
	before := loadTable(t, zombie, "shop", "items").MetadataLocation()

	zombie.ctlAt("c", 5, "items", "create-table", "id*:INT4 name:WSTRING qty:INT4", ts3)
	zombie.flush()
	assertUnchangedByZombie(t, zombie, before)
	if st := zombie.s.TableStatuses(); len(st) != 1 || st[0].Status != tableprop.StatusActive {
		t.Fatalf("zombie statuses %+v, want active", st)
	}
	zombie.close()
}
