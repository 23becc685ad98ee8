package deletes

import (
	"container/list"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	icebergio "github.com/apache/iceberg-go/io"
)

// KeyCache keeps the key columns of data files in memory for the position conversion's
// probe (design.md §10.1), shared by every table's Planner in the process and bounded in
// bytes (least recently used out). A conversion on a big table with random keys reads the key
// column of every data file below the equality deletes' sequence number, every few seconds; the
// data files never change, so after the first read a probe needs no Parquet decoding. Profiled on
// the 1M-row dv benchmark, reading the key columns was 4.8 s of the conversions' 6.6 s of CPU
// (docs/benchmarks.md). A column is cached sorted by key, so a probe looks up the deleted keys
// (a step per deleted key, not per row) and its cost follows the changes, not the table's size.
//
// A single int or long key is cached as integers (probeInts): 12 bytes per row (the key and its
// position), 8 for a column already in key order; every other key encoded (ProbeKeys,
// keybytes.go). Null keys are left out. A file whose column
// alone is larger than the bound is read, not cached. A nil *KeyCache caches nothing.
//
// Eviction keeps the working set: a column looked up within activeFor is never evicted to make
// room for another, which is then read and not cached. When a table's key columns outgrow the
// bound, every commit probes the same files in turn, and least-recently-used eviction would drop
// each column just before its next probe (every file read at every commit); this way the cached
// part keeps answering and only the files beyond the bound are read. Columns no probe has used
// for activeFor (files a compaction elsewhere removed, tables gone quiet) make room.
type KeyCache struct {
	limit int64
	now   func() time.Time

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
	cols  string // for an encoded column (keybytes.go): its key columns (encID); "" for integers
}

// keyColumn is one data file's key column sorted by key, for a probe that looks up the deleted
// keys instead of visiting every row (design.md §10.1: its cost follows the changes, not the
// file's size): keys[i] is at position pos[i] of the file, or at position i when pos is nil (a
// column written in key order, as a full load often is). Null keys are left out; they never
// match a deleted key in probeInts either.
type keyColumn struct {
	id   keyColumnID
	keys []int64
	pos  []uint32
	enc  *encColumn // instead of keys and pos: an encoded column (keybytes.go)
	used time.Time  // when a probe last looked it up (or cached it); under the cache's lock
}

// activeFor is how long a column stays in the working set after a probe used it: commits and
// conversions probe a table's files every few seconds.
const activeFor = time.Minute

func (col *keyColumn) bytes() int64 {
	n := int64(len(col.keys))*8 + int64(len(col.pos))*4 + 64
	if col.enc != nil {
		n += col.enc.bytes()
	}
	return n
}

// maxCachedRows bounds the rows of a cached column: positions are kept as uint32.
const maxCachedRows = 1 << 32

// newKeyColumn sorts a file's non-null keys, given in file order with their positions, in place
// (a column of 20M rows is sorted in its own 240 MB, with no copy).
func newKeyColumn(id keyColumnID, keys []int64, pos []uint32) *keyColumn {
	col := &keyColumn{id: id, keys: keys, pos: pos}
	identity := true
	for i, p := range pos {
		if p != uint32(i) {
			identity = false
			break
		}
	}
	if identity && slices.IsSorted(keys) {
		col.pos = nil
		return col
	}
	sort.Sort(byKey{keys, pos})
	return col
}

// byKey sorts a column's keys with their positions.
type byKey struct {
	keys []int64
	pos  []uint32
}

func (b byKey) Len() int           { return len(b.keys) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.pos[i], b.pos[j] = b.pos[j], b.pos[i]
}

// lookup calls fn with the key and position of every row whose key is in want (sorted). It
// walks the shorter of the two sorted lists and binary-searches the longer, so it costs
// min(len(want), rows) × log(max) steps, not a step per row.
func (col *keyColumn) lookup(want []int64, fn func(key, pos int64)) {
	at := func(i int) int64 {
		if col.pos == nil {
			return int64(i)
		}
		return int64(col.pos[i])
	}
	keys := col.keys
	if len(want) <= len(keys) {
		i := 0
		for _, k := range want {
			j, _ := slices.BinarySearch(keys[i:], k)
			for i += j; i < len(keys) && keys[i] == k; i++ {
				fn(k, at(i))
			}
			if i == len(keys) {
				return
			}
		}
		return
	}
	for i, k := range keys {
		if _, ok := slices.BinarySearch(want, k); ok {
			fn(k, at(i))
		}
	}
}

