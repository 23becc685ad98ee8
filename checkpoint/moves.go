package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxMoves bounds the keys one table's Moves name on a lease row; the key changes beyond it count
// as Unknown.
const MaxMoves = 128

// Moves are a table's pending key changes as the cross-process gates see them (design.md §4):
// per old key (a hash of its encoding, told by the table writer through change.KeyChangeNoter)
// the arrival of the oldest pending change that moves it away, and Unknown, the oldest arrival of
// a possible key change whose old key is not known (the writer has not told it yet, or the
// table's keys are more than MaxMoves). A change that writes key h must not commit before an
// older move of h on another process (Holds): that move's delete of h would remove it.
type Moves struct {
	Keys    map[uint64]time.Time
	Unknown time.Time
}

func (m *Moves) empty() bool { return len(m.Keys) == 0 && m.Unknown.IsZero() }

// Add notes a move of key h that arrived at at: the oldest per key, at most MaxMoves keys.
func (m *Moves) Add(h uint64, at time.Time) {
	if cur, ok := m.Keys[h]; ok {
		if at.Before(cur) {
			m.Keys[h] = at
		}
		return
	}
	if len(m.Keys) >= MaxMoves {
		m.AddUnknown(at)
		return
	}
	if m.Keys == nil {
		m.Keys = make(map[uint64]time.Time)
	}
	m.Keys[h] = at
}

// AddUnknown notes a possible key change whose old key is not known, arrived at at.
func (m *Moves) AddUnknown(at time.Time) {
	if m.Unknown.IsZero() || at.Before(m.Unknown) {
		m.Unknown = at
	}
}

// Merge adds o's moves to m's. m's key map is never shared with o's: it is copied first.
func (m *Moves) Merge(o Moves) {
	if !o.Unknown.IsZero() {
		m.AddUnknown(o.Unknown)
	}
	if len(o.Keys) == 0 {
		return
	}
	keys := make(map[uint64]time.Time, len(m.Keys)+len(o.Keys))
	for h, at := range m.Keys {
		keys[h] = at
	}
	m.Keys = keys
	for h, at := range o.Keys {
		m.Add(h, at)
	}
}

// Holds reports whether a change writing key h (hash of its encoding; 0: none) that arrived at at
// (unix ms) must wait: a move of h, or a move of an unknown key, arrived strictly before it.
// Strictly: a wait is always for an older record, so waits never form a cycle.
func (m *Moves) Holds(h uint64, at int64) bool {
	if !m.Unknown.IsZero() && m.Unknown.UnixMilli() < at {
		return true
	}
	if h == 0 || len(m.Keys) == 0 {
		return false
	}
	t, ok := m.Keys[h]
	return ok && t.UnixMilli() < at
}

// unkeyed returns t with its moves counted as Unknown (for AnyTable, which merges tables whose
// keys do not compare).
func (t TableGates) unkeyed() TableGates {
	out := TableGates{Kinds: t.Kinds, Moves: Moves{Unknown: t.Moves.Unknown}}
	for _, at := range t.Moves.Keys {
		out.Moves.AddUnknown(at)
	}
	return out
}

func (m *Moves) stored() jsonMoves {
	var jm jsonMoves
	if !m.Unknown.IsZero() {
		jm.Unknown = m.Unknown.UnixMilli()
	}
	for h, at := range m.Keys {
		jm.Keys = append(jm.Keys, strconv.FormatUint(h, 16)+":"+strconv.FormatInt(at.UnixMilli(), 10))
	}
	return jm
}

func (jm jsonMoves) moves() (Moves, error) {
	var m Moves
	if jm.Unknown != 0 {
		m.Unknown = time.UnixMilli(jm.Unknown).UTC()
	}
	for _, e := range jm.Keys {
		hs, ats, ok := strings.Cut(e, ":")
		h, err1 := strconv.ParseUint(hs, 16, 64)
		at, err2 := strconv.ParseInt(ats, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return Moves{}, fmt.Errorf("bad move %q", e)
		}
		m.Add(h, time.UnixMilli(at).UTC())
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
	if len(t.Moves.Keys) != len(o.Moves.Keys) || !t.Moves.Unknown.Equal(o.Moves.Unknown) {
		return false
	}
	for k := range t.Kinds {
		if !t.Kinds[k].At.Equal(o.Kinds[k].At) || t.Kinds[k].Pos != o.Kinds[k].Pos {
			return false
		}
	}
	for h, at := range t.Moves.Keys {
		if oat, ok := o.Moves.Keys[h]; !ok || !oat.Equal(at) {
			return false
		}
	}
	return true
}
