package maintenance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// deleteKinds counts the live equality- and position-delete files of the current snapshot.
func deleteKinds(t *testing.T, tbl *table.Table) (eq, pos int) {
	t.Helper()
	n, err := maintenance.CountDeletes(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return n.Equality, n.Position
}

func positionConfig() maintenance.Config {
	c := testConfig()
	c.DeleteMode = maintenance.DeleteModePosition
	return c
}

// Converting the equality deletes of a table with updates, deletes and re-inserts (many of them
// in the same commit as the delete of their key) into position deletes leaves the rows as they
// were, and no equality delete behind. A key updated in the commit that deletes its old image
// keeps its new image: the equality delete does not apply to its own commit's data file, and
// neither does the position delete that replaces it.
func TestPositionConversionKeepsRows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 200, 4)
	m.upsert("s0", 5, "same-commit") // delete of the old image and the new image in one commit
	m.del("s0", 6)
	m.upsert("s0", 6, "reinserted")
	h.flush()
	before, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, before, m.want()...)
	if n, _ := deleteKinds(t, tbl); n == 0 {
		t.Fatal("no equality deletes to convert")
	}
	mt := testMaintainer(t, h.cat, positionConfig())
	if !mt.Lease(context.Background(), tbl) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
	if err != nil {
		t.Fatal(err)
	}
	if rep.EqualityDeletesConverted == 0 || rep.PositionDeletesWritten == 0 {
		t.Fatalf("report %+v: want equality deletes converted into position deletes", rep)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	eqFiles, posFiles := deleteKinds(t, tbl)
	if eqFiles != 0 || posFiles == 0 {
		t.Fatalf("%d equality and %d position delete files after conversion, want 0 and some", eqFiles, posFiles)
	}
	// Every data file survives: nothing was rewritten.
	if got, want := len(sinktest.DataSeqs(t, tbl)), 6; got != want {
		t.Fatalf("%d data files after conversion, want %d (one per commit)", got, want)
	}
	// A second conversion has nothing to do; new CDC commits are converted by the next one.
	m.batch(5, 200)
	rep, err = mt.Maintain(context.Background(), maintenance.PositionOnly)
	if err != nil {
		t.Fatal(err)
	}
	rows, tbl = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 0 {
		t.Fatalf("%d equality delete files after the second conversion (%+v)", eqFiles, rep)
	}
	h.close()
}

// A table partitioned by bucket on the key: the equality deletes are partition-scoped, and the
// position deletes carry their data file's partition.
func TestPositionConversionPartitioned(t *testing.T) {
	t.Parallel()
	for _, v := range []int{2, 3} {
		t.Run(fmt.Sprintf("format=v%d", v), func(t *testing.T) { testPositionConversionPartitioned(t, v) })
	}
}

