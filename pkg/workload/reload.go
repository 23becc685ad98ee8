package workload

import (
	"fmt"
	"slices"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Reload configures a reload of one table in the middle of the CDC phase (Config.Reload), as
// DMS writes it after "Reload table data" or a task restarted with full load, following an
// outage in which the table's changes were not captured:
//
//  1. The outage: Deletes live rows of the table are deleted at the source and Updates live
//     rows get new values, with no record written for either (the expected state follows the
//     source: the deleted rows are not in it, the updated rows hold their new values).
//  2. A create-table control record for the table (its current table-def, a newer timestamp
//     than every earlier record), marked Message.Reload.
//  3. load records (no transaction fields) of every row the table now holds, marked
//     Message.Reload, in batches of one to eight between CDC transactions of the other tables
//     (DMS keeps capturing the other tables while this one loads). The table itself gets no
//     CDC record while its load runs: DMS caches its changes and applies them after the load
//     (dms-format.md §8.1).
//  4. CDC of the table resumes (the cached changes, then ongoing CDC). If the CDC phase ends
//     first, the rest of the load follows the last CDC record.
//
// The partition keys follow Config.Layout: the create-table goes by tableControlKey, the load
// records as any load record of the table.
type Reload struct {
	// Table is the modelled table to reload: customers, order_items, events or types. Empty: no
	// reload (the other fields must then be zero).
	Table string
	// At is the number of CDC data records written before the reload starts, 0 to
	// Config.Changes (the reload starts before the first transaction that begins at or after
	// At).
	At int
	// Deletes is the number of rows deleted at the source during the outage, without delete
	// records (fewer if the table holds fewer rows).
	Deletes int
	// Updates is the number of rows updated at the source during the outage, without update
	// records; the reload's load carries their new values. Keyed tables only.
	Updates int
}

func (rl Reload) validate(c Config) error {
	if rl.Table == "" {
		if rl != (Reload{}) {
			return fmt.Errorf("workload: Reload %+v has no Table", rl)
		}
		return nil
	}
	d := slices.IndexFunc(tableDefs(), func(d *tableDef) bool { return d.name == rl.Table })
	switch {
	case d < 0:
		return fmt.Errorf("workload: Reload.Table %q is not one of %s, %s, %s, %s", rl.Table, Customers, OrderItems, Events, Types)
	case rl.At < 0 || rl.At > c.Changes:
		return fmt.Errorf("workload: Reload.At must be between 0 and Changes (%d), got %d", c.Changes, rl.At)
	case rl.Deletes < 0 || rl.Updates < 0:
		return fmt.Errorf("workload: Reload.Deletes and Reload.Updates must not be negative, got %d and %d", rl.Deletes, rl.Updates)
	case rl.Updates > 0 && tableDefs()[d].key == nil:
		return fmt.Errorf("workload: Reload.Updates needs a keyed table; %s has no primary key", rl.Table)
	}
	return nil
}

// reloadRun is the state of the configured reload during one run.
type reloadRun struct {
	cfg     Reload
	started bool
	done    bool
	t       *tableState
	// keys are the keys of a keyed table still to load, in order; next and end bound the rows
	// of a keyless table still to load.
	keys      []string
	next, end int
	// size is the number of rows the table held when its load started.
	size int
	// deleted holds the key values (keyed table) or rows (keyless table) deleted during the
	// outage.
	deleted [][]change.Value
}

func newReloadRun(cfg Reload) *reloadRun {
	if cfg.Table == "" {
		return nil
	}
	return &reloadRun{cfg: cfg}
}

// step starts the reload once n CDC records have been written, then loads a batch of rows.
func (rl *reloadRun) step(r *run, n int, emit func(Message) bool) bool {
	if !rl.started {
		if n < rl.cfg.At {
			return true
		}
		if !rl.start(r, emit) {
			return false
		}
	}
	return rl.load(r, 1+r.rng.IntN(8), emit)
}

// finish runs what is left of the reload after the CDC phase.
func (rl *reloadRun) finish(r *run, emit func(Message) bool) bool {
	if !rl.started && !rl.start(r, emit) {
		return false
	}
	return rl.load(r, -1, emit)
}

// start applies the outage to the model, writes the create-table record and takes the list of
// rows to load. An endless run keeps no keyless rows, so it does not reload the keyless table.
func (rl *reloadRun) start(r *run, emit func(Message) bool) bool {
	rl.started = true
	t := r.table(rl.cfg.Table)
	rl.t = t
	if t.def.key == nil && r.endless {
		rl.done = true
		return true
	}
	for i := 0; i < rl.cfg.Deletes && t.size() > 0; i++ {
		if t.def.key == nil {
			j := r.rng.IntN(len(t.keyless))
			rl.deleted = append(rl.deleted, t.keyless[j])
			t.keyless = slices.Delete(t.keyless, j, j+1)
			continue
		}
		old := r.randomRow(t)
		key := make([]change.Value, len(t.def.keyIdx))
		for k, ki := range t.def.keyIdx {
			key[k] = old[ki]
		}
		rl.deleted = append(rl.deleted, key)
		r.remove(t, old)
	}
	for i := 0; i < rl.cfg.Updates && t.size() > 0; i++ {
		r.upsert(t, r.updated(t, r.randomRow(t)))
	}
	m := r.control(t, "create-table")
	m.Reload = true
	if !emit(m) {
		return false
	}
	if t.def.key == nil {
		rl.next, rl.end = 0, len(t.keyless)
	} else {
		rl.keys = slices.Clone(t.keys)
	}
	rl.size = t.size()
	r.reloading = t
	return rl.load(r, 0, emit)
}

// load writes up to limit load records (all that are left if limit < 0) and ends the reload
// when none is left.
func (rl *reloadRun) load(r *run, limit int, emit func(Message) bool) bool {
	if rl.done {
		return true
	}
	t := rl.t
	for i := 0; limit < 0 || i < limit; i++ {
		row := rl.nextRow()
		if row == nil {
			break
		}
		m := r.dataMessage(t, "load", row, nil, nil, nil, false)
		m.Reload = true
		if !emit(m) {
			return false
		}
	}
	if len(rl.keys) == 0 && rl.next >= rl.end {
		rl.done = true
		r.reloading = nil
	}
	return true
}

// nextRow returns the next row to load, nil when none is left.
func (rl *reloadRun) nextRow() []change.Value {
	t := rl.t
	if t.def.key == nil {
		if rl.next >= rl.end {
			return nil
		}
		rl.next++
		return t.keyless[rl.next-1]
	}
	for len(rl.keys) > 0 {
		row, ok := t.rows[rl.keys[0]]
		rl.keys = rl.keys[1:]
		if ok {
			return row
		}
	}
	return nil
}
