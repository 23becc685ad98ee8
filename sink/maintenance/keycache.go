package maintenance

import (
	"container/list"
	"context"
	"sync"

	icebergio "github.com/apache/iceberg-go/io"
)

// KeyCache keeps the integer key column of data files in memory for the position conversion's
// probe (design.md §11.1), shared by every table's Maintainer in the process and bounded in
// bytes (least recently used out). A conversion on a big table with random keys reads the key
// column of every data file below the equality deletes' sequence number, every few seconds; the
// data files never change, so after the first read a probe costs the loop over the cached keys
// and no Parquet decoding. Profiled on the 1M-row dv benchmark, reading the key columns was
// 4.8 s of the conversions' 6.6 s of CPU (docs/benchmarks.md).
//
// Only single int or long keys are cached (probeInts): 8 bytes per row, plus a validity bit per
// row for files with null keys. A file whose column alone is larger than the bound is read, not
// cached. A nil *KeyCache caches nothing.
type KeyCache struct {
	limit int64

	mu    sync.Mutex
	held  int64
	lru   *list.List // of *keyColumn, most recently used first
	byKey map[keyColumnID]*list.Element
	hits  int64
	reads int64
}

// keyColumnID names one cached column: data files never change, and the key column of a table
// can change only with its key (a new field id).
type keyColumnID struct {
	path  string
	field int
}

// keyColumn is one data file's key column in file order (position = index); valid is nil when
// every key is set, else one bit per row.
type keyColumn struct {
	id    keyColumnID
	keys  []int64
	valid []uint64
}

func (col *keyColumn) bytes() int64 { return int64(len(col.keys))*8 + int64(len(col.valid))*8 + 64 }

// NewKeyCache returns a cache of at most limit bytes of key columns; limit <= 0 returns nil (no
// cache).
func NewKeyCache(limit int64) *KeyCache {
	if limit <= 0 {
		return nil
	}
	return &KeyCache{limit: limit, lru: list.New(), byKey: map[keyColumnID]*list.Element{}}
}

// Held is the bytes of key columns cached now (0 for a nil cache).
func (c *KeyCache) Held() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Limit is the cache's bound in bytes (0 for a nil cache).
func (c *KeyCache) Limit() int64 {
	if c == nil {
		return 0
	}
	return c.limit
}

// Stats returns, under one lock, the bytes held and the probes answered from the cache and
// those that read the file.
func (c *KeyCache) Stats() (held, hits, reads int64) {
	if c == nil {
		return 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held, c.hits, c.reads
}

// UseKeyCache makes m's conversions probe through c (nil: read every file). Call it before Run.
func (m *Maintainer) UseKeyCache(c *KeyCache) { m.keys = c }

// probeInts is the package's probeInts through the cache: fn sees each row's non-null key and
// position, from memory when the column is cached, else from the file (and the column is cached
// if it fits).
// rows is the file's row count (from its manifest entry), so that a column read for the cache is
// allocated once at its size instead of grown.
func (c *KeyCache) probeInts(ctx context.Context, fs icebergio.IO, path string, keyID int, rows int64, fn func(key, pos int64)) error {
	if c == nil {
		return probeInts(ctx, fs, path, keyID, fn)
	}
	id := keyColumnID{path, keyID}
	if col := c.get(id); col != nil {
		col.each(fn)
		return nil
	}
	col := &keyColumn{id: id, keys: make([]int64, 0, max(rows, 0))}
	err := probeInts(ctx, fs, path, keyID, func(key, pos int64) {
		for int64(len(col.keys)) < pos { // a null key: probeInts skips it
			col.setNull(len(col.keys))
			col.keys = append(col.keys, 0)
		}
		col.keys = append(col.keys, key)
	})
	if err != nil {
		return err
	}
	// Trailing null keys are not seen; they are past len(keys), which each never reaches.
	col.keys = col.keys[:len(col.keys):len(col.keys)]
	c.put(col)
	col.each(fn)
	return nil
}

// setNull marks row i (below or at len(keys)) as a null key.
func (col *keyColumn) setNull(i int) {
	if col.valid == nil {
		col.valid = make([]uint64, 0, 1)
	}
	for len(col.valid)*64 <= i {
		col.valid = append(col.valid, ^uint64(0))
	}
	col.valid[i>>6] &^= 1 << (i & 63)
}

// each calls fn with every non-null key and its position.
func (col *keyColumn) each(fn func(key, pos int64)) {
	if col.valid == nil {
		for i, k := range col.keys {
			fn(k, int64(i))
		}
		return
	}
	for i, k := range col.keys {
		if w := i >> 6; w < len(col.valid) && col.valid[w]&(1<<(i&63)) == 0 {
			continue
		}
		fn(k, int64(i))
	}
}

func (c *KeyCache) get(id keyColumnID) *keyColumn {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[id]
	if !ok {
		c.reads++
		return nil
	}
	c.hits++
	c.lru.MoveToFront(e)
	return e.Value.(*keyColumn)
}

// put caches col if it fits the bound, dropping the least recently used columns to make room.
func (c *KeyCache) put(col *keyColumn) {
	n := col.bytes()
	if n > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[col.id]; ok { // a concurrent probe cached it first
		return
	}
	for c.held+n > c.limit {
		last := c.lru.Back()
		old := last.Value.(*keyColumn)
		c.lru.Remove(last)
		delete(c.byKey, old.id)
		c.held -= old.bytes()
	}
	c.byKey[col.id] = c.lru.PushFront(col)
	c.held += n
}
