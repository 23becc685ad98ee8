package sink

import (
	"fmt"
	"maps"
	"slices"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// columnIndexes appends to dst each column's index in the layout (-1: not in it). take
// resolves an event once into the planner's scratch, and both the check for new columns and
// convert read the result: the name comparison per value is a tenth of the writer's intake.
func (l *layout) columnIndexes(cols []change.Column, dst []int32) []int32 {
	for pos, c := range cols {
		i, ok := l.index(pos, c.Name)
		if !ok {
			i = -1
		}
		dst = append(dst, int32(i))
	}
	return dst
}

// unknownColumns lists the columns of an upsert that the table does not have (excluded columns
// are never unknown); idx is ev's columnIndexes. Deletes are applied by key and never evolve
// the schema.
func (pl *planner) unknownColumns(ev *change.Event, idx []int32) []change.Column {
	if ev.Op == change.OpDelete {
		return nil
	}
	var out []change.Column
	for pos, c := range ev.Columns {
		if idx[pos] < 0 && !pl.set.exclude[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// convert turns the event's images into typed values. A non-empty reason means the record
// cannot be applied and goes to the dead-letter place. idx is ev's columnIndexes.
func (pl *planner) convert(ev *change.Event, idx []int32) (row, string) {
	l := pl.st.lay
	r := row{del: ev.Op == change.OpDelete, shard: ev.Pos.Shard, seq: ev.Pos.Seq, vals: pl.datums(len(l.types))}
	for i := range r.vals {
		r.vals[i].Null = true
	}
	// With absent_columns keep, an update notes which columns its image carried: the live ones
	// it leaves out keep their values (partial.go).
	keep := pl.set.keepAbsent && ev.Op == change.OpUpdate && len(l.live) > 0 && l.keyed()
	if keep {
		if cap(pl.seen) < len(l.types) {
			pl.seen = make([]bool, len(l.types))
		}
		pl.seen = pl.seen[:len(l.types)]
		clear(pl.seen)
	}
	if reason := pl.replayedRedaction(ev); reason != "" {
		return r, reason
	}
	for pos, c := range ev.Columns {
		i := int(idx[pos])
		if i < 0 || (r.del && !isKey(l, i)) || l.isIdentity(i) {
			continue // excluded, a non-key column of a delete, or the identity (not a source column)
		}
		if keep {
			pl.seen[i] = true
		}
		v := c.Value
		if pl.set.transformed() && ev.Redacted[c.Name] == "" {
			v, _ = pl.set.value(c.Name, v)
		}
		d, err := dms.ConvertIn(l.types[i], l.domain(i), v)
		if err != nil {
			return r, fmt.Sprintf("column %s: %v", c.Name, err)
		}
		r.vals[i] = d
	}
	if l.identified() && pl.set.identity {
		r.vals[l.idIdx] = identityDatum(ev)
	}
	for _, i := range l.keyIdx {
		if r.vals[i].Null {
			return r, fmt.Sprintf("%s without a value for key column %s", ev.Op, l.names[i])
		}
	}
	if ev.Op == change.OpUpdate && l.keyed() && len(ev.Before) > 0 {
		old, changed, reason := pl.beforeKey(ev, r.vals)
		if reason != "" {
			return r, reason
		}
		if changed {
			r.oldKey = old
		}
	}
	if keep {
		r.absent = absentColumns(l, pl.seen)
	}
	return r, ""
}

// slabRows is how many rows' values datums allocates at once.
const slabRows = 32

// datums returns n zero values for a row, carved from a chunk allocated for slabRows rows:
// one allocation per 32 rows instead of one per row. A chunk lives until the last row carved
// from it is released; rows leave the buffer in about the order they came, so that is at most
// one chunk (a few KiB) more per writer than the rows themselves. The slice's capacity is its
// length, so nothing appended to it can reach a neighbour's values.
func (pl *planner) datums(n int) []dms.Datum {
	if len(pl.slab) < n {
		pl.slab = make([]dms.Datum, n*slabRows)
	}
	v := pl.slab[:n:n]
	pl.slab = pl.slab[n:]
	return v
}

// beforeKey reads the old key from the before-image; changed is true when it differs from the
// new key (a primary-key change).
func (pl *planner) beforeKey(ev *change.Event, vals []dms.Datum) ([]dms.Datum, bool, string) {
	l := pl.st.lay
	old := make([]dms.Datum, len(l.keyIdx))
	found := 0
	for ki, i := range l.keyIdx {
		old[ki] = vals[i] // a key column the before-image leaves out did not change (Oracle)
		for _, c := range ev.Before {
			if c.Name != l.names[i] {
				continue
			}
			v := c.Value
			if pl.set.transformed() && ev.Redacted[c.Name] == "" {
				v, _ = pl.set.value(c.Name, v)
			}
			d, err := dms.ConvertIn(l.types[i], l.domain(i), v)
			if err != nil {
				return nil, false, fmt.Sprintf("before-image column %s: %v", c.Name, err)
			}
			if d.Null {
				return nil, false, fmt.Sprintf("before-image key column %s is null", c.Name)
			}
			old[ki] = d
			found++
			break
		}
	}
	if found == 0 {
		return nil, false, "" // pk-only before-image of an update that kept its key: {}
	}
	for ki, i := range l.keyIdx {
		if old[ki] != vals[i] {
			return old, true, ""
		}
	}
	return nil, false, ""
}

// absentColumns lists the live columns of l that an update image did not carry (seen), nil
// when the image is complete.
func absentColumns(l *layout, seen []bool) []int32 {
	var out []int32
	for _, i := range l.live {
		if !seen[i] {
			out = append(out, int32(i))
		}
	}
	return out
}

// replayedRedaction refuses a replayed dead letter whose redacted columns (ev.Redacted) have
// another rule now: the record holds the redacted value (a hash, "****") or nothing (excluded),
// not the source value the new rule needs.
func (pl *planner) replayedRedaction(ev *change.Event) string {
	if len(ev.Redacted) == 0 {
		return ""
	}
	rules := tableRules{pl.set}
	for _, col := range slices.Sorted(maps.Keys(ev.Redacted)) {
		if was, now := ev.Redacted[col], rules.Rule(col); was != now {
			if now == "" {
				now = "not redacted"
			}
			return fmt.Sprintf("column %s was %s when the record was dead-lettered and is %s now: the dead letter does not hold its source value, so it cannot be replayed", col, was, now)
		}
	}
	return ""
}