func testPositionConversionPartitioned(t *testing.T, formatVersion int) {
	dir := t.TempDir()
	def := usersDef
	def.Partition = []sink.PartitionField{{Column: "id", Transform: "bucket", N: 4}}
	def.FormatVersion = formatVersion
	h := newHarnessFor(t, dir, def)
	m := newModel(h)
	m.load(200)
	for b := 1; b <= 4; b++ {
		m.batch(b, 200)
	}
	// The table's format version, not the mode, decides the kind of position delete: the mode
	// is set against it (dv on the v2 table, position on the v3 one).
	cfg := positionConfig()
	if formatVersion == 2 {
		cfg.DeleteMode = maintenance.DeleteModeDV
	}
	// Through the key cache: the second conversion looks the deleted keys of each partition's
	// scope up in the cached columns the first one read.
	mt, cache := cachedMaintainer(t, h, cfg, 1<<20)
	for round := 1; round <= 2; round++ {
		if round == 2 {
			m.batch(5, 200)
		}
		rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
		if err != nil {
			t.Fatal(err)
		}
		rows, tbl := scanRows(t, h.cat)
		sinktest.Eq(t, rows, m.want()...)
		eqFiles, posFiles := deleteKinds(t, tbl)
		if eqFiles != 0 || posFiles == 0 || rep.PositionDeletesWritten == 0 {
			t.Fatalf("round %d: %d equality and %d position delete files after conversion (%+v)", round, eqFiles, posFiles, rep)
		}
	}
	if _, hits, _ := cache.Stats(); hits == 0 {
		t.Fatal("the second conversion probed no file through the key cache")
	}
	_, tbl := scanRows(t, h.cat)
	// Engines that index position deletes by partition (Spark) apply them only to data files of
	// the same spec and partition: every one must carry its data file's.
	parts := map[string]string{}
	var posDels []iceberg.DataFile
	for _, df := range sinktest.LiveEntries(t, tbl) {
		switch df.ContentType() {
		case iceberg.EntryContentData:
			parts[df.FilePath()] = fmt.Sprint(df.SpecID(), df.Partition())
		case iceberg.EntryContentPosDeletes:
			posDels = append(posDels, df)
		}
	}
	for _, pd := range posDels {
		if formatVersion >= 3 {
			// A deletion vector names its data file.
			ref := pd.ReferencedDataFile()
			if !table.IsDeletionVector(pd) || ref == nil || parts[*ref] == "" {
				t.Fatalf("position delete %s in a v3 table: want a deletion vector of a live data file", pd.FilePath())
			}
			if got, want := fmt.Sprint(pd.SpecID(), pd.Partition()), parts[*ref]; got != want || len(pd.Partition()) == 0 {
				t.Fatalf("deletion vector of %s: spec and partition %s, its data file's %s", *ref, got, want)
			}
			continue
		}
		// File-scoped: the file_path column's bounds are the one data file (v2 manifests have no
		// referenced_data_file).
		lo, hi := string(pd.LowerBoundValues()[2147483546]), string(pd.UpperBoundValues()[2147483546])
		if lo == "" || lo != hi || parts[lo] == "" {
			t.Fatalf("position delete %s: file_path bounds %q..%q, want one live data file", pd.FilePath(), lo, hi)
		}
		if got, want := fmt.Sprint(pd.SpecID(), pd.Partition()), parts[lo]; got != want || len(pd.Partition()) == 0 {
			t.Fatalf("position delete %s: spec and partition %s, its data file's %s", pd.FilePath(), got, want)
		}
	}
	h.close()
}

// A load writes deletes for its own keys, which apply to no older file: the conversion writes no
// position delete for them and drops them.
func TestPositionConversionDropsDeletesThatApplyToNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(50)
	mt := testMaintainer(t, h.cat, positionConfig())
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
	if err != nil {
		t.Fatal(err)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if eqFiles, posFiles := deleteKinds(t, tbl); eqFiles != 0 || posFiles != 0 || rep.PositionDeletesWritten != 0 {
		t.Fatalf("%d equality and %d position delete files (%d positions written), want none", eqFiles, posFiles, rep.PositionDeletesWritten)
	}
	h.close()
}

// A CDC commit lands between the conversion's plan and its commits: the commit is restaged on
// the newest table and lands; the CDC commit's own equality delete (not in the plan) stays for
// the next conversion, and the rows are right throughout.
func TestPositionConversionRestagedAfterCDCCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	mt := testMaintainer(t, h.cat, positionConfig())
	conflicts := 0
	mt.BeforeCommit(func(step string, attempt int) {
		if step == "position" && attempt == 0 && conflicts == 0 {
			conflicts++
			m.del("s0", 7)
			m.upsert("s0", 8, "conflicting")
			h.flush()
		}
	})
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 || rep.EqualityDeletesConverted != 4 || rep.ConversionAttempts < 3 {
		t.Fatalf("conflicts %d, report %+v: want 4 equality deletes converted after a lost first attempt", conflicts, rep)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 1 {
		t.Fatalf("%d equality delete files, want 1 (the concurrent commit's)", eqFiles)
	}
	rep, err = mt.Maintain(context.Background(), maintenance.PositionOnly)
	if err != nil {
		t.Fatal(err)
	}
	rows, tbl = scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 0 {
		t.Fatalf("%d equality delete files after the second conversion (%+v)", eqFiles, rep)
	}
	h.close()
}