// NewKeyCache returns a cache of at most limit bytes of key columns; limit <= 0 returns nil (no
// cache).
func NewKeyCache(limit int64) *KeyCache {
	if limit <= 0 {
		return nil
	}
	return &KeyCache{limit: limit, now: time.Now, lru: list.New(), byKey: map[keyColumnID]*list.Element{}}
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

// ProbeInts calls fn with the key and position of the rows of a data file whose key may be in
// want (sorted): exactly those rows when the column is cached (looked up, design.md §10.1),
// else every non-null row, read from the file (and the column is cached if it fits), so fn must
// still check each key. rows is the file's row count (from its manifest entry), so that a column
// read for the cache is allocated once at its size instead of grown.
func (c *KeyCache) ProbeInts(ctx context.Context, fs icebergio.IO, path string, keyID int, rows int64, want []int64, fn func(key, pos int64)) error {
	if c == nil {
		return probeInts(ctx, fs, path, keyID, fn)
	}
	id := keyColumnID{path: path, field: keyID}
	if col := c.get(id); col != nil {
		col.lookup(want, fn)
		return nil
	}
	if rows >= maxCachedRows || rows*12 > c.limit {
		return probeInts(ctx, fs, path, keyID, fn) // never cached
	}
	keys, pos := make([]int64, 0, max(rows, 0)), make([]uint32, 0, max(rows, 0))
	err := probeInts(ctx, fs, path, keyID, func(key, p int64) {
		keys, pos = append(keys, key), append(pos, uint32(p))
		fn(key, p)
	})
	if err != nil {
		return err
	}
	c.put(newKeyColumn(id, keys[:len(keys):len(keys)], pos[:len(pos):len(pos)]))
	return nil
}

// KeysAt calls fn with the key at each of the given positions of a data file's key column
// (null keys are skipped): from the cached column when there is one, else read from the file
// (and not cached: the file is being rewritten). c may be nil.
func (c *KeyCache) KeysAt(ctx context.Context, fs icebergio.IO, path string, keyID int, at func(pos int64) bool, fn func(key int64)) error {
	if c != nil {
		if col := c.get(keyColumnID{path: path, field: keyID}); col != nil {
			for i, k := range col.keys {
				p := int64(i)
				if col.pos != nil {
					p = int64(col.pos[i])
				}
				if at(p) {
					fn(k)
				}
			}
			return nil
		}
	}
	return probeInts(ctx, fs, path, keyID, func(key, pos int64) {
		if at(pos) {
			fn(key)
		}
	})
}

// Forget drops the cached columns of data files a committed compaction removed from their table:
// no probe reads them again, and the bound is better spent on live files. c may be nil.
func (c *KeyCache) Forget(paths map[string]struct{}) {
	if c == nil || len(paths) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		col := e.Value.(*keyColumn)
		if _, gone := paths[col.id.path]; gone {
			c.lru.Remove(e)
			delete(c.byKey, col.id)
			c.held -= col.bytes()
		}
		e = next
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
	col := e.Value.(*keyColumn)
	col.used = c.now()
	return col
}

// put caches col if it fits the bound, dropping the least recently used columns to make room,
// but none used within activeFor: then col is not cached.
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
	now := c.now()
	for c.held+n > c.limit {
		last := c.lru.Back()
		old := last.Value.(*keyColumn)
		if now.Sub(old.used) < activeFor {
			return // the working set fills the bound
		}
		c.lru.Remove(last)
		delete(c.byKey, old.id)
		c.held -= old.bytes()
	}
	col.used = now
	c.byKey[col.id] = c.lru.PushFront(col)
	c.held += n
}

// CachedPaths lists the data files whose key columns c holds (none for a nil cache).
func (c *KeyCache) CachedPaths() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.byKey {
		out = append(out, id.path)
	}
	return out
}
