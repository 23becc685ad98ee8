package checkpoint

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// MaxMoves bounds the keys one table's Moves name; the key changes beyond it count as Unknown.
// A backlog read ahead holds many pending key changes, and one counted as Unknown holds every
// later write of its table on the other workers, so the bound is generous: a key takes 16
// bytes on the lease row (22 in base64), and maxRowMoves bounds a row's keys over its tables.
const MaxMoves = 1024

// maxRowMoves bounds the keys one lease row names over all its tables (about 90 KB of the item's
// 400 KB); the tables past it publish their moves as Unknown.
const maxRowMoves = 4096

// Moves are a table's pending key changes as the cross-process gates see them (design.md §4):
// per old key (a hash of its encoding, told by the table writer through change.KeyChangeNoter)
// the oldest pending change that moves it away, and Unknown, the oldest possible key change
// whose old key is not known (the writer has not told it yet, or the table's keys are more than
// MaxMoves). A change that writes key h after a move of h on another process commits with h
// listed as re-created, so that the move's delete, committed later, keeps it (Precedes); only a
// move of an unknown key holds the table's later changes (Holds).
type Moves struct {
	Keys    map[uint64]Gate
	Unknown Gate
}

func (m *Moves) empty() bool { return len(m.Keys) == 0 && m.Unknown.At.IsZero() }

// Add notes a move g of key h: the oldest per key, at most MaxMoves keys.
func (m *Moves) Add(h uint64, g Gate) {
	if cur, ok := m.Keys[h]; ok {
		cur.Min(g)
		m.Keys[h] = cur
		return
	}
	if len(m.Keys) >= MaxMoves {
		m.Unknown.Min(g)
		return
	}
	if m.Keys == nil {
		m.Keys = make(map[uint64]Gate)
	}
	m.Keys[h] = g
}

// AddUnknown notes a possible key change whose old key is not known.
func (m *Moves) AddUnknown(g Gate) { m.Unknown.Min(g) }

// Merge adds o's moves to m's. m's key map is never shared with o's: it is copied first.
func (m *Moves) Merge(o Moves) {
	m.Unknown.Min(o.Unknown)
	if len(o.Keys) == 0 {
		return
	}
	keys := make(map[uint64]Gate, len(m.Keys)+len(o.Keys))
	for h, g := range m.Keys {
		keys[h] = g
	}
	m.Keys = keys
	for h, g := range o.Keys {
		m.Put(h, g)
	}
}

// Put notes a move g of key h, the oldest per key, without MaxMoves, which bounds what a lease
// row publishes, not the moves merged in memory. m's key map must be its own.
func (m *Moves) Put(h uint64, g Gate) {
	if m.Keys == nil {
		m.Keys = make(map[uint64]Gate)
	}
	if cur, ok := m.Keys[h]; ok {
		cur.Min(g)
		g = cur
	}
	m.Keys[h] = g
}

// Holds reports whether a change that arrived at at (unix ms) must wait: a move of an unknown
// key arrived strictly before it, whose delete could remove any key of the table. Strictly: a
// wait is always for a record of an earlier millisecond, and arrivals never go back along a
// shard, so waits never form a cycle. A move of a known key holds nothing: a change that writes
// it after the move (Precedes) is committed and listed as re-created, and the move's commit,
// which reads the list, keeps the key (sink/moved.go).
func (m *Moves) Holds(at int64) bool {
	return !m.Unknown.At.IsZero() && m.Unknown.At.UnixMilli() < at
}

// Precedes reports whether a move of key h (hash of its encoding; 0: none) arrived strictly
// before at (unix ms), and whether a move of h or of an unknown key arrived in at's millisecond.
func (m *Moves) Precedes(h uint64, at int64) (earlier, same bool) {
	if !m.Unknown.At.IsZero() && m.Unknown.At.UnixMilli() == at {
		same = true
	}
	if h == 0 {
		return false, same
	}
	if g, ok := m.Keys[h]; ok {
		ms := g.At.UnixMilli()
		earlier, same = ms < at, same || ms == at
	}
	return earlier, same
}

// unkeyed returns t with its moves counted as Unknown (for AnyTable, which merges tables whose
// keys do not compare).
func (t TableGates) unkeyed() TableGates {
	out := TableGates{Kinds: t.Kinds, Moves: Moves{Unknown: t.Moves.Unknown}}
	for _, g := range t.Moves.Keys {
		out.Moves.AddUnknown(g)
	}
	return out
}

// jsonMoves is Moves stored: Keys packs each key's hash and arrival (unix ms), 8 bytes each,
// big-endian, in base64; Unknown is a gate.
type jsonMoves struct {
	Keys    string    `json:"keys,omitempty"`
	Unknown *jsonGate `json:"unknown,omitempty"`
}

func (m *Moves) stored() jsonMoves {
	var jm jsonMoves
	if !m.Unknown.At.IsZero() {
		g := storedGate(m.Unknown)
		jm.Unknown = &g
	}
	if len(m.Keys) > 0 {
		b := make([]byte, 0, 16*len(m.Keys))
		for h, g := range m.Keys {
			b = binary.BigEndian.AppendUint64(b, h)
			b = binary.BigEndian.AppendUint64(b, uint64(g.At.UnixMilli()))
		}
		jm.Keys = base64.RawStdEncoding.EncodeToString(b)
	}
	return jm
}

func (jm jsonMoves) moves() (Moves, error) {
	var m Moves
	if jm.Unknown != nil {
		m.AddUnknown(loadedGate(*jm.Unknown))
	}
	b, err := base64.RawStdEncoding.DecodeString(jm.Keys)
	if err != nil || len(b)%16 != 0 {
		return Moves{}, fmt.Errorf("bad moves %q", jm.Keys)
	}
	for i := 0; i < len(b); i += 16 {
		at := int64(binary.BigEndian.Uint64(b[i+8:]))
		m.Add(binary.BigEndian.Uint64(b[i:]), Gate{At: time.UnixMilli(at).UTC()})
	}
	return m, nil
}

// GatesOf returns the table gates with the given gates by kind and no moves.
func GatesOf(kinds map[Kind]Gate) TableGates {
	var t TableGates
	for k, g := range kinds {
		t.Kinds[k] = g
	}
	return t
}

// Equal reports whether t and o hold the same gates and moves.
func (t TableGates) Equal(o TableGates) bool {
	if len(t.Moves.Keys) != len(o.Moves.Keys) || !t.Moves.Unknown.equal(o.Moves.Unknown) {
		return false
	}
	for k := range t.Kinds {
		if !t.Kinds[k].equal(o.Kinds[k]) {
			return false
		}
	}
	for h, g := range t.Moves.Keys {
		if og, ok := o.Moves.Keys[h]; !ok || !og.equal(g) {
			return false
		}
	}
	return true
}

func (g Gate) equal(o Gate) bool { return g.At.Equal(o.At) && g.Pos == o.Pos }
