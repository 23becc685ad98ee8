package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// eqDeletesAt counts the live equality-delete files of snap.
func eqDeletesAt(t *testing.T, tbl *table.Table, snap *table.Snapshot) int {
	t.Helper()
	n, err := maintenance.CountDeletesIn(context.Background(), tbl, snap)
	if err != nil {
		t.Fatal(err)
	}
	return n.Equality
}

// leasedRun takes the table's lease for mt and runs steps once.
func leasedRun(t *testing.T, h *harness, mt *maintenance.Maintainer, steps maintenance.Steps) maintenance.Report {
	t.Helper()
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), steps)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// branchAt returns the positional branch's snapshot, failing the test when there is none.
func branchAt(t *testing.T, tbl *table.Table) *table.Snapshot {
	t.Helper()
	snap := tbl.Metadata().SnapshotByName("positional")
	if snap == nil {
		t.Fatal("the table has no positional branch")
	}
	return snap
}

// In position and dv mode the positional branch never holds an equality delete, and shows
// exactly the rows of a snapshot of main. A conversion whose plan (snapshot P) a CDC commit
// overtakes leaves main with that commit's equality deletes; the branch then shows P, converted,
// not main's head. Once main holds no equality delete, the branch is main's head.
func TestPositionalBranchHoldsNoEqualityDelete(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{maintenance.DeleteModePosition, maintenance.DeleteModeDV} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			def := usersDef
			if mode == maintenance.DeleteModeDV {
				def = dvDef()
			}
			h := newHarnessFor(t, dir, def)
			m := newModel(h)
			m.load(100)
			for b := 1; b <= 3; b++ {
				m.batch(b, 100)
			}
			before := m.want() // the rows of the snapshot the conversion plans on
			cfg := positionConfig()
			cfg.DeleteMode = mode
			mt := testMaintainer(t, h.cat, cfg)
			overtaken := false
			mt.BeforeCommit(func(step string, attempt int) {
				if step == "position" && !overtaken {
					overtaken = true
					// From other shards, as DMS spreads a table's keys: a delete and
					// an update of keys the load put on s0.
					m.del("s1", 7)
					m.upsert("s2", 8, "overtaking")
					h.flush()
				}
			})
			rep := leasedRun(t, h, mt, maintenance.PositionOnly)
			tbl := loadUsers(t, h.cat)
			if !rep.Converted || !rep.BranchMoved || eqDeletesAt(t, tbl, tbl.CurrentSnapshot()) != 1 {
				t.Fatalf("report %+v, %d equality deletes on main: want a conversion overtaken by one commit",
					rep, eqDeletesAt(t, tbl, tbl.CurrentSnapshot()))
			}
			at := branchAt(t, tbl)
			if n := eqDeletesAt(t, tbl, at); n != 0 {
				t.Fatalf("the positional branch holds %d equality-delete files", n)
			}
			sinktest.Eq(t, scanRowsOf(t, tbl, table.WithSnapshotID(at.SnapshotID)), before...)
			sinktest.Eq(t, scanRowsOf(t, tbl, table.WithSnapshotID(rep.BranchSource)), before...)
			if at.SnapshotID == tbl.CurrentSnapshot().SnapshotID {
				t.Fatal("the branch is main's head, which holds an equality delete")
			}
			if d, ok := maintenance.BranchBehind(tbl.Metadata(), "positional", time.Now()); !ok || d <= 0 {
				t.Fatalf("BranchBehind %s, %v: the branch shows P, before the overtaking commit", d, ok)
			}

			mt.BeforeCommit(nil)
			rep = leasedRun(t, h, mt, maintenance.PositionOnly)
			rows, tbl := scanRows(t, h.cat)
			sinktest.Eq(t, rows, m.want()...)
			at = branchAt(t, tbl)
			if !rep.BranchMoved || at.SnapshotID != tbl.CurrentSnapshot().SnapshotID {
				t.Fatalf("report %+v: the branch is at %d, main at %d; with no equality delete left it follows main",
					rep, at.SnapshotID, tbl.CurrentSnapshot().SnapshotID)
			}
			sinktest.Eq(t, scanRowsOf(t, tbl, table.WithSnapshotID(at.SnapshotID)), m.want()...)
			if d, ok := maintenance.BranchBehind(tbl.Metadata(), "positional", time.Now()); !ok || d != 0 {
				t.Fatalf("BranchBehind %s, %v at main's head", d, ok)
			}

			// A compaction moves main; the branch follows it (main holds no equality delete).
			rep = leasedRun(t, h, mt, maintenance.CompactOnly)
			tbl = loadUsers(t, h.cat)
			if at = branchAt(t, tbl); !rep.Compacted || at.SnapshotID != tbl.CurrentSnapshot().SnapshotID {
				t.Fatalf("report %+v: after a compaction the branch is at %d, main at %d", rep, at.SnapshotID, tbl.CurrentSnapshot().SnapshotID)
			}
			sinktest.Eq(t, scanRowsOf(t, tbl, table.WithSnapshotID(at.SnapshotID)), m.want()...)
			h.close()
		})
	}
}

// With positional_branch "" no branch is kept.
func TestPositionalBranchOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 2)
	cfg := positionConfig()
	cfg.PositionalBranch = ""
	rep := leasedRun(t, h, testMaintainer(t, h.cat, cfg), maintenance.PositionOnly)
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if !rep.Converted || rep.BranchMoved || tbl.Metadata().SnapshotByName("positional") != nil {
		t.Fatalf("report %+v: a branch was kept with positional_branch off", rep)
	}
	h.close()
}
