package sink

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// setProps commits props on shop.<name> behind the sinks' backs (another binary); an empty
// value removes the property.
func setProps(t *testing.T, h *harness, name string, props map[string]string) *table.Table {
	t.Helper()
	tbl := loadTable(t, h, "shop", name)
	txn := tbl.NewTransaction()
	set, remove := iceberg.Properties{}, []string{}
	for k, v := range props {
		if v == "" {
			remove = append(remove, k)
		} else {
			set[k] = v
		}
	}
	if len(set) > 0 {
		if err := txn.SetProperties(set); err != nil {
			t.Fatal(err)
		}
	}
	if len(remove) > 0 {
		if err := txn.RemoveProperties(remove); err != nil {
			t.Fatal(err)
		}
	}
	tbl, err := txn.Commit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// refusedRun waits for the sink of h to stop with a state-version refusal.
func refusedRun(t *testing.T, h *harness) error {
	t.Helper()
	err := <-h.done
	h.done <- nil // the harness's cleanup expects a result
	if !stateversion.IsRefused(err) {
		t.Fatalf("sink Run = %v, want a state-version refusal", err)
	}
	return err
}

// A table whose state was written by a newer state version is refused when the writer opens
// it: nothing is committed to it and nothing is acknowledged (the records stay in the stream for
// an upgraded binary).
func TestTableOfNewerStateVersionIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := seedUsers(t, dir)
	stamped := setProps(t, h, "users", map[string]string{tableprop.StateVersion: "2"})

	h2 := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	h2.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	_ = h2.s.Flush(context.Background())
	err := refusedRun(t, h2)
	if !strings.Contains(err.Error(), "table shop.users: table state written by dms2iceberg state version 2, this binary understands up to 1: upgrade") {
		t.Fatalf("refusal does not say why: %v", err)
	}
	if got := loadTable(t, h2, "shop", "users"); got.MetadataLocation() != stamped.MetadataLocation() {
		t.Fatal("a commit was made to a table of a newer state version")
	}
	if n := h2.ack.N.Load(); n != 0 {
		t.Fatalf("acknowledged %d records of a refused table", n)
	}
}

// A writer that loaded the table before a newer binary committed to it and stamped it with a
// newer state version finds out on the refresh after its commit conflicts, and refuses instead of
// committing. (A newer binary's properties-only commit does not make a stale commit conflict:
// the catalogs apply a commit's updates to the newest metadata. Stamp never rewrites a present
// stamp, so such a commit cannot downgrade it.)
func TestTableStampedNewerWhileOpenIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	h.submit("s0", 1, change.OpInsert, "users", []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.flush()
	newer := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	newer.submit("s1", 1, change.OpInsert, "users", []change.Column{col("id", "9"), col("name", "'z'")}, nil)
	newer.flush()
	newer.close()
	stamped := setProps(t, h, "users", map[string]string{tableprop.StateVersion: "2"})
	h.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	if err := h.s.Flush(context.Background()); err == nil {
		t.Fatal("flush committed to a table of a newer state version")
	}
	_ = refusedRun(t, h)
	if got := loadTable(t, h, "shop", "users"); got.MetadataLocation() != stamped.MetadataLocation() {
		t.Fatal("a commit was made to a table of a newer state version")
	}
	if n := h.ack.N.Load(); n != 1 {
		t.Fatalf("acknowledged %d, want 1 (only the record committed before the stamp)", n)
	}
}

// Tables are stamped with the current state version at creation and by every commit; a table
// written before the stamp existed (none: version 1) is accepted and stamped by the next commit.
func TestStateVersionStampedAndUnstampedAccepted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := seedUsers(t, dir)
	if v := loadTable(t, h, "shop", "users").Properties()[tableprop.StateVersion]; v != stateversion.CurrentText {
		t.Fatalf("new table stamped %q, want %q", v, stateversion.CurrentText)
	}
	unstamped := setProps(t, h, "users", map[string]string{tableprop.StateVersion: ""})
	if _, ok := unstamped.Properties()[tableprop.StateVersion]; ok {
		t.Fatal("stamp not removed")
	}

	h2 := newHarness(t, dir, withTables(map[string]TableConfig{"shop.users": usersDef}))
	h2.submit("s0", 2, change.OpInsert, "users", []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	h2.flush()
	h2.close()
	rows, tbl := scanRows(t, h2.cat, "users")
	eq(t, rows, "id=1,name=a,amount=null", "id=2,name=b,amount=null")
	if v := tbl.Properties()[tableprop.StateVersion]; v != stateversion.CurrentText {
		t.Fatalf("commit stamped %q, want %q", v, stateversion.CurrentText)
	}
}

// The dead-letter table of a newer state version is refused too: the dead letter fails (so its
// record is not acknowledged) and the sink stops; nothing is committed to it.
func TestDeadLetterTableOfNewerStateVersionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Catalog = DefaultCatalogConfig(t.TempDir())
	cfg.Stream = "st"
	cfg.Maintenance.Enabled = false
	cat, err := OpenCatalog(ctx, cfg.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	run := func() (*Iceberg, chan error) {
		s, err := New(cfg, cat, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return s, done
	}
	dl := change.DeadLetter{Stream: "st", Shard: "s0", Seq: "1", Reason: "bad", Raw: []byte("x")}
	s, done := run()
	if err := s.DeadLetters().DeadLetter(ctx, dl); err != nil {
		t.Fatal(err)
	}
	ident := s.tdl.Ident()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	txn := tbl.NewTransaction()
	if err := txn.SetProperties(iceberg.Properties{tableprop.StateVersion: "2"}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	s2, done2 := run()
	dl.Seq = "2"
	if err := s2.DeadLetters().DeadLetter(ctx, dl); !stateversion.IsRefused(err) {
		t.Fatalf("dead letter into a table of state version 2 = %v, want a state-version refusal", err)
	}
	if err := <-done2; !stateversion.IsRefused(err) {
		t.Fatalf("sink Run = %v, want a state-version refusal", err)
	}
	if after, err := cat.LoadTable(ctx, ident); err != nil || after.MetadataLocation() != tbl.MetadataLocation() {
		t.Fatalf("a commit was made to a dead-letter table of a newer state version (%v)", err)
	}
}
