package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// expected is the expected state of cfg's workload.
func expected(t *testing.T, cfg Config) Expected {
	t.Helper()
	exp, err := New(cfg).Expected()
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

func collect(g *Generator) []Message {
	var out []Message
	for m := range g.Messages() {
		out = append(out, m)
	}
	return out
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Seed: 7, Changes: 500, LoadRows: 50}
	a, b := collect(New(cfg)), collect(New(cfg))
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %d vs %d", len(a), len(b))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatalf("message %d differs:\n%s\n%s", i, a[i].Data, b[i].Data)
		}
	}
	// The same generator iterated twice yields the same sequence too.
	g := New(cfg)
	if c := collect(g); !reflect.DeepEqual(a, c) {
		t.Fatal("second iteration of one generator differs")
	}
	if !reflect.DeepEqual(expected(t, cfg), expected(t, cfg)) {
		t.Fatal("expected state is not deterministic")
	}
	other := collect(New(Config{Seed: 8, Changes: 500, LoadRows: 50}))
	if reflect.DeepEqual(a, other) {
		t.Fatal("different seeds gave the same messages")
	}
	wantLen := 5 + 4*50 + 500
	if len(a) != wantLen {
		t.Fatalf("got %d messages, want %d (5 control + load + changes)", len(a), wantLen)
	}
}

// record is a message decoded with encoding/json, independently of pkg/dms.
type record struct {
	Data        map[string]any `json:"data"`
	BeforeImage map[string]any `json:"before-image"`
	Control     *struct {
		TableDef struct {
			Columns    map[string]map[string]any `json:"columns"`
			PrimaryKey []string                  `json:"primary-key"`
		} `json:"table-def"`
	} `json:"control"`
	Metadata map[string]any `json:"metadata"`
	raw      map[string]json.RawMessage
}

func parse(t *testing.T, m Message) record {
	t.Helper()
	var r record
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("message is not valid JSON: %v\n%s", err, m.Data)
	}
	if dec.More() {
		t.Fatalf("trailing data after the JSON object:\n%s", m.Data)
	}
	if err := json.Unmarshal(m.Data, &r.raw); err != nil {
		t.Fatal(err)
	}
	return r
}

func toValue(v any) change.Value {
	switch v := v.(type) {
	case nil:
		return change.Value{Kind: change.KindNull}
	case json.Number:
		return change.Value{Kind: change.KindNumber, Text: v.String()}
	case string:
		return change.Value{Kind: change.KindString, Text: v}
	case bool:
		return change.Value{Kind: change.KindBool, Text: fmt.Sprint(v)}
	}
	panic(fmt.Sprintf("unexpected JSON value %T", v))
}

// replay applies the messages to a minimal model of the target tables: upsert by key, delete by
// key, delete the before-image key of a key change, append for keyless tables. Absent columns
// are NULL, except in updates with keepAbsent: there they keep the value of the row the update
// replaces (the before-image key's row for a key change), as sink.absent_columns keep does.
func replay(t *testing.T, msgs []Message, keepAbsent bool) map[string][][]change.Value {
	t.Helper()
	defs := TableDefs()
	keyed := map[string]map[string][]change.Value{}
	keyless := map[string][][]change.Value{}
	keyText := func(def change.TableDef, get func(string) (any, bool)) string {
		var parts []string
		for _, k := range def.PrimaryKey {
			v, ok := get(k)
			if !ok {
				t.Fatalf("key column %s missing", k)
			}
			parts = append(parts, toValue(v).Text)
		}
		return strings.Join(parts, "|")
	}
	for _, m := range msgs {
		r := parse(t, m)
		if r.Metadata["record-type"] == "control" {
			continue
		}
		src := r.Metadata["schema-name"].(string) + "." + r.Metadata["table-name"].(string)
		def, ok := defs[src]
		if !ok {
			t.Fatalf("data record for unknown table %s", src)
		}
		row := make([]change.Value, len(def.Columns))
		for i, c := range def.Columns {
			row[i] = toValue(r.Data[c.Name])
		}
		for name := range r.Data {
			if !slices.ContainsFunc(def.Columns, func(c change.ColumnDef) bool { return c.Name == name }) {
				t.Fatalf("%s: unknown column %s", src, name)
			}
		}
		if len(def.PrimaryKey) == 0 {
			keyless[src] = append(keyless[src], row)
			continue
		}
		if keyed[src] == nil {
			keyed[src] = map[string][]change.Value{}
		}
		k := keyText(def, func(c string) (any, bool) { v, ok := r.Data[c]; return v, ok })
		switch op := r.Metadata["operation"]; op {
		case "load", "insert", "update":
			prev := k
			if len(r.BeforeImage) > 0 {
				prev = keyText(def, func(c string) (any, bool) { v, ok := r.BeforeImage[c]; return v, ok })
			}
			if old, ok := keyed[src][prev]; ok && keepAbsent && op == "update" {
				for i, c := range def.Columns {
					if _, ok := r.Data[c.Name]; !ok {
						row[i] = old[i]
					}
				}
			}
			delete(keyed[src], prev)
			keyed[src][k] = row
		case "delete":
			delete(keyed[src], k)
		default:
			t.Fatalf("unexpected operation %v", op)
		}
	}
	out := map[string][][]change.Value{}
	for src, rows := range keyed {
		for _, row := range rows {
			out[src] = append(out[src], row)
		}
	}
	for src, rows := range keyless {
		out[src] = rows
	}
	return out
}

