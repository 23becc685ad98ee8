package dms

import (
	"fmt"

	"github.com/apache/iceberg-go"
)

// ColumnState is one column of a target table as schema evolution sees it.
type ColumnState struct {
	Name     string
	Type     iceberg.Type
	Required bool
	// Key marks an identifier (primary-key) column.
	Key bool
	// Dropped marks a column that an earlier table-def no longer had: it is kept (with its data)
	// but no longer expected in records.
	Dropped bool
	// Doc is the column's doc; for a key column it may name a stored form (KeyDomain).
	Doc string
}

// DesiredColumn is one column of a DMS table-def, already mapped to the Iceberg type the sink
// stores it as (see IcebergType and the sink's per-column options).
type DesiredColumn struct {
	Name string
	Type iceberg.Type
	// Doc is the doc a new table gives the column (KeyType's, for a timestamp key stored as
	// text).
	Doc string
}

// SchemaPlan is what it takes to bring a table's schema in line with a table-def without
// losing data: columns are added, widened, renamed and stopped being required, never deleted or
// narrowed.
type SchemaPlan struct {
	// Add lists new columns, added as optional (rows written earlier read them as null).
	Add []DesiredColumn
	// Rename maps old names to new ones (rename-column only, see PlanSchema).
	Rename []Rename
	// Widen lists Iceberg-legal type promotions: int→long, float→double, decimal(p,s)→
	// decimal(p',s) with p' > p.
	Widen []TypeChange
	// Drop lists columns the table-def no longer has. They are kept with their data and marked
	// dropped; MakeOptional lists those among them that were required and now are not.
	Drop         []string
	MakeOptional []string
	// Revive lists columns marked dropped that the table-def has again.
	Revive []string
	// Keep lists type changes that need no schema change because the table's type already
	// holds every value of the new one (a narrowing, or any type over a string column).
	Keep []TypeChange
	// Incompatible lists type changes Iceberg cannot apply (for example int→string or a
	// decimal scale change). The table keeps its type; values that do not convert to it are
	// dead-lettered.
	Incompatible []TypeChange
	// KeyDropped lists primary-key columns missing from the table-def; they are kept as they
	// are (an identifier column cannot become optional).
	KeyDropped []string
}

// Rename is a column rename.
type Rename struct{ From, To string }

// TypeChange is a column whose type differs between the table and the table-def.
type TypeChange struct {
	Name     string
	From, To iceberg.Type
}

// Empty reports whether the plan changes nothing in the schema (Keep, Incompatible and
// KeyDropped need no schema update).
func (p SchemaPlan) Empty() bool {
	return len(p.Add) == 0 && len(p.Rename) == 0 && len(p.Widen) == 0 && len(p.Drop) == 0 &&
		len(p.MakeOptional) == 0 && len(p.Revive) == 0
}

// Describe returns one line per change, in a fixed order, for logs and the decode command.
func (p SchemaPlan) Describe() []string {
	var out []string
	for _, r := range p.Rename {
		out = append(out, fmt.Sprintf("rename column %s to %s", r.From, r.To))
	}
	for _, c := range p.Add {
		out = append(out, fmt.Sprintf("add optional column %s %s", c.Name, c.Type))
	}
	for _, w := range p.Widen {
		out = append(out, fmt.Sprintf("widen column %s from %s to %s", w.Name, w.From, w.To))
	}
	for _, n := range p.Drop {
		out = append(out, fmt.Sprintf("column %s dropped at the source: kept with its data, no longer expected", n))
	}
	for _, n := range p.MakeOptional {
		out = append(out, fmt.Sprintf("column %s no longer required", n))
	}
	for _, n := range p.Revive {
		out = append(out, fmt.Sprintf("column %s is back in the table-def", n))
	}
	for _, k := range p.Keep {
		out = append(out, fmt.Sprintf("column %s stays %s (the source now says %s; every such value fits)", k.Name, k.From, k.To))
	}
	for _, c := range p.Incompatible {
		out = append(out, fmt.Sprintf("incompatible change of column %s from %s to %s: kept as %s; values that do not convert are dead-lettered", c.Name, c.From, c.To, c.From))
	}
	for _, n := range p.KeyDropped {
		out = append(out, fmt.Sprintf("primary-key column %s is missing from the table-def: kept", n))
	}
	return out
}

