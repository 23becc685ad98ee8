package sink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// Keyless tables and DMS re-sends: a re-sent record (PutRecords retry, task
// restart) arrives with a new Kinesis sequence number, above every watermark. With
// IncludeTransactionDetails the record's DMS identity is a hidden column whose equality delete
// makes the re-send replace its earlier copy; without the details a re-send is a duplicate row.

var logDef = map[string]TableConfig{"shop.log": {Columns: []ColumnSpec{{Name: "msg", Type: "WSTRING"}}}}

// cdcInsert is a CDC insert of table log carrying msg; tx and rec are its transaction-id and
// transaction-record-id, with the commit-timestamp of IncludeTransactionDetails when details.
func cdcInsert(shard string, seq int, msg string, tx, rec int, details bool) *change.Event {
	m := change.Metadata{RecordType: "data", Operation: "insert", Timestamp: "2025-01-01T00:00:09.000000Z",
		TransactionID: fmt.Sprint(tx)}
	if details {
		m.TransactionRecordID = fmt.Sprint(rec)
		m.CommitTimestamp = fmt.Sprintf("2025-01-01T00:00:%02d.000000Z", tx%60)
	}
	return &change.Event{Table: "log", Op: change.OpInsert, Columns: []change.Column{col("msg", "'"+msg+"'")},
		Meta: m, Pos: change.Position{Shard: shard, Seq: fmt.Sprint(seq)}}
}

// msgs lists the msg values of log's rows, sorted.
func msgs(t *testing.T, h *harness) []string {
	t.Helper()
	rows, _ := scanRows(t, h.cat, "log")
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		for _, f := range strings.Split(r, ",") {
			if strings.HasPrefix(f, "msg=") {
				out = append(out, f)
			}
		}
	}
	return out
}

func TestKeylessResendsWithTransactionDetailsAreExactlyOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(logDef), withMaintenance(nil))
	h.event(cdcInsert("s0", 1, "a", 7, 1, true))
	h.event(cdcInsert("s0", 2, "b", 7, 2, true))
	h.event(cdcInsert("s0", 3, "a", 7, 1, true)) // PutRecords retry: same batch, new sequence number
	h.event(cdcInsert("s1", 9, "a", 7, 1, true)) // ... on another shard
	h.flush()
	eq(t, msgs(t, h), "msg=a", "msg=b")
	rows, tbl := scanRows(t, h.cat, "log")
	eq(t, rows, "msg=a,_dms_record_id=2025-01-01T00:00:07.000000Z/7/1", "msg=b,_dms_record_id=2025-01-01T00:00:07.000000Z/7/2")
	f, ok := tbl.Schema().FindFieldByName(KeylessIdentityColumn)
	if !ok || f.Required || !strings.HasPrefix(f.Doc, identityDoc) || len(tbl.Schema().IdentifierFieldIDs) != 0 {
		t.Fatalf("identity column %+v (found %v), identifier fields %v", f, ok, tbl.Schema().IdentifierFieldIDs)
	}
	if p := tbl.Properties(); p["write.parquet.dict-encoding-enabled.column."+KeylessIdentityColumn] != "" || p["write.parquet.dict-encoding-enabled.column.msg"] != "true" {
		t.Fatalf("dictionary properties %v: want msg only (identities are distinct per row)", p)
	}
	// Next batch: a re-send of b with a new record c.
	h.event(cdcInsert("s0", 4, "b", 7, 2, true))
	h.event(cdcInsert("s0", 5, "c", 8, 1, true))
	h.flush()
	eq(t, msgs(t, h), "msg=a", "msg=b", "msg=c")
	h.close()

	// A task restart re-sends from an earlier source position: new sequence numbers again, and
	// a dead letter replayed (dlq replay) bypasses the watermarks but not the identity.
	h2 := newHarness(t, dir, withTables(logDef), withMaintenance(nil))
	h2.event(cdcInsert("s0", 20, "a", 7, 1, true))
	h2.event(cdcInsert("s0", 21, "b", 7, 2, true))
	h2.event(cdcInsert("s0", 22, "c", 8, 1, true))
	h2.flush()
	replay := cdcInsert("s0", 5, "c", 8, 1, true)
	replay.Replay = true
	h2.event(replay)
	h2.flush()
	eq(t, msgs(t, h2), "msg=a", "msg=b", "msg=c")
	// Same transaction id and record index at another commit time (a PostgreSQL xid after
	// wrap-around) is another record.
	other := cdcInsert("s0", 30, "d", 7, 1, true)
	other.Meta.CommitTimestamp = "2026-01-01T00:00:00.000000Z"
	h2.event(other)
	h2.flush()
	eq(t, msgs(t, h2), "msg=a", "msg=b", "msg=c", "msg=d")
	h2.close()
	if len(h2.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h2.dlq.Letters())
	}
}

