package sink

// rowChunk is how many rows one chunk of a rowList holds: 32 KiB at 256 bytes a row, the
// largest size class of Go's small-object allocator. A power of two, so at divides by shifting.
const rowChunk = 128

// rowList is a buffer's rows, in the order they came, stored in fixed-size chunks.
//
// A single slice grown by doubling, as before, copied every row about twice on its way to a
// flush, allocated up to twice the rows it held, and made the collector scan that spare
// capacity (rows hold pointers; a large object is scanned whole). A flush of 17,500 rows of
// 256 bytes allocated 8.4 MiB to hold 4.5 MiB, and its copies were the largest single cost of
// the writer's intake in the pipeline benchmark's profile (docs/benchmarks.md, 2026-12-06).
// Chunks are never copied when the list grows, hold at most one partly used chunk more than
// the rows, and are let go when a commit releases their rows.
type rowList struct {
	chunks []*[rowChunk]row
	n      int
}

// len is the number of rows.
func (l *rowList) len() int { return l.n }

// at is row i (0 <= i < len); the pointer stays valid until the list is truncated below i+1.
func (l *rowList) at(i int) *row { return &l.chunks[i/rowChunk][i%rowChunk] }

// push appends r.
func (l *rowList) push(r row) {
	if l.n == len(l.chunks)*rowChunk {
		l.chunks = append(l.chunks, new([rowChunk]row))
	}
	*l.at(l.n) = r
	l.n++
}

// truncate keeps the first n rows. The chunks that no longer hold a row are let go; the rest
// of the last kept chunk is cleared, so that nothing the dropped rows point to stays reachable.
func (l *rowList) truncate(n int) {
	used := (n + rowChunk - 1) / rowChunk
	if n%rowChunk != 0 {
		clear(l.chunks[used-1][n%rowChunk : min(rowChunk, l.n-(used-1)*rowChunk)])
	}
	clear(l.chunks[used:])
	l.chunks = l.chunks[:used]
	l.n = n
}
