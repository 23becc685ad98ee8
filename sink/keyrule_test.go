package sink

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The rules of a configured key (never masked, never excluded; hashing is
// fine) hold for a key that comes from the table-def. Before, a masked table-def key turned
// every key into "****" and collapsed all rows into one.
func TestTableDefKeyRules(t *testing.T) {
	t.Parallel()
	users := func(h *harness) {
		h.ctl("s0", 1, "users", "create-table", "id*:INT4 name:STRING")
		h.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
		h.data("s0", 3, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
		h.flush()
	}
	for _, tc := range []struct {
		name string
		tc   TableConfig
		path string
	}{
		{"mask", TableConfig{MaskColumns: []string{"name", "id"}}, "sink.tables[shop.users].mask_columns[1]"},
		{"exclude", TableConfig{ExcludeColumns: []string{"id"}}, "sink.tables[shop.users].exclude_columns[0]"},
		{"mask by glob", TableConfig{MaskColumns: []string{"id"}}, "sink.tables[shop.*].mask_columns[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "shop.users"
			if strings.Contains(tc.path, "*") {
				key = "shop.*"
			}
			h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{key: tc.tc}), withMaintenance(nil))
			users(h)
			h.close()
			if len(h.dlq.Letters()) != 2 {
				t.Fatalf("%d dead letters, want the 2 rows: %+v", len(h.dlq.Letters()), h.dlq.Letters())
			}
			for _, dl := range h.dlq.Letters() {
				if dl.Class != ClassPaused || !strings.Contains(dl.Reason, tc.path) || !strings.Contains(dl.Reason, "table-def") {
					t.Fatalf("dead letter %+v, want class %s naming %s", dl, ClassPaused, tc.path)
				}
			}
			if got := h.ack.N.Load(); got != 3 {
				t.Fatalf("acknowledged %d, want 3", got)
			}
		})
	}
}

// Hashing a table-def key keeps the rows apart: the HMAC of distinct values is distinct.
func TestHashedTableDefKeyKeepsRowsApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.users": {HashColumns: []string{"id"}}}),
		withConfig(func(c *Config) { c.HashKey = []byte("k") }), withMaintenance(nil))
	h.ctl("s0", 1, "users", "create-table", "id*:INT4 name:STRING")
	h.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.data("s0", 3, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	h.data("s0", 4, "users", change.OpUpdate, []change.Column{col("id", "2"), col("name", "'b2'")}, nil)
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "users")
	if len(rows) != 2 || len(tbl.Schema().IdentifierFieldIDs) != 1 || len(h.dlq.Letters()) != 0 {
		t.Fatalf("rows %v, key %v, dead letters %+v", rows, tbl.Schema().IdentifierFieldIDs, h.dlq.Letters())
	}
	names := map[string]bool{}
	for _, r := range rows {
		_, n, _ := strings.Cut(r, ",name=")
		names[n] = true
	}
	if !names["a"] || !names["b2"] {
		t.Fatalf("rows %v, want a and b2 under two hashed keys", rows)
	}
}

