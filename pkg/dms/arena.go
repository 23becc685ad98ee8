package dms

import (
	"unsafe"

	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// eventText owns the text of the event being decoded: every string of the event is either
// copied into its arena, a byte array allocated for that event alone, or, in a DecodeShared
// call on the fast path, points into the record itself, with only escaped strings unescaped
// into the text slab. A Decoder keeps one eventText and starts it afresh for every record.
type eventText struct {
	arena []byte
	// shared: the record being decoded came through DecodeShared, so the fast path points
	// strings into it instead of copying them.
	shared bool
	// slab is what a shared record's escaped strings are unescaped into (slab.go).
	slab textSlab
}

// startCopy gives the general path its arena for a record of n bytes. Everything copied out of
// the parser fits in n bytes (compact JSON and unescaped strings are never longer than their
// source); str grows it if not.
func (t *eventText) startCopy(n int) {
	t.arena = make([]byte, 0, n)
}

// startFast gives the fast path its arena for a record of n bytes: shared, none until the
// first escaped string (unescaped).
func (t *eventText) startFast(n int) {
	t.arena = nil
	if !t.shared {
		t.arena = make([]byte, 0, n)
	}
}

// finishFast keeps, for a shared record, what the fast path unescaped into the text slab, and
// lets go of the arena.
func (t *eventText) finishFast() {
	if t.shared {
		t.slab.keep(len(t.arena))
	}
	t.arena = nil
}

// str copies b into the event arena and returns it as a string.
func (t *eventText) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(t.arena)-len(t.arena) < len(b) {
		t.grow(len(b))
	}
	start := len(t.arena)
	t.arena = append(t.arena, b...)
	return unsafe.String(&t.arena[start], len(b))
}

// marshal appends the compact JSON of v to the arena and returns it as a string. Values that
// were never inspected keep their original string escapes, so the result is valid JSON.
func (t *eventText) marshal(v *fastjson.Value) string {
	start := len(t.arena)
	// If MarshalTo outgrows the arena, append moves the bytes to a new array; strings made
	// earlier keep pointing at (and keep alive) the old one, which is never written again.
	t.arena = v.MarshalTo(t.arena)
	if len(t.arena) == start {
		return ""
	}
	return unsafe.String(&t.arena[start], len(t.arena)-start)
}

// grow starts a new arena chunk; strings already handed out keep the old chunk alive.
func (t *eventText) grow(n int) {
	c := 2 * cap(t.arena)
	if c < 256 {
		c = 256
	}
	if c < n {
		c = n
	}
	t.arena = make([]byte, 0, c)
}

// value converts a parsed JSON value, copying its text into the arena. ok is false for a
// malformed number (Text holds it).
func (t *eventText) value(v *fastjson.Value) (change.Value, bool) {
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return change.Value{Kind: change.KindString, Text: t.str(b)}, true
	case fastjson.TypeNumber:
		s := t.marshal(v)
		return change.Value{Kind: change.KindNumber, Text: s}, validNumber(s)
	case fastjson.TypeTrue:
		return change.Value{Kind: change.KindBool, Text: "true"}, true
	case fastjson.TypeFalse:
		return change.Value{Kind: change.KindBool, Text: "false"}, true
	case fastjson.TypeNull:
		return change.Value{Kind: change.KindNull}, true
	default: // object, array
		return change.Value{Kind: change.KindJSON, Text: t.marshal(v)}, true
	}
}

// column copies a fast-path column's name and value into the arena (or points to them,
// shared).
func (t *eventText) column(data []byte, c fastCol) (change.Column, bool) {
	name := t.raw(data[c.key.start:c.key.end])
	switch c.kind {
	case change.KindString, change.KindNumber:
		v, ok := t.span(data, c.val)
		return change.Column{Name: name, Value: change.Value{Kind: c.kind, Text: v}}, ok
	case change.KindBool:
		s := "false"
		if c.val.start == 1 {
			s = "true"
		}
		return change.Column{Name: name, Value: change.Value{Kind: change.KindBool, Text: s}}, true
	default:
		return change.Column{Name: name, Value: change.Value{Kind: change.KindNull}}, true
	}
}

// raw is the text of b, a span of the record without escapes: a copy in the arena, or, in a
// DecodeShared call, b itself.
func (t *eventText) raw(b []byte) string {
	if t.shared {
		if len(b) == 0 {
			return ""
		}
		return unsafe.String(&b[0], len(b))
	}
	return t.str(b)
}

// span copies a string's content (unescaped) or a number token into the arena (shared: only an
// escaped string is copied); false for an escape that the general path must judge (invalid, or
// a lone surrogate).
func (t *eventText) span(data []byte, sp span) (string, bool) {
	raw := data[sp.start:sp.end]
	if !sp.esc {
		return t.raw(raw), true
	}
	if t.arena == nil {
		// Shared: the first escaped string of the record. Escapes are in the column values,
		// copied in the record's order, so the rest of the record from here bounds what the
		// arena must hold (a third fewer bytes than the whole record in the pipeline benchmark).
		t.arena = t.slab.room(len(data) - int(sp.start))
	}
	start := len(t.arena)
	out, ok := appendUnescaped(t.arena, raw)
	if !ok {
		return "", false
	}
	// Unescaped text is never longer than its source, so out is usually still the arena's
	// array; should append have moved it (an escaped string before the first one copied), the
	// strings already returned keep the old array alive.
	t.arena = out
	if len(out) == start {
		return "", true
	}
	return unsafe.String(&out[start], len(out)-start), true
}
