package sink

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// A rowList keeps its rows in order across chunk boundaries, and truncate keeps exactly the
// first n, clears what it drops from the last kept chunk and lets go of the chunks beyond.
func TestRowListChunks(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, rowChunk - 1, rowChunk, rowChunk + 1, 3*rowChunk + 7} {
		keeps := []int{0, min(1, n), n / 2, max(n-1, 0), n}
		slices.Sort(keeps)
		keeps = slices.Compact(keeps) // no case twice
		for _, keep := range keeps {
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
// and keeps the others in their order. The rows come from three shards in turn, as DMS spreads
// one table's records, and the commit takes shard a's (a per-shard prefix, as plans do): what
// the buffer knows per shard, and the re-deliveries waiting on each, follow what is left.
func TestBufferReleaseAcrossChunks(t *testing.T) {
	t.Parallel()
	got := ackCount{}
	x, y, dup := &namedAcker{"x", got}, &namedAcker{"y", got}, &namedAcker{"dup", got}
	b := newBuffer()
	n := 3*rowChunk + 5
	const size = 10 // each row counts size + 64 bytes (buffer.add)
	var take []int
	seqOf := func(i int) int { return i/3 + 1 } // per shard 1, 2, 3, ...
	for i := range n {
		r := brow("u", fmt.Sprintf("%c/%d", "abc"[i%3], seqOf(i)), i, "v", 0)
		r.ack = y
		if i%3 == 0 {
			r.ack = x
			take = append(take, i)
		}
		b.add(r, size)
	}
	b.attach("a", "1", dup) // a re-delivery of a/1: released with the commit of shard a
	b.attach("b", "2", dup) // of b/2: waits for b/1 and b/2, still buffered
	b.release(&batch{take: take})
	if got["x"] != len(take) || got["y"] != 0 || got["dup"] != 1 {
		t.Fatalf("acknowledged %v, want x=%d y=0 dup=1", got, len(take))
	}
	if b.rows.len() != n-len(take) || b.bytes != int64(b.rows.len())*(size+64) {
		t.Fatalf("%d rows, %d bytes left; want %d rows", b.rows.len(), b.bytes, n-len(take))
	}
	lastOf := func(shard int) string { // the sequence number of the shard's last row
		i := n - 1
		for i%3 != shard {
			i--
		}
		return fmt.Sprint(seqOf(i))
	}
	if _, ok := b.high["a"]; ok || b.high["b"] != lastOf(1) || b.high["c"] != lastOf(2) {
		t.Fatalf("highest per shard after the commit %v: want none for a, the last b and c", b.high)
	}
	k := 0
	for i := range n {
		if i%3 == 0 {
			continue
		}
		want := fmt.Sprintf("%c/%d", "abc"[i%3], seqOf(i))
		if r := b.rows.at(k); r.shard+"/"+r.seq != want || r.ack != y {
			t.Fatalf("kept row %d is %s/%s, want %s", k, r.shard, r.seq, want)
		}
		k++
	}
	b.release(nil)
	if got["y"] != n-len(take) || got["dup"] != 2 || b.rows.len() != 0 || len(b.rows.chunks) != 0 || b.pending() {
		t.Fatalf("after releasing the rest: acknowledged %v, %d rows in %d chunks", got, b.rows.len(), len(b.rows.chunks))
	}
}
