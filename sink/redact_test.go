package sink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

var peopleRules = map[string]TableConfig{"shop.people": {HashColumns: []string{"email"}, MaskColumns: []string{"ssn"}, ExcludeColumns: []string{"notes"}}}

// peopleUpdate is a DMS update of shop.people whose age is not a number.
const peopleUpdate = `{"data":{"id":1,"age":"abc","email":"new@example.com","ssn":"222-22-2222","notes":"secret note"},` +
	`"before-image":{"id":1,"email":"old@example.com","ssn":"111-11-1111","notes":"old note"},` +
	`"metadata":{"timestamp":"2025-01-01T00:00:00.000000Z","record-type":"data","operation":"update","partition-key-type":"schema-table","schema-name":"shop","table-name":"people"}}`

var peopleClear = []string{"new@example.com", "222-22-2222", "secret note", "old@example.com", "111-11-1111", "old note"}

func decodeRaw(t *testing.T, raw string, seq int) *change.Event {
	t.Helper()
	ev := &change.Event{}
	if err := dms.NewDecoder(dms.DefaultConfig()).Decode([]byte(raw), ev); err != nil {
		t.Fatal(err)
	}
	ev.Raw = []byte(raw)
	ev.Pos = change.Position{Shard: "d", Seq: fmt.Sprint(seq)}
	return ev
}

