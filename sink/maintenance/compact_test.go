package maintenance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// A compaction reads the table at snapshot S while the writer commits a delete and an update of
// keys that are in the files being rewritten. The rewrite, committed afterwards, must keep the
// key deleted and the update visible: its files carry S's sequence number, so the newer
// equality deletes still apply to them.
func TestCompactionKeepsDeletesCommittedWhileItRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 4)
	start := loadUsers(t, h.cat).CurrentSnapshot()
	mt := testMaintainer(t, h.cat, testConfig())
	mt.AfterRewrite(func() {
		m.del("s0", 50)
		m.upsert("s0", 60, "concurrent")
		m.del("s0", 61)
		m.upsert("s0", 61, "reinserted")
		h.flush() // a CDC commit after S, before the rewrite commits
	})
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted {
		t.Fatalf("not compacted: %+v", rep)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	// The rewritten file has S's sequence number; the concurrent batch's data file keeps its own.
	seqs := sinktest.DataSeqs(t, tbl)
	var atStart, newer int
	for _, s := range seqs {
		switch {
		case s == start.SequenceNumber:
			atStart++
		case s > start.SequenceNumber:
			newer++
		}
	}
	if atStart != 1 || newer != 1 || len(seqs) != 2 {
		t.Fatalf("data sequence numbers %v: want one rewritten file at %d and the concurrent batch's file above it", seqs, start.SequenceNumber)
	}
	// Only the deletes at or below S were removed: the concurrent batch's delete file stays.
	if _, deleteFiles := maintenance.SummaryCounts(tbl.CurrentSnapshot()); deleteFiles != 1 {
		t.Fatalf("%d delete files after compaction, want 1 (the concurrent batch's)", deleteFiles)
	}
	if watermarks(tbl)["s0"] != fmt.Sprint(m.seq) {
		t.Fatalf("watermark %v, want %d", watermarks(tbl), m.seq)
	}
	h.close()
}

// The writer commits between the moment the compaction loaded the newest table and its commit:
// the compaction's commit fails on the catalog's snapshot requirement, is restaged on the new
// head and lands on the second attempt; the writer's next commit (its table is now stale) is
// retried the same way. Nothing is lost or resurrected.
func TestCompactionAndCDCCommitConflict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	mt := testMaintainer(t, h.cat, testConfig())
	conflicts := 0
	mt.BeforeCommit(func(step string, attempt int) {
		if step == "compact" && attempt == 0 {
			conflicts++
			m.del("s0", 7)
			m.upsert("s1", 8, "conflicting")
			h.flush()
		}
	})
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 || !rep.Compacted || rep.CompactionAttempts != 2 {
		t.Fatalf("conflicts %d, report %+v: want a compaction that needed 2 attempts", conflicts, rep)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	// The writer's table is stale now; its next commit conflicts, reloads and lands.
	m.batch(4, 100)
	m.batch(5, 100)
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	wm := watermarks(tbl)
	if wm["s0"] != fmt.Sprint(m.seq) || wm["s1"] == "" {
		t.Fatalf("watermarks %v", wm)
	}
	h.close()
}

// Two compactions of one table race (the maintain command with --ignore-lease beside a service):
// the one that commits second finds its input files rewritten, gives up without an error and
// removes the files it wrote.
func TestCompactionSupersededByAnother(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	ctx := context.Background()
	cfg := testConfig()
	a, b := testMaintainer(t, h.cat, cfg), testMaintainer(t, h.cat, cfg)
	a.IgnoreLease()
	b.IgnoreLease()
	a.AfterRewrite(func() {
		if rep, err := b.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted {
			t.Errorf("b: %v %+v", err, rep)
		}
	})
	rep, err := a.Maintain(ctx, maintenance.CompactOnly)
	if err != nil || rep.Compacted {
		t.Fatalf("a: %v, compacted %v: want superseded without error", err, rep.Compacted)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plan.Files() {
		if strings.Contains(f, "/data/") {
			t.Errorf("orphan data file left by the superseded compaction: %s", f)
		}
	}
	h.close()
}
