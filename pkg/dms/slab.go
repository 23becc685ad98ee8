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

// text returns an empty arena with room for n bytes at the free end of the text slab; keepText
// marks what the record wrote there as taken when the record decoded.
func (d *Decoder) text(n int) []byte {
	if cap(d.textSlab)-len(d.textSlab) < n {
		d.textSlab = make([]byte, 0, max(n, slabBytes))
	}
	d.fromSlab = true
	return d.textSlab[len(d.textSlab):len(d.textSlab):cap(d.textSlab)]
}

// keepText takes the bytes the record just decoded wrote into the text slab (its arena came from
// text and was never moved: the unescaped text fits the room text was asked for).
func (d *Decoder) keepText() {
	if !d.fromSlab {
		return
	}
	d.fromSlab = false
	free := d.textSlab[len(d.textSlab):cap(d.textSlab)]
	if n := len(d.arena); n > 0 && n <= len(free) && &d.arena[0] == &free[0] {
		d.textSlab = d.textSlab[:len(d.textSlab)+n]
		return
	}
	if len(d.arena) > 0 {
		d.textSlab = nil // moved after all: start a new slab rather than reason about it
	}
}