// Without the transaction details (the DMS default, and every full-load record) a re-send
// cannot be told from a new row: it is appended again (the documented rule).
func TestKeylessResendsWithoutTransactionDetailsDuplicate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(logDef), withMaintenance(nil))
	h.event(cdcInsert("s0", 1, "a", 7, 1, false))
	h.event(cdcInsert("s0", 2, "a", 7, 1, false))
	h.flush()
	load := &change.Event{Table: "log", Op: change.OpLoad, Columns: []change.Column{col("msg", "'l'")},
		Meta: change.Metadata{RecordType: "data", Operation: "load"}, Pos: change.Position{Shard: "s1", Seq: "1"}}
	h.event(load)
	load2 := *load
	load2.Pos.Seq = "2"
	h.event(&load2)
	h.flush()
	eq(t, msgs(t, h), "msg=a", "msg=a", "msg=l", "msg=l")
	rows, tbl := scanRows(t, h.cat, "log")
	eq(t, rows, "msg=a", "msg=a", "msg=l", "msg=l") // no identity shown: all null
	if _, ok := tbl.Schema().FindFieldByName(KeylessIdentityColumn); !ok {
		t.Fatalf("keyless table created without the identity column: %s", tbl.Schema())
	}
	h.close()
}

// sink.keyless_identity off keeps keyless tables append-only: re-sends duplicate, no column.
func TestKeylessIdentityOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(logDef), withMaintenance(nil),
		withConfig(func(c *Config) { c.KeylessIdentity = KeylessIdentityOff }))
	h.event(cdcInsert("s0", 1, "a", 7, 1, true))
	h.event(cdcInsert("s0", 2, "a", 7, 1, true))
	h.flush()
	eq(t, msgs(t, h), "msg=a", "msg=a")
	_, tbl := scanRows(t, h.cat, "log")
	if _, ok := tbl.Schema().FindFieldByName(KeylessIdentityColumn); ok {
		t.Fatalf("identity column added with keyless_identity off: %s", tbl.Schema())
	}
	h.close()
	if err := (Config{KeylessIdentity: "on"}).validKeylessIdentity(); err == nil {
		t.Fatal("keyless_identity on accepted")
	}
}

// sink.tables.<t>.keyless_identity overrides the sink's setting for one table, both ways.
func TestKeylessIdentityPerTable(t *testing.T) {
	t.Parallel()
	tables := map[string]TableConfig{
		"shop.log":   {Columns: logDef["shop.log"].Columns, KeylessIdentity: KeylessIdentityAuto},
		"shop.audit": {Columns: logDef["shop.log"].Columns, KeylessIdentity: KeylessIdentityOff},
	}
	h := newHarness(t, t.TempDir(), withTables(tables), withMaintenance(nil),
		withConfig(func(c *Config) { c.KeylessIdentity = KeylessIdentityOff }))
	for i, tbl := range []string{"log", "log", "audit", "audit"} {
		ev := cdcInsert("s0", i+1, "a", 7, 1, true)
		ev.Table = tbl
		h.event(ev)
	}
	h.flush()
	eq(t, msgs(t, h), "msg=a")
	rows, _ := scanRows(t, h.cat, "audit")
	eq(t, rows, "msg=a", "msg=a")
	h.close()
	bad := DefaultConfig()
	bad.Stream = "st"
	bad.Tables = map[string]TableConfig{"shop.x": {KeylessIdentity: "yes"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "keyless_identity") {
		t.Fatalf("sink.tables keyless_identity yes: %v", err)
	}
}

// A keyless table created without the column (before this version, or with keyless_identity
// off) does not get it later: its re-sends are appended again, and reading it still works.
func TestKeylessTableWithoutIdentityColumnKeepsAppending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(logDef), withMaintenance(nil),
		withConfig(func(c *Config) { c.KeylessIdentity = KeylessIdentityOff }))
	h.event(cdcInsert("s0", 1, "a", 7, 1, true))
	h.flush()
	h.close()
	h2 := newHarness(t, dir, withTables(logDef), withMaintenance(nil))
	h2.event(cdcInsert("s0", 2, "a", 7, 1, true))
	h2.event(cdcInsert("s0", 3, "b", 7, 2, true))
	h2.flush()
	eq(t, msgs(t, h2), "msg=a", "msg=a", "msg=b")
	_, tbl := scanRows(t, h2.cat, "log")
	if _, ok := tbl.Schema().FindFieldByName(KeylessIdentityColumn); ok {
		t.Fatalf("identity column added to an existing table: %s", tbl.Schema())
	}
	h2.close()
}

