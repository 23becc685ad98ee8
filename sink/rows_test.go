package sink

import (
	"fmt"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// A rowList keeps its rows in order across chunk boundaries, and truncate keeps exactly the
// first n, clears what it drops from the last kept chunk and lets go of the chunks beyond.
func TestRowListChunks(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, rowChunk - 1, rowChunk, rowChunk + 1, 3*rowChunk + 7} {
		for _, keep := range []int{0, 1, n / 2, n - 1, n} {
			if keep < 0 || keep > n {
				continue
			}
			t.Run(fmt.Sprintf("n=%d/keep=%d", n, keep), func(t *testing.T) {
				var l rowList
				for i := range n {
					l.push(row{seq: fmt.Sprint(i), vals: []dms.Datum{{I: int64(i)}}})
				}
				if l.len() != n {
					t.Fatalf("len %d, want %d", l.len(), n)
				}
				for i := range n {
					if got := l.at(i).seq; got != fmt.Sprint(i) {
						t.Fatalf("row %d holds %q", i, got)
					}
				}
				var last *[rowChunk]row
				if keep > 0 {
					last = l.chunks[(keep-1)/rowChunk]
				}
				l.truncate(keep)
				if l.len() != keep || len(l.chunks) != (keep+rowChunk-1)/rowChunk {
					t.Fatalf("after truncate(%d): len %d, %d chunks", keep, l.len(), len(l.chunks))
				}
				for i := range keep {
					if got := l.at(i).seq; got != fmt.Sprint(i) {
						t.Fatalf("kept row %d holds %q", i, got)
					}
				}
				if last != nil {
					for i := keep % rowChunk; keep%rowChunk != 0 && i < rowChunk; i++ {
						if last[i].seq != "" || last[i].vals != nil {
							t.Fatalf("slot %d of the last kept chunk still holds row %q", i, last[i].seq)
						}
					}
				}
				// The list goes on from where it was cut.
				l.push(row{seq: "next"})
				if l.len() != keep+1 || l.at(keep).seq != "next" {
					t.Fatalf("push after truncate: len %d, row %d %q", l.len(), keep, l.at(keep).seq)
				}
			})
		}
	}
}

// A commit that takes some rows of a buffer spanning several chunks acknowledges exactly those
// and keeps the others in their order.
func TestBufferReleaseAcrossChunks(t *testing.T) {
	t.Parallel()
	got := ackCount{}
	x, y := &namedAcker{"x", got}, &namedAcker{"y", got}
	b := newBuffer()
	n := 3*rowChunk + 5
	var take []int
	for i := range n {
		r := brow("u", fmt.Sprintf("a/%d", i+1), i, "v", 0)
		r.ack = y
		if i%3 == 0 {
			r.ack = x
			take = append(take, i)
		}
		b.add(r, 10)
	}
	b.release(&batch{take: take})
	if got["x"] != len(take) || got["y"] != 0 {
		t.Fatalf("acknowledged %v, want x=%d y=0", got, len(take))
	}
	if b.rows.len() != n-len(take) || b.bytes != int64(b.rows.len())*74 {
		t.Fatalf("%d rows, %d bytes left; want %d rows", b.rows.len(), b.bytes, n-len(take))
	}
	k := 0
	for i := range n {
		if i%3 == 0 {
			continue
		}
		if r := b.rows.at(k); r.seq != fmt.Sprint(i+1) || r.ack != y {
			t.Fatalf("kept row %d is seq %s, want %d", k, r.seq, i+1)
		}
		k++
	}
	b.release(nil)
	if got["y"] != n-len(take) || b.rows.len() != 0 || len(b.rows.chunks) != 0 || b.pending() {
		t.Fatalf("after releasing the rest: acknowledged %v, %d rows in %d chunks", got, b.rows.len(), len(b.rows.chunks))
	}
}
