package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The conversion of equality deletes into position deletes (delete modes position and dv, design.md
// §11.1): plan on snapshot P (read the equality deletes' keys, probe the key column of each data
// file they can apply to), then two commits on the newest table: add the position deletes, then
// drop the equality deletes. Both read the same rows as before.

// liveFile is a live file of a snapshot with its data sequence number.
type liveFile struct {
	df  iceberg.DataFile
	seq int64
}

// conversionPlan is what one conversion adds and drops.
type conversionPlan struct {
	snap    *table.Snapshot
	fs      icebergio.IO
	eqDels  []liveFile         // the equality deletes converted (all of P's)
	maxSeq  int64              // the highest of their sequence numbers
	seen    map[string]bool    // every live data file of P
	probed  map[string]bool    // the data files whose key column was read
	posDels []iceberg.DataFile // the position-delete files written
	rows    int64              // positions in them
	// replaced are the live position-delete files of the probed data files whose positions the
	// new files also hold (one file per data file, mergePositionDeletes); commit 2 drops them.
	replaced []iceberg.DataFile
	// On a format v3 table posDels are deletion vectors, one per data file in one Puffin file.
	// replacedDVs are the live deletion vectors they supersede (commit 1 removes them: the spec
	// allows one live deletion vector per data file), and dvOf is the live deletion vector of
	// every probed data file the plan saw ("" for none), which check compares with the head.
	dvs         bool
	replacedDVs []iceberg.DataFile
	replacedOf  map[string]iceberg.DataFile // replacedDVs by the data file they reference
	dvOf        map[string]string
	// remerged are the deletion vectors commit 1 wrote instead of posDels, on a head where a
	// writer had replaced some of the probed files' vectors since the plan (remerge).
	remerged  []iceberg.DataFile
	manifests *manifestCache // the maintainer's, for check
}

// dvKey names one live deletion vector: its Puffin file and the offset of its blob.
func dvKey(df iceberg.DataFile) string {
	if off := df.ContentOffset(); off != nil {
		return fmt.Sprintf("%s@%d", df.FilePath(), *off)
	}
	return df.FilePath()
}

// liveDVs indexes the deletion vectors among posDels by the data file they reference.
func liveDVs(posDels []liveFile) map[string]liveFile {
	out := map[string]liveFile{}
	for _, pd := range posDels {
		if !table.IsDeletionVector(pd.df) {
			continue
		}
		if ref := pd.df.ReferencedDataFile(); ref != nil {
			out[*ref] = pd
		}
	}
	return out
}

// convert turns the table's outstanding equality deletes into position deletes and adds what it
// did to rep.
func (m *Maintainer) convert(ctx context.Context, rep *Report) error {
	start := time.Now()
	src, err := m.cat.LoadTable(ctx, m.ident)
	if err != nil {
		return err
	}
	if src.CurrentSnapshot() == nil || m.reloading(src, "position conversion") {
		return nil
	}
	p, err := m.planConversion(ctx, src)
	if err != nil {
		return err
	}
	if p == nil {
		m.eqSince = time.Time{}
		return nil
	}
	rep.DataFilesProbed += len(p.probed)
	if m.afterRewrite != nil {
		m.afterRewrite()
	}
	attempts := 0
	if len(p.posDels) > 0 {
		c, err := m.commitThenMore(ctx, "position", nil, func(ctx context.Context, txn *table.Transaction, head *table.Table, attempt int) error {
			live, changed, err := p.check(ctx, head)
			if err != nil {
				return err
			}
			if attempt > 0 && p.landedIn(live) {
				return errAlreadyCommitted // an attempt whose outcome was unknown landed
			}
			add, remove := p.posDels, p.replacedDVs
			if len(changed) > 0 {
				if add, remove, err = p.remerge(ctx, head.Metadata(), changed); err != nil {
					return err
				}
				p.remerged = append(add, p.remerged...) // the newest first, for ours
				rep.VectorsRemerged++
			}
			rd := txn.NewRowDelta(iceberg.Properties{tableprop.SummaryMaintenanceTrigger: "position",
				tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.snap.SnapshotID, 10)})
			rd.AddDeletes(add...)
			if len(remove) > 0 {
				rd.RemoveDeletes(remove...)
			}
			return rd.Commit(ctx)
		})
		attempts += max(c.sent, 1)
		if errors.Is(err, errAlreadyCommitted) {
			err = nil
		}
		if err != nil {
			if c.sent == 0 || errors.Is(err, errSuperseded) {
				removeFiles(p.fs, p.posDels) // never committed: the files are ours alone
				removeFiles(p.fs, p.remerged)
			}
			if errors.Is(err, errSuperseded) {
				m.log.Info("conversion superseded: the files it probed were rewritten; the next one replans")
				return nil
			}
			return err
		}
	}
	// With a positional branch the branch's move follows the drop at once (the writer that runs
	// the drop waits for it, as for the drop after the first commit).
	drop := m.commit
	if m.cfg.PositionalBranch != "" {
		drop = m.commitThenMore
	}
	c, err := drop(ctx, "position-drop", nil, func(ctx context.Context, txn *table.Transaction, head *table.Table, _ int) error {
		// A vector replaced since commit 1 (a writer's) holds commit 1's positions too.
		if _, _, err := p.check(ctx, head); err != nil {
			return err
		}
		rw := txn.NewRewrite(iceberg.Properties{tableprop.SummaryMaintenanceTrigger: "position",
			tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.snap.SnapshotID, 10)})
		for _, e := range p.eqDels {
			rw.DeleteFile(e.df)
		}
		for _, df := range p.replaced {
			rw.DeleteFile(df)
		}
		return rw.Commit(ctx)
	})
	attempts += max(c.sent, 1)
	if errors.Is(err, errSuperseded) {
		// The position deletes committed are right (they hide rows the equality deletes hide);
		// the next conversion replans the equality deletes.
		m.log.Info("dropping converted equality deletes superseded; the next conversion replans")
		return nil
	}
	if err != nil {
		return err
	}
	m.eqSince = time.Time{}
	rep.Converted = true
	rep.EqualityDeletesConverted += len(p.eqDels)
	rep.PositionDeletesWritten += p.rows
	rep.PositionDeleteFilesWritten += len(p.posDels)
	rep.ConversionAttempts += attempts
	rep.ConversionTook += time.Since(start)
	m.log.Info("converted equality deletes", zap.Duration("took", time.Since(start)),
		zap.Int("equality_delete_files", len(p.eqDels)), zap.Int("data_files_probed", len(p.probed)),
		zap.Bool("deletion_vectors", p.dvs),
		zap.Int("position_delete_files", len(p.posDels)), zap.Int("position_delete_files_merged", len(p.replaced)+len(p.replacedDVs)),
		zap.Int64("positions", p.rows),
		zap.Int("attempts", attempts), zap.Int64("starting_snapshot", p.snap.SnapshotID))
	m.publishConverted(ctx, p, c.tbl, rep)
	return nil
}