// A table created from a table-def without a key has the column from the start (load rows have
// none); an ALTER's table-def, which does not name it, neither marks it dropped nor renames it,
// and a record whose data names the column does not overwrite it.
func TestKeylessIdentityColumnAndSchemaEvolution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "log", "create-table", "msg:WSTRING")
	h.event(&change.Event{Table: "log", Op: change.OpLoad, Columns: []change.Column{col("msg", "'l'")},
		Meta: change.Metadata{RecordType: "data", Operation: "load"}, Pos: change.Position{Shard: "s1", Seq: "1"}})
	h.event(cdcInsert("s0", 2, "a", 7, 1, true))
	h.flush()
	h.ctl("c", 2, "log", "add-column", "msg:WSTRING n:INT4")
	ev := cdcInsert("s0", 3, "a", 7, 1, true)
	ev.Columns = append(ev.Columns, col(KeylessIdentityColumn, "'forged'"))
	h.event(ev)
	h.event(cdcInsert("s0", 4, "b", 7, 2, true))
	h.flush()
	h.ctl("c", 3, "log", "rename-column", "text:WSTRING n:INT4")
	h.flush()
	rows, tbl := scanRows(t, h.cat, "log")
	eq(t, rows,
		"text=l,n=null",
		"text=a,_dms_record_id=2025-01-01T00:00:07.000000Z/7/1,n=null",
		"text=b,_dms_record_id=2025-01-01T00:00:07.000000Z/7/2,n=null")
	if f, _ := tbl.Schema().FindFieldByName(KeylessIdentityColumn); !strings.HasPrefix(f.Doc, identityDoc) {
		t.Fatalf("identity column doc %q", f.Doc)
	}
	h.close()
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

// A keyed table ignores the identity: last change per key already makes re-sends harmless.
func TestKeyedTableHasNoIdentityColumn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withMaintenance(nil))
	h.ctl("c", 1, "log", "create-table", "id*:INT4 msg:WSTRING")
	ev := cdcInsert("s0", 1, "a", 7, 1, true)
	ev.Columns = append(ev.Columns, col("id", "1"))
	h.event(ev)
	h.flush()
	rows, _ := scanRows(t, h.cat, "log")
	eq(t, rows, "id=1,msg=a")
	h.close()
}

// Compaction applies the identity's equality deletes like a keyed table's and drops them; a
// re-send after it still replaces the compacted copy.
func TestKeylessIdentityDeletesAreCompacted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(logDef), withMaintenance(nil))
	for b := range 4 {
		h.event(cdcInsert("s0", 10*b+1, fmt.Sprint("m", b), 20+b, 1, true))
		if b > 0 {
			h.event(cdcInsert("s0", 10*b+2, fmt.Sprint("m", b-1), 20+b-1, 1, true)) // the previous batch's record again
		}
		h.flush()
	}
	eq(t, msgs(t, h), "msg=m0", "msg=m1", "msg=m2", "msg=m3")
	cfg := maintenance.DefaultConfig()
	cfg.KeepLast, cfg.SnapshotRetention = 2, 0
	rep, err := maintenance.RunTable(context.Background(), h.cat, table.Identifier{"shop", "log"}, cfg, maintenance.RunOptions{SkipOrphans: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted || rep.DeleteFilesRemoved == 0 || rep.DeleteFilesAfter != 0 {
		t.Fatalf("report %+v", rep)
	}
	eq(t, msgs(t, h), "msg=m0", "msg=m1", "msg=m2", "msg=m3")
	h.event(cdcInsert("s0", 100, "m2", 22, 1, true))
	h.flush()
	eq(t, msgs(t, h), "msg=m0", "msg=m1", "msg=m2", "msg=m3")
	h.close()
}
