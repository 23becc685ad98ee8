package deletes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
)

// The probe of a delete plan (plan.go): the deleted keys of a scope, and the
// readers of the key and position columns of Parquet files (column projection by field id, no
// other column decoded).

// keyScope holds the deleted keys that apply to the data files of one partition (or to every
// data file: the global scope of unpartitioned deletes), each with the highest sequence number
// of an equality delete holding it.
type keyScope struct {
	seq    map[string]int64 // seq by encoded key (keyenc.go: keys other than a single integer)
	intSeq map[int64]int64  // seq by single-column integer key, for probing without encoding
	ints   []int64          // the integer keys, sorted, for bound checks
	encs   []string         // the encoded keys, sorted, for a cached probe
	strs   []string         // single-column string keys, sorted, for bound checks
	// intBits is a bit set over a hash of the integer keys (a one-hash Bloom filter) with at
	// least 16 bits per key: a probe reads every row of a candidate file, almost none of which
	// is deleted, and the bit answers most of them without a map lookup.
	intBits  []uint64
	bitShift uint
}

func newKeyScope() *keyScope {
	return &keyScope{seq: map[string]int64{}, intSeq: map[int64]int64{}}
}

func (s *keyScope) empty() bool { return s == nil || len(s.seq) == 0 && len(s.intSeq) == 0 }

// intBit is the position of integer key k in intBits (Fibonacci hashing).
func (s *keyScope) intBit(k int64) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 >> s.bitShift }

// seqOfInt is the highest sequence number of an equality delete of integer key k in the scope, 0
// for none (s may be nil).
func (s *keyScope) seqOfInt(k int64) int64 {
	if s == nil || len(s.intBits) == 0 {
		return 0
	}
	if !s.mayHoldInt(k) {
		return 0
	}
	return s.intSeq[k]
}

// mayHoldInt reports whether k's bit is set: false means k is not deleted in the scope.
func (s *keyScope) mayHoldInt(k int64) bool {
	b := s.intBit(k)
	return s.intBits[b>>6]&(1<<(b&63)) != 0
}

// index sorts the scope's single-column integer or string keys for bound checks, and sets the
// integer keys' bits.
func (s *keyScope) index(t iceberg.Type) {
	if s == nil {
		return
	}
	for k := range s.seq {
		s.encs = append(s.encs, k)
		if _, ok := t.(iceberg.StringType); ok {
			s.strs = append(s.strs, decodeString(k))
		}
	}
	slices.Sort(s.encs)
	slices.Sort(s.strs)
	if len(s.intSeq) == 0 {
		return
	}
	bits := uint(6) // at least one word
	for 1<<bits < 16*len(s.intSeq) {
		bits++
	}
	s.bitShift = 64 - bits
	s.intBits = make([]uint64, 1<<(bits-6))
	s.ints = make([]int64, 0, len(s.intSeq))
	for k := range s.intSeq {
		s.ints = append(s.ints, k)
		b := s.intBit(k)
		s.intBits[b>>6] |= 1 << (b & 63)
	}
	slices.Sort(s.ints)
}

// with is the sorted integer keys of s and of o (either may be nil), for a cached probe.
func (s *keyScope) with(o *keyScope) []int64 {
	switch {
	case o == nil || len(o.ints) == 0:
		return s.ints
	case s == nil || len(s.ints) == 0:
		return o.ints
	}
	all := slices.Concat(s.ints, o.ints)
	slices.Sort(all)
	return slices.Compact(all)
}

// withEncoded is with for encoded keys.
func (s *keyScope) withEncoded(o *keyScope) []string {
	switch {
	case o == nil || len(o.encs) == 0:
		return s.encs
	case s == nil || len(s.encs) == 0:
		return o.encs
	}
	all := slices.Concat(s.encs, o.encs)
	slices.Sort(all)
	return slices.Compact(all)
}

// mayHold reports whether data file d's key-column bounds can hold one of the scope's keys (true
// when the key or the bounds do not allow the check).
func (s *keyScope) mayHold(d LiveFile, keyIDs []int, t iceberg.Type) bool {
	if s.empty() {
		return false
	}
	if len(keyIDs) != 1 {
		return true
	}
	lo, hi := d.File.LowerBoundValues()[keyIDs[0]], d.File.UpperBoundValues()[keyIDs[0]]
	if lo == nil || hi == nil {
		return true
	}
	switch t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		l, okl := decodeInt(lo)
		h, okh := decodeInt(hi)
		if !okl || !okh {
			return true
		}
		i, _ := slices.BinarySearch(s.ints, l)
		return i < len(s.ints) && s.ints[i] <= h
	case iceberg.StringType:
		// Bounds may be truncated: the lower one is a prefix (at most every value), the upper
		// one rounded up (at least every value).
		i, _ := slices.BinarySearch(s.strs, string(lo))
		return i < len(s.strs) && s.strs[i] <= string(hi)
	}
	return true
}

// decodeInt decodes an Iceberg int or long bound (little-endian, 4 or 8 bytes).
func decodeInt(b []byte) (int64, bool) {
	switch len(b) {
	case 4:
		return int64(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)), true
	case 8:
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return int64(v), true
	}
	return 0, false
}

// intKey reports whether the table's key is one int or long column, which probeInts reads.
func intKey(keyIDs []int, t iceberg.Type) bool {
	switch t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return len(keyIDs) == 1
	}
	return false
}

// probeInts is readEncoded for a single int or long key column, without encoding each row's key:
// a probe reads every row of a candidate file, so on a big table its cost per row is most of a
// conversion's (design.md §10.1). Null keys are skipped, as in readEncoded.
func probeInts(ctx context.Context, fs icebergio.IO, path string, keyID int, fn func(key, pos int64)) error {
	var pos int64
	return readColumns(ctx, fs, path, []int{keyID}, func(rec arrow.RecordBatch) error {
		switch c := rec.Column(0).(type) {
		case *array.Int64:
			for i, v := range c.Int64Values() {
				if c.IsValid(i) {
					fn(v, pos+int64(i))
				}
			}
		case *array.Int32:
			for i, v := range c.Int32Values() {
				if c.IsValid(i) {
					fn(int64(v), pos+int64(i))
				}
			}
		default:
			return fmt.Errorf("key column %d is %s, not an integer", keyID, c.DataType())
		}
		pos += rec.NumRows()
		return nil
	})
}

// readColumns reads only the columns of the given field ids of a Parquet file, in that order,
// and calls fn with each record batch (valid only during the call).
func readColumns(ctx context.Context, fs icebergio.IO, path string, fieldIDs []int, fn func(rec arrow.RecordBatch) error) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return err
	}
	defer pf.Close()
	cols := make([]int, len(fieldIDs))
	psch := pf.MetaData().Schema
	for k, id := range fieldIDs {
		cols[k] = -1
		for ci := 0; ci < psch.NumColumns(); ci++ {
			if psch.Column(ci).SchemaNode().FieldID() == int32(id) {
				cols[k] = ci
				break
			}
		}
		if cols[k] < 0 {
			return fmt.Errorf("column %d not in the file", id)
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
