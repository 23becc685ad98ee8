package checkpoint

import (
	"fmt"
	"strconv"
)

// MaxMoves bounds the keys one table's Moves name on a lease row; the key changes beyond it count
// as Unknown.
const MaxMoves = 128

// Moves are a table's pending key changes as the cross-process gates see them (design.md §4):
// per old key (a hash of its encoding, told by the table writer through change.KeyChangeNoter)
// the oldest pending change that moves it away, and Unknown, the oldest possible key change
// whose old key is not known (the writer has not told it yet, or the table's keys are more than
// MaxMoves). A change that writes key h must not commit before an older move of h on another
// process (Holds): that move's delete of h would remove it.
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
		m.Add(h, g)
	}
}

// Holds reports whether a change writing key h (hash of its encoding; 0: none) that arrived at
// at (unix ms) must wait: a move of h, or a move of an unknown key, arrived strictly before it.
// Strictly: a wait is always for a record of an earlier millisecond, and arrivals never go back
// along a shard, so waits never form a cycle. A move in the same millisecond (SameMs) does not
// hold it: the change's commit records the key as re-created instead (sink/moved.go).
func (m *Moves) Holds(h uint64, at int64) bool {
	if !m.Unknown.At.IsZero() && m.Unknown.At.UnixMilli() < at {
		return true
	}
	if h == 0 || len(m.Keys) == 0 {
		return false
	}
	g, ok := m.Keys[h]
	return ok && g.At.UnixMilli() < at
}

// SameMs reports whether a move of h, or of an unknown key, arrived in millisecond at.
func (m *Moves) SameMs(h uint64, at int64) bool {
	if !m.Unknown.At.IsZero() && m.Unknown.At.UnixMilli() == at {
		return true
	}
	g, ok := m.Keys[h]
	return ok && h != 0 && g.At.UnixMilli() == at
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

// jsonMove is one stored move: the key's hash in hex (empty for Unknown) and its gate.
type jsonMove struct {
	Hash string `json:"h,omitempty"`
	jsonGate
}

func (m *Moves) stored() []jsonMove {
	var out []jsonMove
	if !m.Unknown.At.IsZero() {
		out = append(out, jsonMove{jsonGate: storedGate(m.Unknown)})
	}
	for h, g := range m.Keys {
		out = append(out, jsonMove{Hash: strconv.FormatUint(h, 16), jsonGate: storedGate(g)})
	}
	return out
}

func movesOf(in []jsonMove) (Moves, error) {
	var m Moves
	for _, e := range in {
		g := loadedGate(e.jsonGate)
		if e.Hash == "" {
			m.AddUnknown(g)
			continue
		}
		h, err := strconv.ParseUint(e.Hash, 16, 64)
		if err != nil {
			return Moves{}, fmt.Errorf("bad move key %q", e.Hash)
		}
		m.Add(h, g)
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
