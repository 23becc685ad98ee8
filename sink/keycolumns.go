package sink

import (
	"strings"
	"sync"
	"sync/atomic"
)

// keyColumns are the key columns of the source tables the sink's writers know (a loaded table's
// identifier fields, else a table-def's primary key), for the consumer, which reads them for
// every update it tracks (Iceberg.KeyColumns): reads take no lock and allocate nothing; writes,
// rare, copy the map.
type keyColumns struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[sourceKey]keyEntry]
}

type keyEntry struct {
	cols   []string
	loaded bool // from a loaded table: a table-def's key does not replace it
}

// set notes key for source table src ("schema.table"; a schema whose name holds a dot is not
// found by get, and its updates are then classified by the writer instead). A nil key of a loaded
// table is a keyless table, known to have no key (get returns an empty key: no update of it is a
// key change); a nil key of a table-def says nothing.
func (k *keyColumns) set(src string, key []string, loaded bool) {
	schema, table, ok := strings.Cut(src, ".")
	if !ok {
		return
	}
	sk := sourceKey{schema, table}
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.m.Load()
	if old != nil {
		if cur, ok := (*old)[sk]; ok && cur.loaded && !loaded {
			return
		}
	}
	next := make(map[sourceKey]keyEntry, 1)
	if old != nil {
		for key, e := range *old {
			next[key] = e
		}
	}
	switch {
	case key == nil && !loaded:
		delete(next, sk)
	case key == nil:
		next[sk] = keyEntry{cols: []string{}, loaded: true}
	default:
		next[sk] = keyEntry{cols: key, loaded: loaded}
	}
	k.m.Store(&next)
}

// get returns the key columns of schema.table: empty for a keyless table, nil when not known.
func (k *keyColumns) get(schema, table string) []string {
	m := k.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[sourceKey{schema, table}].cols
}
