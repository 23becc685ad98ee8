package maintenance_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// Conversions probe the data files' key columns through the process's key cache: the first
// probe of a file reads it and caches its column, later conversions answer from memory, and the
// rows come out the same. A bound too small for any column caches nothing and changes nothing
// else; the cache never holds more than its bound.
func TestConversionsProbeThroughTheKeyCache(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		limit   int64
		cached  bool
		dvTable bool
	}{
		{"dv", 1 << 20, true, true},
		{"position", 1 << 20, true, false},
		{"bound-below-any-column", 100, false, true},
		{"bound-of-about-one-file", 4000, true, true}, // the load's 300 keys take 2,464 bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			def := usersDef
			cfg := positionConfig()
			if tc.dvTable {
				def = dvDef()
				cfg.DeleteMode = maintenance.DeleteModeDV
			}
			h := newHarnessFor(t, dir, def)
			m := newModel(h)
			m.load(300)
			mt, cache := cachedMaintainer(t, h, cfg, tc.limit)
			for b := 1; b <= 4; b++ {
				m.batch(b, 300)
				rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
				if err != nil {
					t.Fatal(err)
				}
				if rep.EqualityDeletesConverted == 0 || rep.PositionDeletesWritten == 0 {
					t.Fatalf("conversion %d: report %+v: want equality deletes converted", b, rep)
				}
				rows, tbl := scanRows(t, h.cat)
				sinktest.Eq(t, rows, m.want()...)
				if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 0 {
					t.Fatalf("conversion %d: %d equality delete files left", b, eqFiles)
				}
				if n := maintenance.Held(cache); n > tc.limit {
					t.Fatalf("conversion %d: the cache holds %d bytes, above its bound %d", b, n, tc.limit)
				}
			}
			_, hits, reads := cache.Stats()
			// Every conversion probes the load's file (each batch changes keys in it); the
			// first reads it.
			if reads == 0 {
				t.Fatalf("no probe read a file (hits %d)", hits)
			}
			if tc.cached && (hits < 3 || maintenance.Held(cache) == 0) {
				t.Fatalf("hits %d, reads %d, %d bytes held: want the load's file answered from the cache by conversions 2-4", hits, reads, maintenance.Held(cache))
			}
			if !tc.cached && (hits != 0 || maintenance.Held(cache) != 0) {
				t.Fatalf("hits %d, %d bytes held with a bound of %d bytes: want nothing cached", hits, maintenance.Held(cache), tc.limit)
			}
			h.close()
		})
	}
}

// A committed compaction drops the cached columns of the data files it rewrote (no probe reads
// them again), so the cache holds only live files' columns and the bound goes to them.
func TestCompactionForgetsRewrittenColumns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarnessFor(t, dir, dvDef())
	m := newModel(h)
	m.load(300)
	cfg := positionConfig()
	cfg.DeleteMode = maintenance.DeleteModeDV
	cfg.RewriteDeletedFraction = 0.01 // the loaded file is rewritten once a batch deleted in it
	mt, cache := cachedMaintainer(t, h, cfg, 1<<20)
	for b := 1; b <= 3; b++ {
		m.batch(b, 300)
		if _, err := mt.Maintain(context.Background(), maintenance.PositionOnly); err != nil {
			t.Fatal(err)
		}
	}
	before := cache.CachedPaths()
	if len(before) == 0 {
		t.Fatal("nothing cached by the conversions")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil || !rep.Compacted || rep.DataFilesRewritten == 0 {
		t.Fatalf("compaction: %+v, %v", rep, err)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, task := range tasks {
		live[task.File.FilePath()] = true
	}
	dropped := 0
	for _, p := range before {
		if !live[p] {
			dropped++
		}
	}
	if dropped == 0 {
		t.Fatalf("the compaction rewrote none of the %d cached files", len(before))
	}
	for _, p := range cache.CachedPaths() {
		if !live[p] {
			t.Fatalf("the cache still holds the column of %s, which the compaction removed (%d of %d cached files were rewritten)", p, dropped, len(before))
		}
	}
	h.close()
}

// cachedMaintainer is a maintainer of h's table that probes through a key cache of limit bytes
// and holds the table's lease.
func cachedMaintainer(t *testing.T, h *harness, cfg maintenance.Config, limit int64) (*maintenance.Maintainer, *maintenance.KeyCache) {
	t.Helper()
	cache := maintenance.NewKeyCache(limit)
	mt := testMaintainer(t, h.cat, cfg)
	mt.UseKeyCache(cache)
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	return mt, cache
}

// A nil cache (key_cache_bytes 0) reads every file and reports nothing.
func TestKeyCacheOff(t *testing.T) {
	t.Parallel()
	c := maintenance.NewKeyCache(0)
	if c != nil {
		t.Fatalf("NewKeyCache(0) = %v, want nil", c)
	}
	if held, hits, reads := c.Stats(); held != 0 || c.Limit() != 0 || hits != 0 || reads != 0 {
		t.Fatal("a nil cache reports state")
	}
}

// The manifest cache lists the same live files (with their sequence numbers) as reading every
// manifest, snapshot after snapshot, and keeps only the manifests of its last two listings:
// after a compaction replaced the table's manifests, the old ones leave the cache two listings
// later.
func TestManifestCacheListsWhatTheManifestsHold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 0)
	mt := testMaintainer(t, h.cat, positionConfig())
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	var prev map[string]bool
	compacted := false
	for b := 1; b <= 6; b++ {
		m.batch(b, 100)
		if b == 4 {
			rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
			if err != nil || !rep.Compacted {
				t.Fatalf("compaction: %+v, %v", rep, err)
			}
			compacted = true
		}
		tbl := loadUsers(t, h.cat)
		_, mans := sinktest.ManifestsOf(t, tbl)
		cur := map[string]bool{}
		for _, mf := range mans {
			cur[mf.FilePath()] = true
		}
		cached, direct, kept, err := mt.ListLive(context.Background(), tbl)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cached, direct) {
			t.Fatalf("batch %d: cached listing %v, manifests hold %v", b, cached, direct)
		}
		for _, path := range kept {
			if !cur[path] && !prev[path] {
				t.Fatalf("batch %d: manifest %s cached, in neither of the last two listings", b, path)
			}
		}
		prev = cur
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if !compacted {
		t.Fatal("no compaction")
	}
	h.close()
}