// A compaction (another worker's, with --ignore-lease) rewrites the data files a conversion
// probed before the conversion commits: the conversion gives up without committing anything,
// and the rows are right.
func TestPositionConversionSupersededByCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, m := seeded(t, dir, 100, 3)
	ctx := context.Background()
	a, b := testMaintainer(t, h.cat, positionConfig()), testMaintainer(t, h.cat, testConfig())
	a.IgnoreLease()
	b.IgnoreLease()
	a.AfterRewrite(func() {
		if rep, err := b.Maintain(ctx, maintenance.CompactOnly); err != nil || !rep.Compacted {
			t.Errorf("b: %v %+v", err, rep)
		}
	})
	rep, err := a.Maintain(ctx, maintenance.PositionOnly)
	if err != nil || rep.EqualityDeletesConverted != 0 || rep.PositionDeletesWritten != 0 {
		t.Fatalf("a: %v, report %+v: want superseded without error", err, rep)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if _, posFiles := deleteKinds(t, tbl); posFiles != 0 {
		t.Fatalf("%d position delete files committed by a superseded conversion", posFiles)
	}
	h.close()
}

// runConverter runs, until the test ends, a maintainer of shop.users in position mode that
// converts at once and compacts only far past what a test commits, with the given hand-off
// wait (0: none); ctx is cancelled when the test ends.
func runConverter(t *testing.T, h *harness, handoff time.Duration) (*maintenance.Maintainer, context.Context) {
	t.Helper()
	cfg := positionConfig()
	cfg.PositionDelay = 0
	cfg.MaxDeleteFiles = 1000
	cfg.MaxSmallFiles = 1000
	cfg.MaxDeleteRows = 1 << 40
	mt := testMaintainer(t, h.cat, cfg)
	mt.SetHandoffWait(handoff)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return mt, ctx
}

// In position mode the maintainer converts every commit's equality deletes by itself, far below
// the compaction thresholds.
func TestPositionModeConvertsInTheBackground(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(100)
	mt, ctx := runConverter(t, h, 0)
	for b := 1; b <= 3; b++ {
		m.batch(b, 100)
		mt.AfterCommit(ctx, loadUsers(t, h.cat), func(*table.Table) error { return nil })
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang bound, not a speed assertion
	for {
		tbl := loadUsers(t, h.cat)
		if eqFiles, posFiles := deleteKinds(t, tbl); eqFiles == 0 && posFiles > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("equality deletes never converted")
		}
		mt.AfterCommit(ctx, loadUsers(t, h.cat), func(*table.Table) error { return nil })
		time.Sleep(50 * time.Millisecond)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}

// posDeletesPerDataFile counts the live position-delete files of each data file (by their
// file_path bounds, which are one data file for the file-scoped deletes the conversion writes).
func posDeletesPerDataFile(t *testing.T, tbl *table.Table) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, df := range sinktest.LiveEntries(t, tbl) {
		if df.ContentType() != iceberg.EntryContentPosDeletes {
			continue
		}
		if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil {
			out[*ref]++
			continue
		}
		lo, hi := string(df.LowerBoundValues()[2147483546]), string(df.UpperBoundValues()[2147483546])
		if lo == "" || lo != hi {
			t.Fatalf("position delete %s is not file-scoped (%q..%q)", df.FilePath(), lo, hi)
		}
		out[lo]++
	}
	return out
}