func TestDeadLetterKeepsColumnRules(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withTables(peopleRules), withTableDLQ(),
		withConfig(func(c *Config) { c.HashKey = []byte("k") }), withOptions(WithLogger(zap.New(core))))
	h.ctl("c", 1, "people", "create-table", "id*:INT4 age:INT4 email:WSTRING ssn:WSTRING notes:WSTRING")
	h.event(decodeRaw(t, peopleUpdate, 1))
	h.flush()
	h.close()
	dls, err := ReadDeadLetters(context.Background(), h.cat, table.Identifier{"dms2iceberg", "dead_letters"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Class != ClassConvert {
		t.Fatalf("dead letters %+v", dls)
	}
	stored := string(dls[0].Raw) + "\n" + dls[0].Reason
	var logged strings.Builder
	for _, e := range logs.All() {
		fmt.Fprintln(&logged, e.Message, e.ContextMap())
	}
	for _, v := range peopleClear {
		if strings.Contains(stored, v) {
			t.Fatalf("dead letter holds %q:\n%s", v, stored)
		}
		if strings.Contains(logged.String(), v) {
			t.Fatalf("logs hold %q:\n%s", v, logged.String())
		}
	}
	// Hashed columns hold the sink's hash, masked ones ****; the record still decodes.
	rules := h.s.cfg.Rules("shop.people")
	hash, _ := rules.Value("email", change.Value{Kind: change.KindString, Text: "new@example.com"})
	var ev change.Event
	if err := dms.NewDecoder(dms.DefaultConfig()).Decode(dls[0].Raw, &ev); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range append(ev.Columns, ev.Before...) {
		got = append(got, c.Name+"="+c.Value.Text)
	}
	want := "id=1 age=abc email=" + hash.Text + " ssn=**** id=1 email=" + func() string {
		v, _ := rules.Value("email", change.Value{Kind: change.KindString, Text: "old@example.com"})
		return v.Text
	}() + " ssn=****"
	if strings.Join(got, " ") != want {
		t.Fatalf("redacted record decodes to\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}

// A replayed redacted record whose redacted column has another rule now cannot be applied: it
// does not hold the source value.
func TestReplayRefusesChangedColumnRule(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Tables, cfg.HashKey = peopleRules, []byte("k")
	red := cfg.RedactDeadLetter(change.DeadLetter{Table: "shop.people", Raw: []byte(peopleUpdate)})
	// ssn is no longer masked.
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.HashKey = []byte("k") }),
		withTables(map[string]TableConfig{"shop.people": {HashColumns: []string{"email"}, ExcludeColumns: []string{"notes"}}}))
	h.ctl("c", 1, "people", "create-table", "id*:INT4 age:WSTRING email:WSTRING ssn:WSTRING notes:WSTRING")
	ev := decodeRaw(t, string(red.Raw), 1)
	ev.Replay, ev.Redacted = true, dms.RedactedColumns(red.Raw)
	h.event(ev)
	h.flush()
	if len(h.dlq.Letters()) != 1 || !strings.Contains(h.dlq.Letters()[0].Reason, "column ssn was masked when the record was dead-lettered and is not redacted now") {
		t.Fatalf("dead letters %+v", h.dlq.Letters())
	}
	h.close()
}

// Redacting twice changes nothing; a record that names no table is replaced while any table
// has column rules, and a consumer dead letter loses the quoted text of its reason.
func TestRedactDeadLetterIdempotentAndUnparsed(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Tables, cfg.HashKey = peopleRules, []byte("k")
	once := cfg.RedactDeadLetter(change.DeadLetter{Table: "shop.people", Raw: []byte(peopleUpdate)})
	if twice := cfg.RedactDeadLetter(once); string(twice.Raw) != string(once.Raw) {
		t.Fatalf("redacted again:\n%s\nwas\n%s", twice.Raw, once.Raw)
	}
	bad := cfg.RedactDeadLetter(change.DeadLetter{Raw: []byte(`{"data":{"ssn":"222-22-2222"`), Reason: `dms: decode: syntax: unparsed tail: "{\"ssn\":\"222-22-2222\""`})
	if strings.Contains(string(bad.Raw)+bad.Reason, "222-22-2222") || !strings.Contains(string(bad.Raw), `"bytes":28`) {
		t.Fatalf("unparsed record stored as %s (%s)", bad.Raw, bad.Reason)
	}
	if again := cfg.RedactDeadLetter(bad); string(again.Raw) != string(bad.Raw) || again.Reason != bad.Reason {
		t.Fatalf("redacted again: %s (%s)", again.Raw, again.Reason)
	}
	// Without column rules nothing changes.
	plain := DefaultConfig().RedactDeadLetter(change.DeadLetter{Raw: []byte(peopleUpdate)})
	if string(plain.Raw) != peopleUpdate {
		t.Fatalf("changed without rules: %s", plain.Raw)
	}
}

// A replayed redacted delete of a hashed key finds its row: the stored hash is the key the sink
// stores, and it is not hashed again.
func TestReplayedRedactedDeleteOfAHashedKey(t *testing.T) {
	t.Parallel()
	tables := map[string]TableConfig{"shop.users": {HashColumns: []string{"id"}, MaskColumns: []string{"name"}}}
	h := newHarness(t, t.TempDir(), withTables(tables), withConfig(func(c *Config) { c.HashKey = []byte("k") }), withMaintenance(nil))
	h.ctl("s0", 1, "users", "create-table", "id*:INT4 name:STRING")
	h.data("s0", 2, "users", change.OpInsert, []change.Column{col("id", "1"), col("name", "'a'")}, nil)
	h.data("s0", 3, "users", change.OpInsert, []change.Column{col("id", "2"), col("name", "'b'")}, nil)
	h.flush()
	del := `{"data":{"id":1,"name":"a"},"metadata":{"timestamp":"2025-01-01T00:00:00.000000Z","record-type":"data","operation":"delete","partition-key-type":"schema-table","schema-name":"shop","table-name":"users"}}`
	red := h.s.cfg.RedactDeadLetter(change.DeadLetter{Table: "shop.users", Raw: []byte(del)})
	ev := decodeRaw(t, string(red.Raw), 4)
	ev.Replay, ev.Redacted = true, dms.RedactedColumns(red.Raw)
	h.event(ev)
	h.flush()
	h.close()
	rows, _ := scanRows(t, h.cat, "users")
	two, _ := h.s.cfg.Rules("shop.users").Value("id", change.Value{Kind: change.KindNumber, Text: "2"})
	eq(t, rows, "id="+two.Text+",name=****")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters %+v", h.dlq.Letters())
	}
}
