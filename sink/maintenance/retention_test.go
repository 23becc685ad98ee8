package maintenance_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// deferredLists returns the deferred-deletion lists under dir and the files they name.
func deferredLists(t *testing.T, dir string) (lists, files []string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Base(filepath.Dir(p)) != "deferred-deletes" {
			return nil
		}
		lists = append(lists, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var l struct {
			DeleteAfter time.Time `json:"delete_after"`
			Files       []string  `json:"files"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		files = append(files, l.Files...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lists, files
}

func localPath(p string) string { return strings.TrimPrefix(p, "file://") }

// max_snapshots expires snapshots younger than snapshot_retention, so a table's metadata stops
// growing with the commit rate, but the files only those snapshots referenced (what a compaction
// replaced, old manifests and manifest lists) stay until snapshot_retention has passed: a query
// that started on one of them still reads. A later run (here a restarted process, which finds the
// list in storage) deletes them when due.
func TestMaxSnapshotsExpiresEarlyAndDefersFileDeletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 300, 5) // 6 snapshots, all seconds old
	ctx := context.Background()
	cfg := testConfig()
	cfg.KeepLast, cfg.MaxSnapshots, cfg.SnapshotRetention = 2, 10, time.Hour
	mt := testMaintainer(t, h.cat, cfg)
	mt.IgnoreLease()
	// A compaction (and the manifest rewrite after it) replaces every file so far; 15 CDC
	// commits follow.
	if rep, err := mt.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted || rep.SnapshotsExpired != 0 {
		t.Fatalf("compaction: %v, %+v", err, rep)
	}
	for b := 6; b <= 20; b++ {
		m.batch(b, 300)
	}
	if n := maintenance.Expirable(loadUsers(t, h.cat).Metadata(), 2, time.Hour, time.Now()); n != 0 {
		t.Fatalf("%d snapshots expirable by age alone, want 0", n)
	}
	rep, err := mt.Maintain(ctx, maintenance.ExpireAndManifests)
	if err != nil {
		t.Fatal(err)
	}
	// 6 + compaction + manifest rewrite + 15 = 23; the newest 10 stay.
	if rep.SnapshotsExpired != 13 || rep.FilesDeferred == 0 {
		t.Fatalf("report: %d snapshots expired (want 13), %d files deferred", rep.SnapshotsExpired, rep.FilesDeferred)
	}
	if n := len(loadUsers(t, h.cat).Metadata().Snapshots()); n != 11 {
		t.Fatalf("%d snapshots after expiry, want max_snapshots 10 and the manifest rewrite's after it", n)
	}
	lists, files := deferredLists(t, dir)
	if len(lists) != 1 || len(files) != rep.FilesDeferred {
		t.Fatalf("%d lists naming %d files, want 1 naming %d", len(lists), len(files), rep.FilesDeferred)
	}
	parquet := 0
	for _, f := range files {
		if _, err := os.Stat(localPath(f)); err != nil {
			t.Fatalf("deferred file deleted before snapshot_retention passed: %v", err)
		}
		if strings.HasSuffix(f, ".parquet") {
			parquet++
		}
	}
	if parquet == 0 {
		t.Fatalf("no data or delete file among the %d deferred (the compaction replaced some)", len(files))
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)

	// Not due yet: a run deletes nothing.
	mt2 := testMaintainer(t, h.cat, cfg)
	mt2.IgnoreLease()
	if n := mt2.ListDeferred(ctx, loadUsers(t, h.cat)); n != 1 {
		t.Fatalf("a new process found %d deferred lists, want 1", n)
	}
	if rep, err := mt2.Maintain(ctx, maintenance.Purge); err != nil || rep.DeferredFilesRemoved != 0 {
		t.Fatalf("purge before due: %d removed, %v", rep.DeferredFilesRemoved, err)
	}
	// Due: the files and the list go; the table reads the same.
	mt2.SetClock(func() time.Time { return time.Now().Add(cfg.SnapshotRetention + time.Minute) })
	rep, err = mt2.Maintain(ctx, maintenance.Purge)
	if err != nil || rep.DeferredFilesRemoved != len(files) {
		t.Fatalf("purge when due: %d of %d removed, %v", rep.DeferredFilesRemoved, len(files), err)
	}
	for _, f := range append(files, lists...) {
		if _, err := os.Stat(localPath(f)); !os.IsNotExist(err) {
			t.Fatalf("%s still there after the purge (%v)", f, err)
		}
	}
	rows, _ = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	// CDC goes on over the expired history.
	m.batch(21, 300)
	rows, _ = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}

// Without the cap, snapshots inside snapshot_retention stay, whatever their number.
func TestNoMaxSnapshotsKeepsRetention(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, _ := seeded(t, dir, 50, 15)
	cfg := testConfig()
	cfg.KeepLast, cfg.MaxSnapshots, cfg.SnapshotRetention = 2, 0, time.Hour
	mt := testMaintainer(t, h.cat, cfg)
	mt.IgnoreLease()
	rep, err := mt.Maintain(context.Background(), maintenance.ExpireAndManifests)
	if err != nil || rep.SnapshotsExpired != 0 {
		t.Fatalf("%d expired, %v; want 0", rep.SnapshotsExpired, err)
	}
	h.close()
}