// A table that already has a key (created before the mask was configured), or a keyless table
// given its table-def key by a later create-table, pauses too: its key would be masked.
func TestMaskOnAnExistingKeyPauses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withMaintenance(nil))
	h.ctl("s0", 1, "users", "create-table", "id*:INT4 name:STRING")
	h.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	h.close()
	masked := withTables(map[string]TableConfig{"shop.users": {MaskColumns: []string{"id"}}})
	h2 := newHarness(t, dir, masked, withMaintenance(nil))
	h2.data("s0", 3, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	h2.data("s0", 4, "users", change.OpInsert, []change.Column{col("id", "3"), col("name", "'c'")}, nil)
	h2.flush()
	h2.close()
	rows, _ := scanRows(t, h2.cat, "users")
	eq(t, rows, "id=1,name=a")
	if got := classes(h2.dlq.Letters()); len(got) != 2 || got[0] != ClassPaused || !strings.Contains(h2.dlq.Letters()[0].Reason, "sink.tables[shop.users].mask_columns[0]") {
		t.Fatalf("dead letters %+v", h2.dlq.Letters())
	}

	// Keyless first (the table-def came without a key), then a create-table with the key.
	h3 := newHarness(t, t.TempDir(), masked, withMaintenance(nil))
	h3.ctl("s0", 1, "users", "create-table", "id:INT4 name:STRING")
	h3.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h3.flush()
	h3.ctl("s0", 3, "users", "create-table", "id*:INT4 name:STRING")
	h3.data("s0", 4, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	h3.flush()
	h3.close()
	if got := classes(h3.dlq.Letters()); len(got) != 1 || got[0] != ClassPaused || !strings.Contains(h3.dlq.Letters()[0].Reason, "mask_columns[0]") {
		t.Fatalf("dead letters %+v", h3.dlq.Letters())
	}
}

// schemaKinds records the schema changes a sink reports, by kind.
type schemaKinds struct {
	nopMetrics
	mu    sync.Mutex
	kinds map[string]int
}

func (s *schemaKinds) SchemaChanged(_, kind string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = map[string]int{}
	}
	s.kinds[kind] += n
}

func (s *schemaKinds) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kinds[kind]
}

// A keyless table made from data while DMS leaves NULL columns out (no IncludeNullAndEmpty)
// gets a column later, as an optional column; data files written before hold nothing for it.
// A key on that column, from a create-table or from configuration, is not applied: Iceberg
// identifier fields are required, and a required column that older data files lack makes every
// scan fail ("required field is missing and has no default value"), and with it verify,
// compaction, conversions and partial-image lookups. The table stays keyless and readable, the
// refusal is counted (primary_key_refused), and its changes are dead-lettered as a keyless
// table's (replayable once it has a key). A key on a column every data file holds still applies.
func TestKeyOnAColumnOlderFilesLackIsNotApplied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mx := &schemaKinds{}
	h := newHarness(t, dir, withMaintenance(nil), withOptions(WithMetrics(mx)))
	h.data("s0", 1, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	h.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'"), col("code", "'x'")}, nil)
	h.flush()
	h.ctl("s0", 3, "users", "create-table", "id:INT8 name:STRING code*:STRING")
	h.data("s0", 4, "users", change.OpInsert, []change.Column{col("id", "3"), col("name", "'c'"), col("code", "'y'")}, nil)
	h.data("s0", 5, "users", change.OpUpdate, []change.Column{col("id", "2"), col("name", "'b2'"), col("code", "'x'")}, nil)
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, "id=1,name=a,code=null", "id=2,name=b,code=x", "id=3,name=c,code=y")
	if ids := tbl.Schema().IdentifierFieldIDs; len(ids) != 0 {
		t.Fatalf("identifier fields %v, want none", ids)
	}
	if f, _ := tbl.Schema().FindFieldByName("code"); f.Required {
		t.Fatal("code was made required")
	}
	if got := classes(h.dlq.Letters()); len(got) != 1 || got[0] != ClassKeyless {
		t.Fatalf("dead letters %+v, want the update as %s", h.dlq.Letters(), ClassKeyless)
	}
	if mx.count("primary_key_refused") != 1 || mx.count("set_primary_key") != 0 {
		t.Fatalf("schema changes %v", mx.kinds)
	}

	// The same key configured: refused at every start, the table stays readable.
	mx2 := &schemaKinds{}
	h2 := newHarness(t, dir, withMaintenance(nil), withOptions(WithMetrics(mx2)),
		withTables(map[string]TableConfig{"shop.users": {PrimaryKey: []string{"code"}}}))
	h2.data("s0", 6, "users", change.OpInsert, []change.Column{col("id", "4"), col("name", "'d'"), col("code", "'z'")}, nil)
	h2.flush()
	h2.close()
	rows, tbl = scanRows(t, h2.cat, "users")
	eq(t, rows, "id=1,name=a,code=null", "id=2,name=b,code=x", "id=3,name=c,code=y", "id=4,name=d,code=z")
	if ids := tbl.Schema().IdentifierFieldIDs; len(ids) != 0 || mx2.count("primary_key_refused") != 1 {
		t.Fatalf("identifier fields %v, schema changes %v", ids, mx2.kinds)
	}

	// A key on id, which every data file holds, applies.
	h3 := newHarness(t, dir, withMaintenance(nil))
	h3.ctl("s0", 7, "users", "create-table", "id*:INT8 name:STRING code:STRING")
	h3.data("s0", 8, "users", change.OpUpdate, []change.Column{col("id", "1"), col("name", "'a2'")}, nil)
	h3.flush()
	h3.close()
	rows, tbl = scanRows(t, h3.cat, "users")
	eq(t, rows, "id=1,name=a2,code=null", "id=2,name=b,code=x", "id=3,name=c,code=y", "id=4,name=d,code=z")
	if ids := tbl.Schema().IdentifierFieldIDs; len(ids) != 1 {
		t.Fatalf("identifier fields %v, want id", ids)
	}
}