// removeFiles deletes files no commit references.
func removeFiles(fs icebergio.IO, files []iceberg.DataFile) {
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// liveFilesAll lists a snapshot's live data, equality-delete and position-delete files.
func liveFilesAll(fs icebergio.IO, snap *table.Snapshot) (data, eqDels, posDels []liveFile, err error) {
	mans, err := snap.Manifests(fs)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, mf := range mans {
		got, err := manifestLiveFiles(fs, mf)
		if err != nil {
			return nil, nil, nil, err
		}
		data = append(data, got.data...)
		eqDels = append(eqDels, got.eqDels...)
		posDels = append(posDels, got.posDels...)
	}
	return data, eqDels, posDels, nil
}

// manifestLiveFiles reads one manifest's live files by kind.
func manifestLiveFiles(fs icebergio.IO, mf iceberg.ManifestFile) (manifestFiles, error) {
	var out manifestFiles
	for e, err := range mf.Entries(fs, true) {
		if err != nil {
			return manifestFiles{}, err
		}
		df := e.DataFile()
		switch df.ContentType() {
		case iceberg.EntryContentData:
			out.data = append(out.data, liveFile{df, e.SequenceNum()})
		case iceberg.EntryContentEqDeletes:
			out.eqDels = append(out.eqDels, liveFile{df, e.SequenceNum()})
		case iceberg.EntryContentPosDeletes:
			out.posDels = append(out.posDels, liveFile{df, e.SequenceNum()})
		}
	}
	return out, nil
}

// DeleteCounts are the delete files live in a snapshot by kind: equality deletes, and position
// deletes of which DVs are deletion vectors (format v3).
type DeleteCounts struct{ Equality, Position, DVs int }

// CountDeletes counts the delete files live in tbl's current snapshot (all zero without one):
// what a reader must apply, and in delete_mode position or dv what is left to convert.
func CountDeletes(ctx context.Context, tbl *table.Table) (DeleteCounts, error) {
	return CountDeletesIn(ctx, tbl, tbl.CurrentSnapshot())
}

// CountDeletesIn is CountDeletes for snapshot snap of tbl (a branch's, an older one).
func CountDeletesIn(ctx context.Context, tbl *table.Table, snap *table.Snapshot) (DeleteCounts, error) {
	var n DeleteCounts
	if snap == nil {
		return n, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return n, err
	}
	_, eqs, pos, err := liveFilesAll(fs, snap)
	if err != nil {
		return n, err
	}
	n.Equality, n.Position = len(eqs), len(pos)
	for _, f := range pos {
		if table.IsDeletionVector(f.df) {
			n.DVs++
		}
	}
	return n, nil
}

// scopeKey names the scope of a file's partition: the spec and the partition values.
func scopeKey(df iceberg.DataFile) string {
	part := df.Partition()
	ids := make([]int, 0, len(part))
	for id := range part {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "%d", df.SpecID())
	for _, id := range ids {
		fmt.Fprintf(&b, "|%d=%v", id, part[id])
	}
	return b.String()
}

// planConversion reads the equality deletes of src's current snapshot, probes the data files
// they can apply to and writes the position deletes (nothing is committed). It returns nil when
// there is no equality delete.
func (m *Maintainer) planConversion(ctx context.Context, src *table.Table) (*conversionPlan, error) {
	snap := src.CurrentSnapshot()
	fs, err := src.FS(ctx)
	if err != nil {
		return nil, err
	}
	data, eqDels, posDels, err := m.liveCache.liveFiles(fs, snap)
	if err != nil {
		return nil, err
	}
	if len(eqDels) == 0 {
		return nil, nil
	}
	return m.planPositions(ctx, src, snap, fs, data, eqDels, posDels)
}

// planPositions probes data, the live data files of src's snapshot snap, for the keys of
// eqDels and writes the position deletes (or deletion vectors) they make, merged with the live
// ones of posDels (nothing is committed). eqDels are the snapshot's own equality deletes for a
// conversion, or a writer's not yet committed ones (vectors.go).
func (m *Maintainer) planPositions(ctx context.Context, src *table.Table, snap *table.Snapshot, fs icebergio.IO,
	data, eqDels, posDels []liveFile) (*conversionPlan, error) {
	ownPos := fileScoped(posDels)
	sort.Slice(eqDels, func(i, j int) bool { return eqDels[i].seq < eqDels[j].seq })
	p := &conversionPlan{snap: snap, fs: fs, eqDels: eqDels, seen: map[string]bool{}, probed: map[string]bool{}, manifests: &m.liveCache}
	meta := src.Metadata()
	var dvw *dv.DVWriter
	var dvOf map[string]liveFile
	if meta.Version() >= 3 {
		// Format v3: deletion vectors, the only position deletes the spec lets a v3 writer add.
		wfs, ok := fs.(icebergio.WriteFileIO)
		if !ok {
			return nil, errors.New("the table's file IO cannot write")
		}
		dvw = dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
		dvOf = liveDVs(posDels)
		p.dvs, p.dvOf, p.replacedOf = true, map[string]string{}, map[string]iceberg.DataFile{}
	}
	schema := src.Schema()
	keyIDs := eqDels[0].df.EqualityFieldIDs()
	var keyType iceberg.Type
	if len(keyIDs) == 1 {
		if f, ok := schema.FindFieldByID(keyIDs[0]); ok {
			keyType = f.Type
		}
	}
	ints := intKey(keyIDs, keyType)
	global := newKeyScope()
	scopes := map[string]*keyScope{}
	for _, e := range eqDels {
		p.maxSeq = max(p.maxSeq, e.seq)
		if !slices.Equal(e.df.EqualityFieldIDs(), keyIDs) {
			return nil, fmt.Errorf("equality deletes with different key columns (%v, %v): compact the table first", keyIDs, e.df.EqualityFieldIDs())
		}
		sc := global
		if spec := meta.PartitionSpecByID(int(e.df.SpecID())); spec != nil && !spec.IsUnpartitioned() {
			k := scopeKey(e.df)
			if sc = scopes[k]; sc == nil {
				sc = newKeyScope()
				scopes[k] = sc
			}
		}
		var err error
		if ints {
			err = probeInts(ctx, fs, e.df.FilePath(), keyIDs[0], func(key, _ int64) {
				if sc.intSeq[key] < e.seq {
					sc.intSeq[key] = e.seq
				}
			})
		} else {
			err = readKeys(ctx, fs, e.df.FilePath(), schema, keyIDs, func(key string, _ int64) {
				if sc.seq[key] < e.seq {
					sc.seq[key] = e.seq
				}
			})
		}
		if err != nil {
			return nil, fmt.Errorf("read equality deletes %s: %w", e.df.FilePath(), err)
		}
	}
	global.index(keyType)
	for _, sc := range scopes {
		sc.index(keyType)
	}
	location, err := deleteLocation(src)
	if err != nil {
		return nil, err
	}
	wants := map[*keyScope][]int64{} // the sorted keys a cached probe looks up, by scope
	for _, d := range data {
		p.seen[d.df.FilePath()] = true
		if d.seq >= p.maxSeq {
			continue // no equality delete of the plan applies to it
		}
		sc := scopes[scopeKey(d.df)]
		if !global.mayHold(d, keyIDs, keyType) && !sc.mayHold(d, keyIDs, keyType) {
			continue
		}
		p.probed[d.df.FilePath()] = true
		var positions []int64
		var err error
		if ints {
			want, ok := wants[sc]
			if !ok {
				want = global.with(sc) // once per scope, not per data file
				wants[sc] = want
			}
			err = m.keys.probeInts(ctx, fs, d.df.FilePath(), keyIDs[0], d.df.Count(), want, func(key, pos int64) {
				if global.seqOfInt(key) > d.seq || sc.seqOfInt(key) > d.seq {
					positions = append(positions, pos)
				}
			})
		} else {
			err = readKeys(ctx, fs, d.df.FilePath(), schema, keyIDs, func(key string, pos int64) {
				if s := global.seq[key]; s > d.seq {
					positions = append(positions, pos)
				} else if sc != nil && sc.seq[key] > d.seq {
					positions = append(positions, pos)
				}
			})
		}
		if err != nil {
			removeFiles(fs, p.posDels)
			return nil, fmt.Errorf("probe %s: %w", d.df.FilePath(), err)
		}
		if len(positions) == 0 {
			continue
		}
		// One position-delete file per data file: the new one also holds the positions of the
		// data file's live ones, which commit 2 drops. Only files that apply to d (sequence
		// number at or above d's) are merged; a file below d's would not apply to it.
		var replaced []iceberg.DataFile
		for _, old := range ownPos[d.df.FilePath()] {
			if old.seq < d.seq {
				continue
			}
			err := readPositions(ctx, fs, old.df.FilePath(), d.df.FilePath(), func(pos int64) { positions = append(positions, pos) })
			if err != nil {
				removeFiles(fs, p.posDels)
				return nil, fmt.Errorf("read position deletes %s: %w", old.df.FilePath(), err)
			}
			replaced = append(replaced, old.df)
		}
		if dvw != nil {
			if err := p.addDV(ctx, dvw, d, positions, dvOf, posDels); err != nil {
				return nil, err
			}
			p.replaced = append(p.replaced, replaced...)
			continue
		}
		df, err := writePositionDeletes(fs, meta, location, d.df, positions)
		if err != nil {
			removeFiles(fs, p.posDels)
			return nil, fmt.Errorf("write position deletes for %s: %w", d.df.FilePath(), err)
		}
		p.posDels = append(p.posDels, df)
		p.replaced = append(p.replaced, replaced...)
		p.rows += df.Count()
	}
	if dvw != nil {
		files, err := dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", location, uuid.NewString()))
		if err != nil {
			return nil, fmt.Errorf("write deletion vectors: %w", err)
		}
		p.posDels = files
		for _, df := range files {
			p.rows += df.Count()
		}
	}
	return p, nil
}

// addDV adds data file d's deleted positions to the plan's deletion vectors. A data file's
// deletion vector holds every position deleted in it (readers ignore its Parquet position
// deletes once it has one): those of its live deletion vector, which commit 1 replaces, and
// those of the Parquet position-delete files that apply to it (file-scoped ones are already in
// positions; partition-scoped ones, which a v2 writer may have left, are read here and stay for
// their other data files).
func (p *conversionPlan) addDV(ctx context.Context, dvw *dv.DVWriter, d liveFile, positions []int64, dvOf map[string]liveFile, posDels []liveFile) error {
	path := d.df.FilePath()
	p.dvOf[path] = ""
	if old, ok := dvOf[path]; ok {
		bm, err := dv.ReadDV(p.fs, old.df)
		if err != nil {
			return fmt.Errorf("read deletion vector of %s: %w", path, err)
		}
		dvw.Load(path, bm, d.df.SpecID(), d.df.Partition())
		p.replacedDVs = append(p.replacedDVs, old.df)
		p.replacedOf[path] = old.df
		p.dvOf[path] = dvKey(old.df)
	}
	for _, pd := range posDels {
		if table.IsDeletionVector(pd.df) || pd.seq < d.seq || sameBounds(pd.df) || !mayReference(pd.df, path) {
			continue
		}
		err := readPositions(ctx, p.fs, pd.df.FilePath(), path, func(pos int64) { positions = append(positions, pos) })
		if err != nil {
			return fmt.Errorf("read position deletes %s: %w", pd.df.FilePath(), err)
		}
	}
	return dvw.Add(path, positions, d.df.SpecID(), d.df.Partition())
}

// mayReference reports whether a Parquet position-delete file's file_path bounds admit path (no
// bounds admit every path).
func mayReference(pd iceberg.DataFile, path string) bool {
	lo, hi := pd.LowerBoundValues()[posPathField], pd.UpperBoundValues()[posPathField]
	return (len(lo) == 0 || string(lo) <= path) && (len(hi) == 0 || path <= string(hi))
}

// posPathField and posPosField are the field ids of a position-delete file's columns.
const (
	posPathField = 2147483546
	posPosField  = 2147483545
)

// fileScoped groups the position-delete files that hold positions of one data file only (their
// file_path bounds are that file: the files the conversion writes, and Spark's file-scoped
// deletes) by that data file.
func fileScoped(posDels []liveFile) map[string][]liveFile {
	out := map[string][]liveFile{}
	for _, pd := range posDels {
		lo, hi := pd.df.LowerBoundValues()[posPathField], pd.df.UpperBoundValues()[posPathField]
		if len(lo) == 0 || string(lo) != string(hi) {
			continue
		}
		out[string(lo)] = append(out[string(lo)], pd)
	}
	return out
}

// readPositions reads a position-delete file and calls fn with each position it holds for the
// data file dataPath.
func readPositions(ctx context.Context, fs icebergio.IO, path, dataPath string, fn func(pos int64)) error {
	return readColumns(ctx, fs, path, []int{posPathField, posPosField}, func(rec arrow.RecordBatch) error {
		paths, ok1 := rec.Column(0).(*array.String)
		poss, ok2 := rec.Column(1).(*array.Int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("position-delete columns of types %s and %s", rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if paths.IsValid(i) && poss.IsValid(i) && paths.Value(i) == dataPath {
				fn(poss.Value(i))
			}
		}
		return nil
	})
}

// deleteLocation is the directory the position-delete files go to: the table's data directory.
func deleteLocation(tbl *table.Table) (string, error) { return deleteLocationOf(tbl.Metadata()) }

func deleteLocationOf(meta table.Metadata) (string, error) {
	if p := meta.Properties()["write.data.path"]; p != "" {
		return strings.TrimSuffix(p, "/"), nil
	}
	return strings.TrimSuffix(meta.Location(), "/") + "/data", nil
}

var posDeleteArrow = arrow.NewSchema([]arrow.Field{
	{Name: "file_path", Type: arrow.BinaryTypes.String,
		Metadata: arrow.NewMetadata([]string{table.ArrowParquetFieldIDKey}, []string{"2147483546"})},
	{Name: "pos", Type: arrow.PrimitiveTypes.Int64,
		Metadata: arrow.NewMetadata([]string{table.ArrowParquetFieldIDKey}, []string{"2147483545"})},
}, nil)

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writePositionDeletes writes one file-scoped position-delete file (positions sorted) for data
// file d and returns its manifest entry.
func writePositionDeletes(fs icebergio.IO, meta table.Metadata, location string, d iceberg.DataFile, positions []int64) (iceberg.DataFile, error) {
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, errors.New("the table's file IO cannot write")
	}
	slices.Sort(positions)
	positions = slices.Compact(positions)
	path := fmt.Sprintf("%s/%s-pos-deletes.parquet", location, uuid.NewString())
	out, err := wfs.Create(path)
	if err != nil {
		return nil, err
	}
	cw := &countingWriter{w: out}
	mem := memory.DefaultAllocator
	pb := array.NewStringBuilder(mem)
	ib := array.NewInt64Builder(mem)
	for _, p := range positions {
		pb.Append(d.FilePath())
		ib.Append(p)
	}
	pa, ia := pb.NewArray(), ib.NewArray()
	pb.Release()
	ib.Release()
	rec := array.NewRecordBatch(posDeleteArrow, []arrow.Array{pa, ia}, int64(len(positions)))
	pa.Release()
	ia.Release()
	defer rec.Release()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false))
	w, err := pqarrow.NewFileWriter(posDeleteArrow, cw, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		_ = out.Close()
		_ = fs.Remove(path)
		return nil, err
	}
	if err := w.Write(rec); err != nil {
		_ = w.Close()
		_ = out.Close()
		_ = fs.Remove(path)
		return nil, err
	}
	if err := errors.Join(w.Close(), out.Close()); err != nil {
		_ = fs.Remove(path)
		return nil, err
	}
	spec := meta.PartitionSpecByID(int(d.SpecID()))
	if spec == nil {
		_ = fs.Remove(path)
		return nil, fmt.Errorf("partition spec %d of %s not in the table", d.SpecID(), d.FilePath())
	}
	b, err := iceberg.NewDataFileBuilder(*spec, iceberg.EntryContentPosDeletes, path, iceberg.ParquetFile,
		d.Partition(), nil, nil, int64(len(positions)), cw.n)
	if err != nil {
		_ = fs.Remove(path)
		return nil, err
	}
	dataPath := []byte(d.FilePath())
	var lo, hi [8]byte
	putInt64(lo[:], positions[0])
	putInt64(hi[:], positions[len(positions)-1])
	b.LowerBoundValues(map[int][]byte{posPathField: dataPath, posPosField: lo[:]}).
		UpperBoundValues(map[int][]byte{posPathField: dataPath, posPosField: hi[:]}).
		ValueCounts(map[int]int64{posPathField: int64(len(positions)), posPosField: int64(len(positions))}).
		NullValueCounts(map[int]int64{posPathField: 0, posPosField: 0}).
		ReferencedDataFile(d.FilePath())
	return b.Build(), nil
}