// Conversions one after another keep one position-delete file per data file: a data file that
// already has position deletes gets one new file holding its old positions and the new ones, and
// the old file is dropped in the commit that drops the equality deletes. Without the merge every
// conversion adds a file to every data file it touches, and scans (and the delete-files trigger
// of compaction) grow with the number of conversions, not with the rows deleted.
func TestPositionConversionMergesADataFilesPositionDeletes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(300)
	mt := testMaintainer(t, h.cat, positionConfig())
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	var tbl *table.Table
	for b := 1; b <= 4; b++ {
		m.batch(b, 300)
		rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		rows, tbl = scanRows(t, h.cat)
		sinktest.Eq(t, rows, m.want()...)
		if eqFiles, _ := deleteKinds(t, tbl); eqFiles != 0 {
			t.Fatalf("conversion %d: %d equality delete files left (%+v)", b, eqFiles, rep)
		}
		for path, n := range posDeletesPerDataFile(t, tbl) {
			if n != 1 {
				t.Fatalf("conversion %d: data file %s has %d position-delete files, want 1", b, path, n)
			}
		}
	}
	// The load's file carries the deletes of all four batches, in one file.
	per := posDeletesPerDataFile(t, tbl)
	if len(per) == 0 {
		t.Fatal("no position deletes")
	}
	h.close()
}

// dvDef is usersDef with format_version 3 (what delete_mode dv implies; the harness runs the
// maintainer itself, so the sink's table config names no delete mode).
func dvDef() sink.TableConfig {
	d := usersDef
	d.FormatVersion = 3
	return d
}

// In delete mode dv the table is format v3 and every conversion leaves one deletion vector per
// data file (the spec allows no more): a data file that already has one gets a replacement
// holding the old positions and the new ones, in the commit that removes the old one. The rows
// stay the model's after every conversion, and after a compaction that rewrites files with
// deletion vectors.
func TestDVConversionKeepsOneDeletionVectorPerDataFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarnessFor(t, dir, dvDef())
	m := newModel(h)
	m.load(300)
	if v := loadUsers(t, h.cat).Metadata().Version(); v != 3 {
		t.Fatalf("format_version 3 created a format v%d table", v)
	}
	cfg := positionConfig()
	cfg.DeleteMode = maintenance.DeleteModeDV
	mt := testMaintainer(t, h.cat, cfg)
	if !mt.Lease(context.Background(), loadUsers(t, h.cat)) {
		t.Fatal("no lease")
	}
	var tbl *table.Table
	for b := 1; b <= 4; b++ {
		m.batch(b, 300) // deletes and updates keys of the load: its file gains positions each time
		rep, err := mt.Maintain(context.Background(), maintenance.PositionOnly)
		if err != nil {
			t.Fatal(err)
		}
		if rep.EqualityDeletesConverted == 0 || rep.PositionDeletesWritten == 0 {
			t.Fatalf("conversion %d: report %+v: want equality deletes converted", b, rep)
		}
		var rows []string
		rows, tbl = scanRows(t, h.cat)
		sinktest.Eq(t, rows, m.want()...)
		eqFiles, posFiles := deleteKinds(t, tbl)
		if eqFiles != 0 || posFiles == 0 {
			t.Fatalf("conversion %d: %d equality and %d position delete files, want 0 and some (%+v)", b, eqFiles, posFiles, rep)
		}
		for _, df := range sinktest.LiveEntries(t, tbl) {
			if df.ContentType() == iceberg.EntryContentPosDeletes && !table.IsDeletionVector(df) {
				t.Fatalf("conversion %d: %s is a Parquet position-delete file in a v3 table", b, df.FilePath())
			}
		}
		for path, n := range posDeletesPerDataFile(t, tbl) {
			if n != 1 {
				t.Fatalf("conversion %d: data file %s has %d deletion vectors, want 1", b, path, n)
			}
		}
	}
	// The load's data file carries the positions of all four batches, in one deletion vector.
	var loadDV iceberg.DataFile
	seqs := sinktest.DataSeqs(t, tbl)
	for _, df := range sinktest.LiveEntries(t, tbl) {
		if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil && seqs[*ref] == 1 {
			loadDV = df
		}
	}
	if loadDV == nil || loadDV.Count() < 4 {
		t.Fatalf("the load's data file has deletion vector %v, want one with at least 4 positions", loadDV)
	}
	// A compaction rewrites files with deletion vectors and drops those vectors with them.
	rep, err := mt.Maintain(context.Background(), maintenance.CompactOnly)
	if err != nil {
		t.Fatal(err)
	}
	rows, tbl := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	if !rep.Compacted {
		t.Fatalf("report %+v: want a compaction", rep)
	}
	live := map[string]bool{}
	for path := range sinktest.DataSeqs(t, tbl) {
		live[path] = true
	}
	for path := range posDeletesPerDataFile(t, tbl) {
		if !live[path] {
			t.Fatalf("a deletion vector references %s, which the compaction rewrote", path)
		}
	}
	h.close()
}

