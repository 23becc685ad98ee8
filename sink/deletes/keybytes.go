package deletes

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// The key index of the keys other than one integer column (design.md §10.1): a data file's key
// columns encoded canonically (keyenc.go), sorted, in one byte arena, so that a probe looks the
// deleted keys up (a binary search each, every byte compared) instead of reading the file. It
// lives in the process's KeyCache beside the integer columns, under the same byte bound: a row
// costs its encoding plus 8 bytes (its end in the arena and its position), 25 for a UUID text
// key. A file whose column does not fit is read at each probe, and only files whose bounds may
// hold a deleted key are probed, so a cold or too small cache costs reads, never a wrong row.

// encColumn is one data file's encoded key column sorted by key: key i is data[end[i-1]:end[i]]
// at position pos[i] of the file. Rows with a null key column are left out, as in readEncoded.
type encColumn struct {
	data []byte
	end  []uint32
	pos  []uint32
}

func (c *encColumn) bytes() int64 { return int64(len(c.data)) + 4*int64(len(c.end)+len(c.pos)) }

func (c *encColumn) key(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = c.end[i-1]
	}
	return c.data[start:c.end[i]]
}

// newEncColumn sorts the keys of a file (data, ends and positions in file order) into a column.
// The rows are sorted by their first 8 bytes as an integer, then by the rest (most keys differ
// there: a 1M-row column of UUID keys sorts in a fifth of the time of byte comparisons alone),
// and copied in order.
func newEncColumn(data []byte, end, pos []uint32) *encColumn {
	type row struct {
		prefix          uint64
		start, end, pos uint32
	}
	rows := make([]row, len(end))
	start := uint32(0)
	for i, e := range end {
		var p [8]byte
		copy(p[:], data[start:e])
		rows[i] = row{binary.BigEndian.Uint64(p[:]), start, e, pos[i]}
		start = e
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return bytes.Compare(data[a.start:a.end], data[b.start:b.end])
	})
	out := &encColumn{data: make([]byte, 0, len(data)), end: make([]uint32, len(rows)), pos: make([]uint32, len(rows))}
	for i, r := range rows {
		out.data = append(out.data, data[r.start:r.end]...)
		out.end[i], out.pos[i] = uint32(len(out.data)), r.pos
	}
	return out
}

// lookup calls fn with the key and position of every row whose key is in want (sorted).
func (c *encColumn) lookup(want []string, fn func(key []byte, pos int64)) {
	n := len(c.end)
	lo := 0
	for _, k := range want {
		i := lo + sort.Search(n-lo, func(i int) bool { return string(c.key(lo+i)) >= k })
		for ; i < n && string(c.key(i)) == k; i++ {
			fn(c.key(i), int64(c.pos[i]))
		}
		if lo = i; lo == n {
			return
		}
	}
}

// encID names the encoded key column of key columns keyIDs in a cache (keyColumnID.cols).
func encID(keyIDs []int) string {
	parts := make([]string, len(keyIDs))
	for i, id := range keyIDs {
		parts[i] = strconv.Itoa(id)
	}
	return "enc:" + strings.Join(parts, ",")
}

// ProbeKeys is ProbeInts for keys of any other type: it calls fn with the encoded key
// (AppendKeyOf; valid during the call) and position of the rows of a data file whose key may
// be in want (sorted encodings): exactly those when the column is cached, else every row with
// no null key column, read from the file (and cached if it fits), so fn must still check each
// key. types are the types of the key columns keyIDs.
func (c *KeyCache) ProbeKeys(ctx context.Context, fs icebergio.IO, path string, types []iceberg.Type, keyIDs []int,
	rows int64, want []string, fn func(key []byte, pos int64)) error {
	if c == nil || rows >= maxCachedRows {
		return readEncoded(ctx, fs, path, types, keyIDs, fn)
	}
	id := keyColumnID{path: path, cols: encID(keyIDs)}
	if col := c.get(id); col != nil {
		col.enc.lookup(want, fn)
		return nil
	}
	var data []byte
	end, pos := make([]uint32, 0, max(rows, 0)), make([]uint32, 0, max(rows, 0))
	cacheable := true
	err := readEncoded(ctx, fs, path, types, keyIDs, func(key []byte, p int64) {
		fn(key, p)
		if !cacheable {
			return
		}
		data = append(data, key...)
		if int64(len(data)) >= maxCachedRows || int64(len(data)) > c.limit {
			cacheable, data, end, pos = false, nil, nil, nil // never cached: drop what was kept
			return
		}
		end, pos = append(end, uint32(len(data))), append(pos, uint32(p))
	})
	if err != nil || !cacheable {
		return err
	}
	c.put(&keyColumn{id: id, enc: newEncColumn(data, end, pos)})
	return nil
}

// EncodedKeysAt is KeysAt for encoded keys (ProbeKeys): it calls fn with the encoded key (valid
// during the call) at each of the given positions of a data file (rows with a null key column
// skipped), from the cached column when there is one, else read from the file (not cached).
func (c *KeyCache) EncodedKeysAt(ctx context.Context, fs icebergio.IO, path string, types []iceberg.Type, keyIDs []int,
	at func(pos int64) bool, fn func(key []byte)) error {
	if c != nil {
		if col := c.get(keyColumnID{path: path, cols: encID(keyIDs)}); col != nil {
			for i, p := range col.enc.pos {
				if at(int64(p)) {
					fn(col.enc.key(i))
				}
			}
			return nil
		}
	}
	return readEncoded(ctx, fs, path, types, keyIDs, func(key []byte, pos int64) {
		if at(pos) {
			fn(key)
		}
	})
}

// readEncoded reads only the key columns (by field id, of types) of a Parquet file and calls fn
// with each row's encoded key (valid during the call) and its position; rows with a null key
// column are skipped (they match no deleted key, as in probeInts).
func readEncoded(ctx context.Context, fs icebergio.IO, path string, types []iceberg.Type, keyIDs []int, fn func(key []byte, pos int64)) error {
	var pos int64
	var buf []byte
	return readColumns(ctx, fs, path, keyIDs, func(rec arrow.RecordBatch) error {
		cols := rec.Columns()
	rows:
		for i := 0; i < int(rec.NumRows()); i++ {
			buf = buf[:0]
			for ki, col := range cols {
				if col.IsNull(i) {
					continue rows
				}
				buf = AppendKey(buf, types[ki], dms.DatumView(col, i))
			}
			fn(buf, pos+int64(i))
		}
		pos += rec.NumRows()
		return nil
	})
}

// checkEncodable returns an error unless the key columns keyIDs of schema can be encoded.
func checkEncodable(schema *iceberg.Schema, keyIDs []int) ([]iceberg.Type, error) {
	types, err := keyTypes(schema, keyIDs)
	if err != nil {
		return nil, err
	}
	if !encodable(types) {
		return nil, fmt.Errorf("key columns %v: a type no key encoding covers", keyIDs)
	}
	return types, nil
}