func putInt64(b []byte, v int64) {
	u := uint64(v)
	for i := range 8 {
		b[i] = byte(u >> (8 * i))
	}
}

// check verifies the plan against head before a commit is staged on it: every equality delete
// and every probed data file still live, and no live data file the plan did not see below the
// plan's highest equality-delete sequence number (a concurrent compaction's rewrite). It returns
// errSuperseded otherwise. It returns the paths of head's live files.
func (p *conversionPlan) check(ctx context.Context, head *table.Table) (map[string]bool, map[string]liveFile, error) {
	snap := head.CurrentSnapshot()
	if snap == nil {
		return nil, nil, errSuperseded
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	data, eqDels, posDels, err := p.manifests.liveFiles(fs, snap)
	if err != nil {
		return nil, nil, err
	}
	live := make(map[string]bool, len(data)+len(eqDels))
	for _, d := range data {
		live[d.df.FilePath()] = true
		if d.seq < p.maxSeq && !p.seen[d.df.FilePath()] {
			return nil, nil, errSuperseded
		}
	}
	for _, e := range append(eqDels, posDels...) {
		live[e.df.FilePath()] = true
	}
	for path := range p.probed {
		if !live[path] {
			return nil, nil, errSuperseded
		}
	}
	for _, e := range p.eqDels {
		if !live[e.df.FilePath()] {
			return nil, nil, errSuperseded
		}
	}
	for _, df := range p.replaced {
		if !live[df.FilePath()] {
			return nil, nil, errSuperseded
		}
	}
	var changed map[string]liveFile
	if p.dvs {
		// A probed data file whose deletion vector is not the one the plan merged (a writer's
		// vectors, vectors.go, replaced it since): commit 1 merges the newer one instead, since
		// replacing it with the plan's would bring its positions back.
		now := liveDVs(posDels)
		for path, want := range p.dvOf {
			got := ""
			e, ok := now[path]
			if ok {
				got = dvKey(e.df)
			}
			if got == want || got != "" && p.ours(e.df) { // unchanged, or commit 1 landed
				continue
			}
			if !ok {
				return nil, nil, errSuperseded // a vector cannot disappear but by a rewrite of its file
			}
			if changed == nil {
				changed = map[string]liveFile{}
			}
			changed[path] = e
		}
	}
	return live, changed, nil
}

// ours reports whether df is one of the deletion vectors the plan writes (commit 1 landed).
func (p *conversionPlan) ours(df iceberg.DataFile) bool {
	return p.landedIn(map[string]bool{df.FilePath(): true})
}

// landedIn reports whether live (paths) holds the deletion vectors or position deletes of one
// of commit 1's attempts.
func (p *conversionPlan) landedIn(live map[string]bool) bool {
	if len(p.posDels) > 0 && live[p.posDels[0].FilePath()] {
		return true
	}
	for _, df := range p.remerged {
		if live[df.FilePath()] {
			return true
		}
	}
	return false
}

// remerge rewrites the plan's deletion vectors for commit 1 on a head where some probed data
// files' vectors changed since the plan (changed, by data file): each of those holds the union
// of the plan's positions and the head's vector, and replaces the head's. It returns the files
// to add and the vectors to remove; the plan's own files stay as they are, for the positional
// branch, which shows the plan's snapshot.
func (p *conversionPlan) remerge(ctx context.Context, meta table.Metadata, changed map[string]liveFile) (add, remove []iceberg.DataFile, err error) {
	wfs, ok := p.fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, nil, errors.New("the table's file IO cannot write")
	}
	location, err := deleteLocationOf(meta)
	if err != nil {
		return nil, nil, err
	}
	dvw := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	for _, df := range p.posDels {
		ref := df.ReferencedDataFile()
		if ref == nil {
			return nil, nil, fmt.Errorf("deletion vector %s names no data file", df.FilePath())
		}
		bm, err := dv.ReadDV(p.fs, df)
		if err != nil {
			return nil, nil, fmt.Errorf("read deletion vector of %s: %w", *ref, err)
		}
		if e, ok := changed[*ref]; ok {
			now, err := dv.ReadDV(p.fs, e.df)
			if err != nil {
				return nil, nil, fmt.Errorf("read deletion vector of %s: %w", *ref, err)
			}
			bm.Or(now)
			remove = append(remove, e.df)
		} else if old, ok := p.replacedOf[*ref]; ok {
			remove = append(remove, old)
		}
		dvw.Load(*ref, bm, df.SpecID(), df.Partition())
	}
	add, err = dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", location, uuid.NewString()))
	if err != nil {
		return nil, nil, fmt.Errorf("write deletion vectors: %w", err)
	}
	return add, remove, nil
}