// PlanSchema compares a table's columns with a table-def (the full definition after the
// change, as dms-format.md §5 assumes for ALTER control records) and plans the evolution:
//
//   - table-def columns the table lacks are added as optional columns;
//   - with rename (the control operation was rename-column), a table column missing from the
//     table-def is renamed to a new table-def column when both sit at the same position (the
//     table's live columns and the table-def have the same length) and the types are
//     compatible; anything else is an add of the new column plus a drop of the old one;
//   - a type change is applied when Iceberg allows it (widening); a narrowing, or any type over
//     a string column, keeps the table's type (every new value fits); anything else is
//     incompatible;
//   - table columns missing from the table-def are marked dropped and stop being required;
//     they are never deleted, so no data is lost;
//   - a column marked dropped that is in the table-def again is revived (and its type compared).
func PlanSchema(current []ColumnState, desired []DesiredColumn, rename bool) SchemaPlan {
	var p SchemaPlan
	cur := make(map[string]int, len(current))
	for i, c := range current {
		cur[c.Name] = i
	}
	des := make(map[string]int, len(desired))
	for i, d := range desired {
		des[d.Name] = i
	}
	renamedTo := map[string]string{}   // new name -> old name
	renamedFrom := map[string]string{} // old name -> new name
	if rename {
		var live []ColumnState
		for _, c := range current {
			if !c.Dropped {
				live = append(live, c)
			}
		}
		if len(live) == len(desired) {
			for i, d := range desired {
				old := live[i]
				if old.Name == d.Name {
					continue
				}
				if _, inDef := des[old.Name]; inDef {
					continue
				}
				if _, inTable := cur[d.Name]; inTable {
					continue
				}
				if _, _, ok := typeCompat(old.Type, d.Type); !ok {
					continue
				}
				renamedTo[d.Name] = old.Name
				renamedFrom[old.Name] = d.Name
				p.Rename = append(p.Rename, Rename{From: old.Name, To: d.Name})
			}
		}
	}
	for _, d := range desired {
		name := d.Name
		if old, ok := renamedTo[name]; ok {
			name = old
		}
		i, ok := cur[name]
		if !ok {
			p.Add = append(p.Add, d)
			continue
		}
		c := current[i]
		if c.Dropped {
			p.Revive = append(p.Revive, d.Name)
		}
		if c.Type.Equals(d.Type) {
			continue
		}
		tc := TypeChange{Name: d.Name, From: c.Type, To: d.Type}
		switch widen, keep, ok := typeCompat(c.Type, d.Type); {
		case widen:
			p.Widen = append(p.Widen, tc)
		case keep && ok:
			p.Keep = append(p.Keep, tc)
		default:
			p.Incompatible = append(p.Incompatible, tc)
		}
	}
	for _, c := range current {
		if _, ok := des[c.Name]; ok || c.Dropped {
			continue
		}
		if _, ok := renamedFrom[c.Name]; ok {
			continue
		}
		if c.Key {
			p.KeyDropped = append(p.KeyDropped, c.Name)
			continue
		}
		p.Drop = append(p.Drop, c.Name)
		if c.Required {
			p.MakeOptional = append(p.MakeOptional, c.Name)
		}
	}
	return p
}

// typeCompat reports how a column of type from can take values of type to: widen when Iceberg
// can promote from to to; keep when from already holds every value of to (a narrowing, or a
// string column); ok is false when neither.
func typeCompat(from, to iceberg.Type) (widen, keep, ok bool) {
	if from.Equals(to) {
		return false, true, true
	}
	if _, err := iceberg.PromoteType(from, to); err == nil && legalWidening(from, to) {
		return true, false, true
	}
	if _, err := iceberg.PromoteType(to, from); err == nil && legalWidening(to, from) {
		return false, true, true
	}
	if _, isString := from.(iceberg.StringType); isString {
		return false, true, true
	}
	return false, false, false
}

// legalWidening limits iceberg.PromoteType to the promotions the Iceberg spec allows for
// schema evolution (PromoteType also allows string↔binary and fixed→uuid for reading files).
func legalWidening(from, to iceberg.Type) bool {
	switch from.(type) {
	case iceberg.Int32Type, iceberg.Float32Type, iceberg.DecimalType:
		return true
	}
	return false
}

// ApplyPlan returns the columns after p (as the sink's schema update leaves them): renames and
// type changes in place, dropped columns marked, new columns appended as optional.
func ApplyPlan(cols []ColumnState, p SchemaPlan) []ColumnState {
	out := append([]ColumnState(nil), cols...)
	idx := func(name string) int {
		for i, c := range out {
			if c.Name == name {
				return i
			}
		}
		return -1
	}
	for _, r := range p.Rename {
		if i := idx(r.From); i >= 0 {
			out[i].Name = r.To
		}
	}
	for _, w := range p.Widen {
		if i := idx(w.Name); i >= 0 {
			out[i].Type = w.To
		}
	}
	for _, n := range p.Drop {
		if i := idx(n); i >= 0 {
			out[i].Dropped = true
		}
	}
	for _, n := range p.MakeOptional {
		if i := idx(n); i >= 0 {
			out[i].Required = false
		}
	}
	for _, n := range p.Revive {
		if i := idx(n); i >= 0 {
			out[i].Dropped = false
		}
	}
	for _, c := range p.Add {
		out = append(out, ColumnState{Name: c.Name, Type: c.Type})
	}
	return out
}
