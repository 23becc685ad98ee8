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
// objects). The decoder now carves both from slabs of slabBytes (columnSlab, textSlab), as the
// sink's writer carves row values (sink/convert.go datums); a record that needs more than a
// slab gets its own. What is carved is never written again: an event's columns are a full
// slice expression (nothing appended to them reaches a neighbour), and text is only ever
// appended after the bytes already handed out. A slab lives until the last event or string
// carved from it is dropped: at most slabBytes more per slab than the records themselves hold,
// and records are consumed in about the order they are decoded, so that is about one slab per
// decoder.

// slabBytes is the size of a slab: the largest small object of the Go allocator, so that a
// slab is neither a large object (zeroed apart, its own span) nor able to keep much alive.
const slabBytes = 32 << 10

// columnSlab is where the fast path carves the columns of fresh events from.
type columnSlab struct {
	free []change.Column
}

// take returns n zero columns for a fresh event.
func (s *columnSlab) take(n int) []change.Column {
	if len(s.free) < n {
		s.free = make([]change.Column, max(n, slabBytes/int(unsafe.Sizeof(change.Column{}))))
	}
	c := s.free[:n:n]
	s.free = s.free[n:]
	return c
}

// textSlab is where a DecodeShared call's fast path unescapes strings into: its free end is
// the record's arena (eventText), and what the record wrote there is kept (keep).
type textSlab struct {
	buf []byte // buf[:len] is handed out; buf[len:cap] is free
}

// room returns an empty arena with room for n bytes at the free end of the slab.
func (s *textSlab) room(n int) []byte {
	if cap(s.buf)-len(s.buf) < n {
		s.buf = make([]byte, 0, max(n, slabBytes))
	}
	return s.buf[len(s.buf):len(s.buf):cap(s.buf)]
}

// keep marks the n bytes a record just wrote into the arena room gave it as taken. The arena
// is the slab's free end, never moved: append moves a slice only past its capacity, and the
// unescaped text fits the room asked for (were it ever larger, the arena is an array of its
// own and the slab stays as it was).
func (s *textSlab) keep(n int) {
	if n <= cap(s.buf)-len(s.buf) {
		s.buf = s.buf[:len(s.buf)+n]
	}
}