// replaceDV commits, as another engine would, a new deletion vector for data file path holding
// the same positions as its live one, in place of it: the rows stay, the vector is another.
func replaceDV(t *testing.T, tbl *table.Table, path string) {
	t.Helper()
	ctx := context.Background()
	var old iceberg.DataFile
	for _, df := range sinktest.LiveEntries(t, tbl) {
		if ref := df.ReferencedDataFile(); table.IsDeletionVector(df) && ref != nil && *ref == path {
			old = df
		}
	}
	if old == nil {
		t.Fatalf("%s has no deletion vector", path)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := dv.ReadDV(fs, old)
	if err != nil {
		t.Fatal(err)
	}
	meta := tbl.Metadata()
	w := dv.NewDVWriter(fs.(icebergio.WriteFileIO), func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	w.Load(path, bm, old.SpecID(), old.Partition())
	files, err := w.Flush(ctx, strings.TrimSuffix(tbl.Location(), "/")+"/data/other-engine-dv.puffin")
	if err != nil {
		t.Fatal(err)
	}
	txn := tbl.NewTransaction()
	if err := txn.NewRowDelta(nil).AddDeletes(files...).RemoveDeletes(old).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A conversion on a v3 table replaces the deletion vectors of the data files it probes. When
// another writer replaced one of them after the plan (here with the same positions, as a
// rewrite of the vector would), the conversion merges the newer vector when it commits, in
// place of the one it planned on, which is no longer live (vectors_test.go has a writer's
// vector with new positions).
func TestDVConversionMergesAnotherEnginesVector(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarnessFor(t, dir, dvDef())
	m := newModel(h)
	m.load(200)
	m.batch(1, 200)
	ctx := context.Background()
	cfg := positionConfig()
	cfg.DeleteMode = maintenance.DeleteModeDV
	a := testMaintainer(t, h.cat, cfg)
	a.IgnoreLease()
	if rep, err := a.Maintain(ctx, maintenance.PositionOnly); err != nil || !rep.Converted {
		t.Fatalf("first conversion: %v %+v", err, rep)
	}
	loadFile := ""
	for path, seq := range sinktest.DataSeqs(t, loadUsers(t, h.cat)) {
		if seq == 1 {
			loadFile = path
		}
	}
	m.batch(2, 200)
	a.AfterRewrite(func() { replaceDV(t, loadUsers(t, h.cat), loadFile) })
	rep, err := a.Maintain(ctx, maintenance.PositionOnly)
	if err != nil || !rep.Converted || rep.VectorsRemerged != 1 {
		t.Fatalf("conversion beside another vector: %v, report %+v: want converted, the newer vector merged", err, rep)
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	a.AfterRewrite(nil)
	if rep, err := a.Maintain(ctx, maintenance.PositionOnly); err != nil || rep.Converted {
		t.Fatalf("the next conversion: %v %+v: want nothing left to convert", err, rep)
	}
	vectorsOnly(t, h, m)
	h.close()
}