func TestExpectedEqualsReplay(t *testing.T) {
	for _, cfg := range []Config{
		{Seed: 1, Changes: 3000, LoadRows: 100},
		{Seed: 2, Changes: 1000, LoadRows: 0},
		{Seed: 3, Changes: 0, LoadRows: 20, TimestampTZ: true},
	} {
		t.Run(fmt.Sprint(cfg.Seed), func(t *testing.T) {
			g := New(cfg)
			exp, err := g.Expected()
			if err != nil {
				t.Fatal(err)
			}
			if err := exp.Validate(); err != nil {
				t.Fatal(err)
			}
			state := replay(t, collect(g), false)
			if len(exp.Tables) != 4 {
				t.Fatalf("got %d expected tables", len(exp.Tables))
			}
			for _, et := range exp.Tables {
				want, err := ExpectedTableOf(et.Name, cfg.TimestampTZ, state[et.Source])
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(et, want) {
					t.Errorf("%s: expected state (%d rows) differs from the replayed messages (%d rows)", et.Source, len(et.Rows), len(want.Rows))
				}
			}
		})
	}
}

func TestExpectedJSONRoundTrip(t *testing.T) {
	exp, err := New(Config{Seed: 4, Changes: 200, LoadRows: 10}).Expected()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	var back Expected
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(exp, back) {
		t.Fatal("expected state does not survive a JSON round trip")
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	// Encode writes one row per line and reads back equal.
	var buf bytes.Buffer
	if err := exp.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("Encode wrote invalid JSON:\n%s", buf.String())
	}
	rowLines := 0
	for _, tb := range exp.Tables {
		rowLines += len(tb.Rows)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1+len(exp.Tables)+rowLines {
		t.Fatalf("Encode wrote %d lines, want %d", n, 1+len(exp.Tables)+rowLines)
	}
	dec, err := DecodeExpected(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(exp, dec) {
		t.Fatal("Encode/DecodeExpected round trip differs")
	}
	if _, err := DecodeExpected(strings.NewReader(`{"version":2}`)); err == nil {
		t.Fatal("wrong version accepted")
	}
	cust := back.Tables[0]
	if cust.Name != Customers || cust.Namespace != Schema || !reflect.DeepEqual(cust.Key, []string{"id"}) {
		t.Fatalf("customers table header: %+v", cust)
	}
	types := map[string]string{}
	for _, c := range back.Tables[3].Columns {
		types[c.Name] = c.Type
	}
	for col, want := range map[string]string{
		"c_uint8": "decimal(20, 0)", "c_num38": "decimal(38, 10)", "c_real4": "float",
		"c_int8": "long", "c_dt6": "timestamp", "c_blob": "binary", "c_time": "string",
	} {
		if types[col] != want {
			t.Errorf("types.%s: type %q, want %q", col, types[col], want)
		}
	}
	if len(back.Tables[2].Key) != 0 {
		t.Fatal("events must be keyless")
	}
}

// opKey names what a message does: table and operation, "pk-change" for a key change.
func opKey(m Message) string {
	op := m.Op
	if m.KeyChange {
		op = "pk-change"
	}
	return m.Table + " " + op
}

func TestEveryTableGetsItsOperations(t *testing.T) {
	msgs := collect(New(Config{Seed: 11, Changes: 4000, LoadRows: 100}))
	counts := map[string]int{}
	for _, m := range msgs {
		counts[opKey(m)]++
	}
	want := []string{
		"shop.customers load", "shop.customers insert", "shop.customers update", "shop.customers delete", "shop.customers pk-change",
		"shop.order_items load", "shop.order_items insert", "shop.order_items update", "shop.order_items delete",
		"shop.events load", "shop.events insert",
		"shop.types load", "shop.types insert", "shop.types update", "shop.types delete",
		"shop.customers create-table", "shop.order_items create-table", "shop.events create-table", "shop.types create-table",
		".awsdms_apply_exceptions create-table",
	}
	for _, k := range want {
		if counts[k] == 0 {
			t.Errorf("no %q records", k)
		}
	}
	for _, k := range []string{"shop.order_items pk-change", "shop.types pk-change", "shop.events update", "shop.events delete"} {
		if counts[k] != 0 {
			t.Errorf("%d unexpected %q records", counts[k], k)
		}
	}
	t.Logf("counts: %v", counts)
}

func TestRecordShape(t *testing.T) {
	g := New(Config{Seed: 5, Changes: 2000, LoadRows: 50, TaskID: "TASKID0000000000000000000A"})
	var pretty, compact, details, noDetails, tfBool, jsonBool, padded, absentNote, pkChanges int
	var prevTx string
	i := -1
	for m := range g.Messages() {
		i++
		r := parse(t, m)
		md := r.Metadata
		if bytes.HasSuffix(m.Data, []byte("\n")) {
			compact++
			if bytes.Count(m.Data, []byte("\n")) != 1 {
				t.Fatalf("json-unformatted record spans lines:\n%s", m.Data)
			}
		} else {
			pretty++
			if !bytes.Contains(m.Data, []byte("\n\t\"metadata\":\t{\n\t\t\"timestamp\":\t\"")) {
				t.Fatalf("pretty record is not cJSON-formatted:\n%s", m.Data)
			}
		}
		ts, _ := md["timestamp"].(string)
		if len(ts) != len("2025-06-01T00:00:00.000000Z") || !strings.HasSuffix(ts, "Z") || ts[19] != '.' {
			t.Fatalf("bad timestamp %q", ts)
		}
		if i < 5 {
			if md["record-type"] != "control" || md["operation"] != "create-table" || md["partition-key-type"] != "task-id" ||
				md["partition-key-value"] != "TASKID0000000000000000000A" || r.Control == nil {
				t.Fatalf("control record %d: %s", i, m.Data)
			}
			if !strings.HasPrefix(m.PartitionKey, "TASKID0000000000000000000A") {
				t.Fatalf("control partition key %q", m.PartitionKey)
			}
			if i == 0 && (md["schema-name"] != "" || md["table-name"] != "awsdms_apply_exceptions") {
				t.Fatalf("first control record is not for awsdms_apply_exceptions: %s", m.Data)
			}
			continue
		}
		if _, ok := r.raw["control"]; ok {
			t.Fatalf("data record with control: %s", m.Data)
		}
		op := md["operation"].(string)
		_, hasTx := md["transaction-id"]
		if (op == "load") == hasTx {
			t.Fatalf("transaction-id presence wrong for %s: %s", op, m.Data)
		}
		if _, ok := md["transaction-record-id"]; ok {
			details++
			for _, f := range []string{"commit-timestamp", "stream-position"} {
				if _, ok := md[f]; !ok {
					t.Fatalf("details without %s: %s", f, m.Data)
				}
			}
			if prevTx != "" && md["prev-transaction-id"].(json.Number).String() != prevTx {
				t.Fatalf("prev-transaction-id %v, want %s", md["prev-transaction-id"], prevTx)
			}
		} else if hasTx {
			noDetails++
		}
		if hasTx {
			prevTx = md["transaction-id"].(json.Number).String()
		}
		_, hasBI := r.raw["before-image"]
		if (op == "update") != hasBI {
			t.Fatalf("before-image presence wrong for %s: %s", op, m.Data)
		}
		if len(r.BeforeImage) > 0 {
			pkChanges++
			if m.Table != "shop.customers" || !m.KeyChange || r.BeforeImage["id"] == r.Data["id"] {
				t.Fatalf("bad key change: %s", m.Data)
			}
		}
		switch m.Table {
		case "shop.order_items":
			want := fmt.Sprintf("shop.order_items.%v.%v", r.Data["order_id"], r.Data["line_no"])
			if md["partition-key-type"] != "primary-key" || md["partition-key-value"] != want || m.PartitionKey != want {
				t.Fatalf("order_items partition key %q / %v, want %s", m.PartitionKey, md["partition-key-value"], want)
			}
			if _, ok := r.Data["note"]; !ok {
				absentNote++
			}
		default:
			if md["partition-key-type"] != "schema-table" || m.PartitionKey != m.Table {
				t.Fatalf("partition key %q for %s", m.PartitionKey, m.Table)
			}
			if _, ok := md["partition-key-value"]; ok {
				t.Fatalf("schema-table record with partition-key-value: %s", m.Data)
			}
		}
		if m.Table == "shop.types" {
			switch r.Data["c_bool"].(type) {
			case bool:
				jsonBool++
			case string:
				tfBool++
			}
			if b, ok := r.Data["c_blob"].(string); ok && (!strings.HasPrefix(b, "0x") || strings.ToUpper(b[2:]) != b[2:]) {
				t.Fatalf("blob %q", b)
			}
		}
		if b, ok := r.Data["balance"].(json.Number); ok && strings.HasSuffix(string(b), "0000") {
			padded++
		}
		// Every column of the table-def is present except a NULL note.
		if op != "delete" || m.Table != "shop.customers" {
			for _, c := range TableDefs()[m.Table].Columns {
				if _, ok := r.Data[c.Name]; !ok && c.Name != "note" {
					t.Fatalf("column %s absent: %s", c.Name, m.Data)
				}
			}
		}
	}
	for name, n := range map[string]int{
		"pretty": pretty, "compact": compact, "with details": details, "without details": noDetails,
		"t/f boolean": tfBool, "JSON boolean": jsonBool, "padded NUMERIC": padded, "absent note": absentNote,
		"key changes": pkChanges,
	} {
		if n == 0 {
			t.Errorf("no %s records", name)
		}
	}
}

func TestDMSDecoderAcceptsEveryRecord(t *testing.T) {
	g := New(Config{Seed: 9, Changes: 3000, LoadRows: 100})
	dec := dms.NewDecoder(dms.DefaultConfig())
	defs := TableDefs()
	seenDefs := 0
	for m := range g.Messages() {
		var ev change.Event
		if err := dec.Decode(m.Data, &ev); err != nil {
			t.Fatalf("decode: %v\n%s", err, m.Data)
		}
		if ev.Op == change.OpControl {
			if ev.Table == "awsdms_apply_exceptions" {
				continue
			}
			want := defs[ev.Schema+"."+ev.Table]
			if !reflect.DeepEqual(*ev.Control.TableDef, want) {
				t.Fatalf("table-def of %s.%s:\n got %+v\nwant %+v", ev.Schema, ev.Table, *ev.Control.TableDef, want)
			}
			seenDefs++
			continue
		}
		def := defs[ev.Schema+"."+ev.Table]
		types, err := IcebergTypes(def.Columns, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ev.Columns {
			i := slices.IndexFunc(def.Columns, func(d change.ColumnDef) bool { return d.Name == c.Name })
			if _, err := dms.Convert(types[i], c.Value); err != nil {
				t.Fatalf("%s.%s: %v\n%s", ev.Schema, ev.Table, err, m.Data)
			}
		}
		if ev.Op == change.OpUpdate && m.KeyChange && len(ev.Before) != 1 {
			t.Fatalf("key change without before-image key: %s", m.Data)
		}
	}
	if seenDefs != 4 {
		t.Fatalf("saw %d table-defs", seenDefs)
	}
}

func TestTableConfigsEqualTableDefs(t *testing.T) {
	defs := TableDefs()
	cfgs := TableConfigs()
	if len(cfgs) != 4 || len(defs) != 4 {
		t.Fatalf("%d configs, %d defs", len(cfgs), len(defs))
	}
	for src, tc := range cfgs {
		d := defs[src]
		if !slices.Equal(tc.PrimaryKey, d.PrimaryKey) {
			t.Errorf("%s: key %v vs %v", src, tc.PrimaryKey, d.PrimaryKey)
		}
		if len(tc.Columns) != len(d.Columns) {
			t.Fatalf("%s: %d columns vs %d", src, len(tc.Columns), len(d.Columns))
		}
		for i, c := range tc.Columns {
			dc := d.Columns[i]
			if c.Name != dc.Name || c.Type != dc.Type || c.Length != dc.Length || c.Precision != dc.Precision ||
				c.Scale != dc.Scale || c.Nullable == nil || *c.Nullable != dc.Nullable {
				t.Errorf("%s column %d: %+v vs %+v", src, i, c, dc)
			}
		}
	}
	if cfgs["shop.events"].PrimaryKey != nil {
		t.Error("events must have no primary key")
	}
}

func TestStreamIsEndlessAndBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := New(Config{Seed: 3, LoadRows: 20})
	n := 0
	for m := range g.Stream(ctx) {
		if !json.Valid(m.Data) {
			t.Fatalf("invalid JSON: %s", m.Data)
		}
		n++
		if n == 30000 {
			cancel()
		}
		if n > 30001 {
			t.Fatal("stream did not stop after cancel")
		}
	}
	if n != 30000 {
		t.Fatalf("got %d messages", n)
	}
	// Stopping early by breaking out of the loop works too.
	k := 0
	for range New(Config{Seed: 3}).Stream(context.Background()) {
		if k++; k == 10 {
			break
		}
	}
	// The model stays bounded: run the endless model directly and check table sizes.
	r := newRun(g.cfg, true)
	i := 0
	r.produce(context.Background(), func(Message) bool { i++; return i < 50000 })
	for _, tb := range r.tables {
		if tb.def.key != nil && tb.size() > 10*50 {
			t.Errorf("%s grew to %d rows", tb.def.name, tb.size())
		}
		if len(tb.keyless) != 0 {
			t.Errorf("%s keeps keyless rows in endless mode", tb.def.name)
		}
		if tb.orders != nil && len(tb.orders) > tb.size() {
			t.Errorf("order index has %d entries for %d rows", len(tb.orders), tb.size())
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Changes: -1}).Validate(); err == nil {
		t.Error("negative Changes accepted")
	}
	if err := (Config{LoadRows: -1}).Validate(); err == nil {
		t.Error("negative LoadRows accepted")
	}
	if got := New(Config{Seed: 1}).Config().TaskID; len(got) != 26 {
		t.Errorf("default task id %q", got)
	}
}

func TestEncodeLikeCJSON(t *testing.T) {
	o := &object{}
	o.set("data", (&object{}).set("a", num(1)).set("s", str("x\"\\\n\t\u0001é/")))
	o.set("before-image", &object{})
	o.set("metadata", (&object{}).set("pk", []string{"a", "b"}).set("b", true))
	got := string(encode(nil, o, true))
	want := "{\n\t\"data\":\t{\n\t\t\"a\":\t1,\n\t\t\"s\":\t\"x\\\"\\\\\\n\\t\\u0001é/\"\n\t},\n\t\"before-image\":\t{\n\t},\n\t\"metadata\":\t{\n\t\t\"pk\":\t[\"a\", \"b\"],\n\t\t\"b\":\ttrue\n\t}\n}"
	if got != want {
		t.Fatalf("pretty:\n%s\nwant:\n%s", got, want)
	}
	got = string(encode(nil, o, false))
	want = "{\"data\":{\"a\":1,\"s\":\"x\\\"\\\\\\n\\t\\u0001é/\"},\"before-image\":{},\"metadata\":{\"pk\":[\"a\",\"b\"],\"b\":true}}\n"
	if got != want {
		t.Fatalf("compact:\n%s\nwant:\n%s", got, want)
	}
}

// Config.Resends: the marked copies repeat, byte for byte and with the same partition key, an
// earlier insert of the keyless table that carries the transaction details, and the expected
// state is the stream's without them.
func TestResendsRepeatKeylessInsertsAndKeepTheExpectedState(t *testing.T) {
	cfg := Config{Seed: 4, Changes: 2000, LoadRows: 50, Resends: 30}
	g := New(cfg)
	msgs := collect(g)
	sent := map[string]bool{}
	var originals []Message
	resends := 0
	for _, m := range msgs {
		if !m.Resend {
			sent[m.PartitionKey+"\x00"+string(m.Data)] = true
			originals = append(originals, m)
			continue
		}
		resends++
		if !sent[m.PartitionKey+"\x00"+string(m.Data)] {
			t.Fatalf("re-send of a record not sent before: %s", m.Data)
		}
		r := parse(t, m)
		if m.Table != Schema+"."+Events || m.Op != "insert" || r.Metadata["transaction-record-id"] == nil || r.Metadata["commit-timestamp"] == nil {
			t.Fatalf("re-sent %s %s, want an insert of %s with transaction details: %s", m.Table, m.Op, Events, m.Data)
		}
	}
	if resends != cfg.Resends {
		t.Fatalf("%d re-sends, want %d", resends, cfg.Resends)
	}
	exp, err := g.Expected()
	if err != nil {
		t.Fatal(err)
	}
	state := replay(t, originals, false)
	for _, et := range exp.Tables {
		want, err := ExpectedTableOf(et.Name, cfg.TimestampTZ, state[et.Source])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(et, want) {
			t.Errorf("%s: expected state (%d rows) differs from the stream without its re-sends (%d rows)", et.Source, len(et.Rows), len(want.Rows))
		}
	}
	for _, bad := range []Config{{Resends: -1}, {Changes: 10, Resends: 1, SchemaChanges: true}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
