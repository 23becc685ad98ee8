package checkpoint

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The pending records of a shard that the ordering guard's cross-process gates wait for
// (design.md §4), per source table and Kind: what an owner publishes as AttrPendingTables.

// Gate is the oldest pending record of one kind of one table: its arrival and its DMS source
// position (which breaks ties of arrival). A zero At means none.
type Gate struct {
	At  time.Time
	Pos change.SourcePos
}

// Older reports whether g names a record older than one that arrived at at with source
// position pos: an earlier arrival, or the same arrival and an earlier source position.
func (g *Gate) Older(at time.Time, pos *change.SourcePos) bool {
	return !g.At.IsZero() && (g.At.Before(at) || g.At.Equal(at) && g.Pos.Compare(pos) < 0)
}

// Min lowers g to o when o is older (o.At zero: nothing).
func (g *Gate) Min(o Gate) {
	if !o.At.IsZero() && (g.At.IsZero() || o.Older(g.At, &g.Pos)) {
		*g = o
	}
}

// TableGates are a table's gates: the oldest pending record by Kind, and the pending key changes
// by the key they move away.
type TableGates struct {
	Kinds [numKinds]Gate
	Moves Moves
}

// Min lowers every gate of t to o's where o's is older, and adds o's moves to t's.
func (t *TableGates) Min(o TableGates) {
	for k := range t.Kinds {
		t.Kinds[k].Min(o.Kinds[k])
	}
	t.Moves.Merge(o.Moves)
}

// oldest is the oldest arrival of any of t's gates.
func (t *TableGates) oldest() time.Time {
	var m Gate
	for k := range t.Kinds {
		m.Min(t.Kinds[k])
	}
	m.Min(t.Moves.Unknown)
	for _, g := range t.Moves.Keys {
		m.Min(g)
	}
	return m.At
}

// AnyTable is the key of PendingTables that applies to every table: the overflow of a shard
// with more than MaxPendingTables tables pending.
const AnyTable = "*"

// MaxPendingTables bounds the tables one lease row names (the item stays far below DynamoDB's
// 400 KB); the rest are merged into AnyTable.
const MaxPendingTables = 200

// PendingTables are the gates of the tables with pending records ("schema.table" keys, and
// AnyTable). Nil or empty: nothing pending.
type PendingTables map[string]TableGates

// For returns the gates that apply to table: its own and AnyTable's, the older of each.
func (p PendingTables) For(table string) TableGates {
	g := p[table]
	if any, ok := p[AnyTable]; ok {
		g.Min(any)
	}
	return g
}

// Merge lowers p's gates to o's where o's are older, table by table (p must not be nil).
func (p PendingTables) Merge(o PendingTables) {
	for t, g := range o {
		cur := p[t]
		cur.Min(g)
		p[t] = cur
	}
}

// capped returns p with at most MaxPendingTables tables: the tables with the oldest gates stay,
// the rest merge into AnyTable.
func (p PendingTables) capped() PendingTables {
	if len(p) <= MaxPendingTables {
		return p
	}
	oldest := func(g TableGates) time.Time { return g.oldest() }
	names := make([]string, 0, len(p))
	for t := range p {
		if t != AnyTable {
			names = append(names, t)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return oldest(p[a]).Compare(oldest(p[b])) })
	out := make(PendingTables, MaxPendingTables)
	rest := p[AnyTable]
	for i, t := range names {
		if i < MaxPendingTables-1 {
			out[t] = p[t]
		} else {
			rest.Min(p[t].unkeyed())
		}
	}
	out[AnyTable] = rest
	return out
}

// kindNames are the JSON names of the kinds in AttrPendingTables.
var kindNames = [numKinds]string{KindChange: "change", KindKeyChange: "keyChange", KindLoad: "load", KindControl: "control",
	KindLoadNotByKey: "loadNotByKey"}

type jsonGate struct {
	At  int64      `json:"at"`
	Pos *[4]string `json:"pos,omitempty"`
}

// storedGate is g's stored form: arrival in unix ms and the source position's four fields.
func storedGate(g Gate) jsonGate {
	jg := jsonGate{At: g.At.UnixMilli()}
	if pos := g.Pos; !pos.IsZero() {
		jg.Pos = &[4]string{pos.CommitTS, pos.TxID, pos.TxRecord, pos.Position}
	}
	return jg
}

// loadedGate reads what storedGate wrote.
func loadedGate(jg jsonGate) Gate {
	g := Gate{At: time.UnixMilli(jg.At).UTC()}
	if jg.Pos != nil {
		g.Pos = change.SourcePos{CommitTS: jg.Pos[0], TxID: jg.Pos[1], TxRecord: jg.Pos[2], Position: jg.Pos[3]}
	}
	return g
}

// movesName is the member of a table's JSON object that holds its Moves.
const movesName = "moves"

// encode is the stored form of AttrPendingTables: a JSON object of tables, each an object of
// kinds with the arrival in unix ms and the source position's four fields, and its moves; ""
// when empty.
func (p PendingTables) encode() string {
	if len(p) == 0 {
		return ""
	}
	out := make(map[string]map[string]json.RawMessage, len(p))
	capped := p.capped()
	names := slices.Sorted(maps.Keys(capped))
	budget := maxRowMoves
	for _, t := range names {
		g := capped[t]
		if len(g.Moves.Keys) > budget {
			g = g.unkeyed() // past the row's bound: this table's moves count as Unknown
		}
		budget -= len(g.Moves.Keys)
		m := map[string]json.RawMessage{}
		for k := range g.Kinds {
			if g.Kinds[k].At.IsZero() {
				continue
			}
			m[kindNames[k]], _ = json.Marshal(storedGate(g.Kinds[k])) // numbers and strings only: cannot fail
		}
		if !g.Moves.empty() {
			m[movesName], _ = json.Marshal(g.Moves.stored())
		}
		if len(m) > 0 {
			out[t] = m
		}
	}
	if len(out) == 0 {
		return ""
	}
	b, _ := json.Marshal(out) // raw JSON of the above: cannot fail
	return string(b)
}

// decodePendingTables reads what encode wrote.
func decodePendingTables(s string) (PendingTables, error) {
	if s == "" {
		return nil, nil
	}
	var in map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, err
	}
	p := make(PendingTables, len(in))
	for t, m := range in {
		var g TableGates
		for k, name := range kindNames {
			raw, ok := m[name]
			if !ok {
				continue
			}
			var jg jsonGate
			if err := json.Unmarshal(raw, &jg); err != nil {
				return nil, err
			}
			if jg.At == 0 {
				continue
			}
			g.Kinds[k] = loadedGate(jg)
		}
		if raw, ok := m[movesName]; ok {
			var jm jsonMoves
			if err := json.Unmarshal(raw, &jm); err != nil {
				return nil, err
			}
			mv, err := jm.moves()
			if err != nil {
				return nil, err
			}
			g.Moves = mv
		}
		p[t] = g
	}
	return p, nil
}
