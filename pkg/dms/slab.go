package dms

import (
	"unsafe"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Slabs: the fast path's two allocations per record, made once per many records.
//
// A fresh event needs its columns, and a shared record with an escaped string an arena for the
// unescaped text. Allocated per record, they were two of the pipeline's most frequent
// allocations (BenchmarkPipeline's memory profile: about a sixth of its bytes, in small
// objects). The decoder now carves both from slabs of slabBytes, as the sink's writer carves
// row values (sink/convert.go datums); a record that needs more than a slab gets its own. What
// is carved is never written again: an event's columns are a full slice expression (nothing
// appended to them reaches a neighbour), and text is only ever appended after the bytes
// already handed out. A slab lives until the last event or string carved from it is dropped:
// at most slabBytes more per slab than the records themselves hold, and records are consumed in
// about the order they are decoded, so that is about one slab per decoder.

// slabBytes is the size of a slab: the largest small object of the Go allocator, so that a
// slab is neither a large object (zeroed apart, its own span) nor able to keep much alive.
const slabBytes = 32 << 10

// columns returns n zero columns for a fresh event.
func (d *Decoder) columns(n int) []change.Column {
	if len(d.colSlab) < n {
		d.colSlab = make([]change.Column, max(n, slabBytes/int(unsafe.Sizeof(change.Column{}))))
	}
	c := d.colSlab[:n:n]
	d.colSlab = d.colSlab[n:]
	return c
}

// text returns an empty arena with room for n bytes at the free end of the text slab: in a
// DecodeShared call, the fast path's only arena. keepText takes what the record wrote there.
func (d *Decoder) text(n int) []byte {
	if cap(d.textSlab)-len(d.textSlab) < n {
		d.textSlab = make([]byte, 0, max(n, slabBytes))
	}
	return d.textSlab[len(d.textSlab):len(d.textSlab):cap(d.textSlab)]
}

// keepText marks the bytes the shared record just decoded wrote into the text slab as taken.
// Its arena is the slab's free end, never moved: append moves a slice only past its capacity,
// and the unescaped text fits the room text was asked for (were it ever larger, the arena is an
// array of its own and the slab stays as it was).
func (d *Decoder) keepText() {
	if n := len(d.arena); d.shared && n <= cap(d.textSlab)-len(d.textSlab) {
		d.textSlab = d.textSlab[:len(d.textSlab)+n]
	}
}
