package deletes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// Parquet position-delete files: their bounds, reading their positions and writing one per data
// file; the directory delete files go to; the scope of a file's partition.

// RemoveFiles deletes files no commit references.
func RemoveFiles(fs icebergio.IO, files []iceberg.DataFile) {
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// scopeKey names the scope of a file's partition: the spec and the partition values.
func scopeKey(df iceberg.DataFile) string { return scopeOf(df.SpecID(), df.Partition()) }

// scopeOf names the scope of partition part of spec specID.
func scopeOf(specID int32, part map[int]any) string {
	ids := make([]int, 0, len(part))
	for id := range part {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "%d", specID)
	for _, id := range ids {
		fmt.Fprintf(&b, "|%d=%v", id, part[id])
	}
	return b.String()
}

// mayReference reports whether a Parquet position-delete file's file_path bounds admit path (no
// bounds admit every path).
func mayReference(pd iceberg.DataFile, path string) bool {
	lo, hi := pd.LowerBoundValues()[posPathField], pd.UpperBoundValues()[posPathField]
	return (len(lo) == 0 || string(lo) <= path) && (len(hi) == 0 || path <= string(hi))
}

// PosPathField is the field id of a position-delete file's file_path column (its bounds name the
// data files it references).
const PosPathField = posPathField

// posPathField and posPosField are the field ids of a position-delete file's columns.
const (
	posPathField = 2147483546
	posPosField  = 2147483545
)

// fileScoped groups the position-delete files that hold positions of one data file only (their
// file_path bounds are that file: the files the conversion writes, and Spark's file-scoped
// deletes) by that data file.
func fileScoped(posDels []LiveFile) map[string][]LiveFile {
	out := map[string][]LiveFile{}
	for _, pd := range posDels {
		lo, hi := pd.File.LowerBoundValues()[posPathField], pd.File.UpperBoundValues()[posPathField]
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

// deleteLocationOf is the directory delete files go to: the table's data directory.
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

// SameBounds reports whether a position-delete file's file_path bounds name one data file.
func SameBounds(d iceberg.DataFile) bool {
	lo, hi := d.LowerBoundValues()[posPathField], d.UpperBoundValues()[posPathField]
	return len(lo) > 0 && string(lo) == string(hi)
}
