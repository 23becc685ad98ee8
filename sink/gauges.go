package sink

import (
	"slices"
	"strings"
	"sync/atomic"
)

// BufferStat is what one table writer holds that is not committed yet (Iceberg.Buffers).
type BufferStat struct {
	// Table is the target "namespace.table".
	Table string
	// Queued is the number of events (and flush requests) waiting in the writer's queue,
	// QueueCapacity its length (Config.QueueLength): Submit blocks while they are equal.
	Queued, QueueCapacity int
	// Rows is the number of changes taken into the buffer and not committed: converted rows and
	// events held for their turn by the ordering guard. Bytes is what they count towards
	// flush_bytes (record size plus a fixed overhead per change).
	Rows  int
	Bytes int64
}

// bufferGauge is the writer's buffer size as other goroutines may read it: the writer stores
// it after every event and flush (publish), a scrape loads it.
type bufferGauge struct {
	rows, bytes atomic.Int64
}

// publish stores the buffer's size for Buffers; two atomic stores, no lock.
func (pl *planner) publish() {
	pl.gauge.rows.Store(int64(pl.buf.rows.len() + len(pl.buf.held)))
	pl.gauge.bytes.Store(pl.buf.bytes)
}

// Buffers returns, per table writer started so far and sorted by table, what it has queued and
// buffered and not committed yet. It takes no writer's lock: the queue length is the channel's,
// the buffer's size is what the writer last published (after its last event or flush), so it
// is cheap enough to call at every scrape.
func (s *Iceberg) Buffers() []BufferStat {
	ws := s.snapshotWriters()
	out := make([]BufferStat, 0, len(ws))
	for _, w := range ws {
		rows, bytes := w.buffered()
		out = append(out, BufferStat{Table: w.name, Queued: len(w.in), QueueCapacity: cap(w.in), Rows: rows, Bytes: bytes})
	}
	slices.SortFunc(out, func(a, b BufferStat) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// KeyCacheStat is the process's cache of key columns (maintenance.Config.KeyCacheBytes): the
// bytes it holds, its bound, and the probes of data files it answered (Hits) or that read the
// file (Reads).
type KeyCacheStat struct {
	Held, Limit, Hits, Reads int64
}

// KeyCache returns the state of the key-column cache (all zero when it is off).
func (s *Iceberg) KeyCache() KeyCacheStat {
	held, hits, reads := s.keyCache.Stats()
	return KeyCacheStat{Held: held, Limit: s.keyCache.Limit(), Hits: hits, Reads: reads}
}
