package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

func TestRunTableCompactsExpiresAndKeepsWatermarks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 300, 12)
	rows, before := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	dataFiles, deleteFiles := maintenance.SummaryCounts(before.CurrentSnapshot())
	if deleteFiles != 13 || dataFiles != 13 { // upserts delete their key too, the load included
		t.Fatalf("before: %d delete files, %d data files; want 13 and 13", deleteFiles, dataFiles)
	}

	cfg := testConfig()
	cfg.KeepLast, cfg.SnapshotRetention = 2, 0
	rep, err := maintenance.RunTable(context.Background(), h.cat, usersIdent, cfg, maintenance.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted || rep.DataFilesRewritten != 13 || rep.DataFilesWritten != 1 || rep.DeleteFilesRemoved != 13 ||
		rep.DeleteFilesAfter != 0 || rep.DataFilesAfter != 1 || rep.DeleteRowsRemoved == 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.SnapshotsExpired == 0 || rep.SnapshotsAfter > 3 {
		t.Fatalf("expiry: %d expired, %d left (keep_last 2, plus the rewrite's own)", rep.SnapshotsExpired, rep.SnapshotsAfter)
	}
	rows, after := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if !maps.Equal(watermarks(after), watermarks(before)) || watermarks(after)["s0"] != fmt.Sprint(m.seq) {
		t.Fatalf("watermarks after maintenance %v, before %v", watermarks(after), watermarks(before))
	}
	if owner, until := maintenance.ReadLease(after.Properties()); !strings.HasPrefix(owner, "test#") || until.After(time.Now()) {
		t.Fatalf("lease after the run: %q until %s, want released", owner, until)
	}
	if after.Properties()[tableprop.LastCompaction] == "" {
		t.Fatal("no last-compaction property")
	}

	// CDC keeps applying on top of the compacted table (deletes of compacted rows, re-inserts).
	for b := 13; b <= 15; b++ {
		m.batch(b, 300)
	}
	rows, _ = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}

func TestOrphanCleanupOnlyRemovesOldUnreferencedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 20, 1)
	tbl := loadUsers(t, h.cat)
	dataDir := strings.TrimPrefix(tbl.Location(), "file://") + "/data"
	old, young := filepath.Join(dataDir, "stray-old.parquet"), filepath.Join(dataDir, "stray-young.parquet")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("not referenced"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	// Committed files older than the cutoff must stay too.
	_ = filepath.WalkDir(strings.TrimPrefix(tbl.Location(), "file://"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != young {
			_ = os.Chtimes(p, past, past)
		}
		return nil
	})
	cfg := testConfig()
	cfg.OrphanMinAge = time.Hour
	rep, err := maintenance.RunTable(context.Background(), h.cat, usersIdent, cfg, maintenance.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 1 {
		t.Fatalf("removed %d orphans, want 1", rep.OrphansRemoved)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old orphan still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("young file removed: %v", err)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if tbl.Properties()[tableprop.LastOrphanCleanup] == "" {
		t.Fatal("last orphan cleanup not recorded")
	}
	h.close()
}

// A table written by a newer state version of dms2iceberg is not maintained: RunTable refuses it
// (even with IgnoreLease) and commits nothing.
func TestRunTableRefusesNewerStateVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, _ := seeded(t, dir, 50, 1)
	ctx := context.Background()
	tbl, err := h.cat.LoadTable(ctx, usersIdent)
	if err != nil {
		t.Fatal(err)
	}
	txn := tbl.NewTransaction()
	if err := txn.SetProperties(map[string]string{tableprop.StateVersion: "2"}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ignore := range []bool{false, true} {
		_, err := maintenance.RunTable(ctx, h.cat, usersIdent, testConfig(), maintenance.RunOptions{IgnoreLease: ignore})
		if !stateversion.IsRefused(err) {
			t.Fatalf("RunTable (ignore lease %v) = %v, want a state-version refusal", ignore, err)
		}
	}
	if after, err := h.cat.LoadTable(ctx, usersIdent); err != nil || after.MetadataLocation() != tbl.MetadataLocation() {
		t.Fatalf("maintenance committed to a table of a newer state version (%v)", err)
	}
}
