package sink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// commitRecorder records every CommitInfo.
type commitRecorder struct {
	NopMetrics
	mu    sync.Mutex
	infos []CommitInfo
}

func (m *commitRecorder) Committed(c CommitInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.infos = append(m.infos, c)
}

func (m *commitRecorder) got() []CommitInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]CommitInfo(nil), m.infos...)
}

// A commit reports the newest source time of the changes it took: the commit-timestamp where a
// record has one (the source commit), else metadata.timestamp (when DMS built the record).
func TestCommitReportsNewestSourceTime(t *testing.T) {
	t.Parallel()
	rec := &commitRecorder{}
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withOptions(WithMetrics(rec)))
	for i, m := range []change.Metadata{
		// Its metadata.timestamp is the newest of all, but the commit-timestamp is what counts.
		{CommitTimestamp: "2026-03-01T10:00:01.000000Z", Timestamp: "2026-03-01T10:00:09.000000Z"},
		{CommitTimestamp: "2026-03-01T10:00:03.250000Z", Timestamp: "2026-03-01T10:00:04.000000Z"},
		{Timestamp: "2026-03-01T10:00:02.000000Z"}, // a load: no commit-timestamp
	} {
		m.RecordType, m.Operation = "data", "insert"
		h.event(&change.Event{Table: "orders", Op: change.OpInsert, Meta: m,
			Columns: []change.Column{col("id", fmt.Sprint(i+1))}, Pos: change.Position{Shard: "s0", Seq: fmt.Sprint(i + 1)}})
	}
	h.flush()
	infos := rec.got()
	if len(infos) != 1 {
		t.Fatalf("%d commits, want 1", len(infos))
	}
	want := time.Date(2026, 3, 1, 10, 0, 3, 250_000_000, time.UTC)
	if got := infos[0].SourceNewest; !got.Equal(want) {
		t.Fatalf("SourceNewest = %v, want %v", got, want)
	}

	// Records without any timestamp (or an unreadable one) leave it zero: nothing to observe.
	h.event(&change.Event{Table: "orders", Op: change.OpInsert, Meta: change.Metadata{RecordType: "data", Timestamp: "garbage"},
		Columns: []change.Column{col("id", "9")}, Pos: change.Position{Shard: "s0", Seq: "9"}})
	h.flush()
	if infos = rec.got(); len(infos) != 2 || !infos[1].SourceNewest.IsZero() {
		t.Fatalf("second commit: %+v, want a zero SourceNewest", infos[len(infos)-1])
	}
}

// bufferOf returns the BufferStat of table from s.Buffers().
func bufferOf(t *testing.T, s *Iceberg, table string) BufferStat {
	t.Helper()
	for _, b := range s.Buffers() {
		if b.Table == table {
			return b
		}
	}
	t.Fatalf("no buffer stat for %s in %+v", table, s.Buffers())
	return BufferStat{}
}

// The queue and buffer gauges: events buffered and not committed count as buffered rows and
// bytes, events waiting in the queue of a busy writer as queued, and both drop once committed.
func TestBufferStats(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{} // nothing may commit yet
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var block sync.Once
	listener := func(CommitInfo) {
		block.Do(func() {
			entered <- struct{}{}
			<-release
		})
	}
	h := guardHarness(t, OrderingArrival, fb, withOptions(WithCommitListener(listener)))
	for i := 1; i <= 3; i++ {
		h.arrive("s0", i, int64(1000+i), "orders", change.OpInsert, []change.Column{col("id", fmt.Sprint(i))}, nil)
	}
	h.flush() // the bound holds everything back: taken in, buffered, not committed
	b := bufferOf(t, h.s, "shop.orders")
	if b.Queued != 0 || b.Rows != 3 || b.Bytes <= 0 || b.QueueCapacity != DefaultConfig().QueueLength {
		t.Fatalf("after a flush that committed nothing: %+v, want 0 queued, 3 rows, some bytes", b)
	}

	// The writer commits and is held in the commit listener: what is submitted now waits in the
	// queue.
	fb.ms.Store(10_000)
	flushed := make(chan error, 1)
	go func() { flushed <- h.s.Flush(context.Background()) }()
	<-entered
	for i := 4; i <= 5; i++ {
		h.arrive("s0", i, int64(1000+i), "orders", change.OpInsert, []change.Column{col("id", fmt.Sprint(i))}, nil)
	}
	if b = bufferOf(t, h.s, "shop.orders"); b.Queued != 2 {
		t.Fatalf("while the writer commits: %+v, want 2 queued", b)
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	h.flush()
	if b = bufferOf(t, h.s, "shop.orders"); b.Queued != 0 || b.Rows != 0 || b.Bytes != 0 {
		t.Fatalf("after everything committed: %+v, want nothing queued or buffered", b)
	}
	if n := h.ack.N.Load(); n != 5 {
		t.Fatalf("%d acknowledged, want 5", n)
	}
}

// The sink owns one key-column cache for its tables' conversions, bounded by
// maintenance.key_cache_bytes (0: none).
func TestKeyCacheStat(t *testing.T) {
	for _, limit := range []int64{DefaultConfig().Maintenance.KeyCacheBytes, 0} {
		cfg := DefaultConfig()
		cfg.Catalog = DefaultCatalogConfig(t.TempDir())
		cfg.Stream = "st"
		cfg.Maintenance.KeyCacheBytes = limit
		s, err := New(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.KeyCache(); got != (KeyCacheStat{Limit: limit}) {
			t.Fatalf("key_cache_bytes %d: %+v", limit, got)
		}
	}
	if DefaultConfig().Maintenance.KeyCacheBytes != 256<<20 {
		t.Fatalf("default key_cache_bytes %d, want 256 MiB", DefaultConfig().Maintenance.KeyCacheBytes)
	}
}