// The usual way out for a key refused because older data files lack its column: a DMS reload
// of the table, whose create-table names the key. The key is refused when that create-table
// applies (main still reads the old files until the reload's replace), and applied once the
// replace removed them: updates by the key apply from then on.
func TestKeyRefusedDuringAReloadAppliesAfterItsReplace(t *testing.T) {
	t.Parallel()
	mx := &schemaKinds{}
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withOptions(WithMetrics(mx)),
		withConfig(func(c *Config) { c.Reload = ReloadReplace; c.ReloadQuietPeriod = 0 }))
	ctl := func(seq int, def, ts string) {
		ev := ctlEvent("c", seq, "users", "create-table", def)
		ev.Meta.Timestamp = ts
		h.event(ev)
	}
	row := func(seq int, op change.Op, cols ...change.Column) {
		h.event(&change.Event{Table: "users", Op: op, Columns: cols,
			Meta: change.Metadata{RecordType: "data", Operation: op.String(), Timestamp: "2025-01-03T00:00:00.000000Z"},
			Pos:  change.Position{Shard: "s0", Seq: fmt.Sprint(seq)}})
	}
	row(1, change.OpInsert, col("id", "1"), col("name", "'a'"))
	h.flush()
	row(2, change.OpInsert, col("id", "2"), col("name", "'b'"), col("code", "'x'"))
	h.flush()
	ctl(1, "id:INT8 name:STRING code:STRING note:STRING", tsFirst) // a change: it records its timestamp
	h.flush()
	ctl(2, "id:INT8 name:STRING code*:STRING note:STRING", tsReload) // the reload
	row(3, change.OpLoad, col("id", "1"), col("name", "'a'"), col("code", "'p'"))
	row(4, change.OpLoad, col("id", "2"), col("name", "'b'"), col("code", "'x'"))
	h.flush()
	if mx.count("primary_key_refused") != 1 || mx.count("reload_start") != 1 {
		t.Fatalf("schema changes %v: want the key refused while the reload runs", mx.kinds)
	}
	row(5, change.OpInsert, col("id", "3"), col("name", "'c'"), col("code", "'y'")) // ends the reload
	h.flush()
	row(6, change.OpUpdate, col("id", "2"), col("name", "'b2'"), col("code", "'x'"))
	h.flush()
	h.close()
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, "id=1,name=a,code=p,note=null", "id=2,name=b2,code=x,note=null", "id=3,name=c,code=y,note=null")
	f, _ := tbl.Schema().FindFieldByName("code")
	if ids := tbl.Schema().IdentifierFieldIDs; len(ids) != 1 || ids[0] != f.ID || mx.count("set_primary_key") != 1 {
		t.Fatalf("identifier fields %v (code is %d), schema changes %v", ids, f.ID, mx.kinds)
	}
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters %+v", h.dlq.Letters())
	}
}
