package change

import "testing"

func TestMayChangeKey(t *testing.T) {
	t.Parallel()
	num := func(s string) Value { return Value{Kind: KindNumber, Text: s} }
	str := func(s string) Value { return Value{Kind: KindString, Text: s} }
	after := []Column{{"id", num("1")}, {"name", str("x")}}
	for _, c := range []struct {
		name   string
		op     Op
		before []Column
		want   bool
	}{
		{"pk-only before-image, same key", OpUpdate, []Column{{"id", num("1")}}, false},
		{"pk-only before-image, other key", OpUpdate, []Column{{"id", num("2")}}, true},
		{"empty before-image", OpUpdate, nil, false},
		{"before-image column absent from the after-image", OpUpdate, []Column{{"tenant", num("7")}}, true},
		{"full before-image, a changed column", OpUpdate, []Column{{"id", num("1")}, {"name", str("y")}}, true},
		{"full before-image, nothing changed", OpUpdate, []Column{{"id", num("1")}, {"name", str("x")}}, false},
		{"same text, other kind", OpUpdate, []Column{{"id", str("1")}}, true},
		{"full before-image in another order, nothing changed", OpUpdate, []Column{{"name", str("x")}, {"id", num("1")}}, false},
		{"full before-image in another order, a changed column", OpUpdate, []Column{{"name", str("x")}, {"id", num("2")}}, true},
		{"not an update", OpDelete, []Column{{"id", num("2")}}, false},
	} {
		ev := &Event{Op: c.op, Columns: after, Before: c.before}
		if got := MayChangeKey(ev); got != c.want {
			t.Errorf("%s: MayChangeKey = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNatCompare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"9", "10", -1}, {"mysql-bin.000024:9812:0", "mysql-bin.000024:10001:0", -1},
		{"mysql-bin.000025:1", "mysql-bin.000024:99", 1}, {"007", "7", 0}, {"a", "ab", -1}, {"00000002/7C007178", "00000002/7C007178", 0},
		{"00000002/03523E78.2.00000002/03523E78", "00000002/0352A2F7.4.00000002/0352A2F7", -1}, // PostgreSQL LSNs are hex
		{"0000002a:00000130:0004", "0000002B:00000010:0001", -1}, {"45655", "45727", -1},
	} {
		if got := NatCompare(c.a, c.b); got != c.want {
			t.Errorf("NatCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestSourcePosEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	p := SourcePos{CommitTS: "2025-06-01T00:00:01.000000Z", TxID: "7|\"x", TxRecord: "3", Position: "mysql-bin.000024:9812:0"}
	if got := DecodeSourcePos(p.Encode()); got != p {
		t.Fatalf("round trip %+v, want %+v", got, p)
	}
	var z SourcePos
	if z.Encode() != "" || DecodeSourcePos("") != z || DecodeSourcePos("not json") != z {
		t.Fatal("the zero position does not encode as the empty string")
	}
}

func TestRecordIdentity(t *testing.T) {
	t.Parallel()
	full := Metadata{TransactionID: "1139", TransactionRecordID: "3", CommitTimestamp: "2024-07-29T00:58:44.000000Z"}
	for _, c := range []struct {
		name string
		op   Op
		meta func(m *Metadata)
		want string
	}{
		{"insert with transaction details", OpInsert, func(*Metadata) {}, "2024-07-29T00:58:44.000000Z/1139/3"},
		{"update and delete too", OpDelete, func(*Metadata) {}, "2024-07-29T00:58:44.000000Z/1139/3"},
		{"plain CDC: transaction-id only", OpInsert, func(m *Metadata) { m.TransactionRecordID, m.CommitTimestamp = "", "" }, ""},
		{"no commit-timestamp", OpInsert, func(m *Metadata) { m.CommitTimestamp = "" }, ""},
		{"no transaction-id", OpInsert, func(m *Metadata) { m.TransactionID = "" }, ""},
		{"load records carry none (and never count)", OpLoad, func(*Metadata) {}, ""},
		{"control", OpControl, func(*Metadata) {}, ""},
	} {
		m := full
		c.meta(&m)
		if got := RecordIdentity(&Event{Op: c.op, Meta: m}); got != c.want {
			t.Errorf("%s: RecordIdentity = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestChangesKey(t *testing.T) {
	t.Parallel()
	num := func(n, v string) Column { return Column{Name: n, Value: Value{Kind: KindNumber, Text: v}} }
	up := func(after, before []Column) *Event { return &Event{Op: OpUpdate, Columns: after, Before: before} }
	key := []string{"id"}
	cases := []struct {
		name string
		ev   *Event
		want bool
	}{
		{"full before-image, key kept", up([]Column{num("id", "1"), num("v", "2")}, []Column{num("id", "1"), num("v", "1")}), false},
		{"full before-image, key changed", up([]Column{num("id", "2"), num("v", "1")}, []Column{num("id", "1"), num("v", "1")}), true},
		{"pk-only before-image of a kept key", up([]Column{num("id", "1")}, nil), false},
		{"pk-only before-image, key changed", up([]Column{num("id", "2")}, []Column{num("id", "1")}), true},
		{"before-image without the key column", up([]Column{num("id", "1"), num("v", "2")}, []Column{num("v", "1")}), false},
		{"not an update", &Event{Op: OpInsert, Columns: []Column{num("id", "1")}, Before: []Column{num("id", "2")}}, false},
	}
	for _, c := range cases {
		if got := ChangesKey(c.ev, key); got != c.want {
			t.Errorf("%s: ChangesKey = %v, want %v", c.name, got, c.want)
		}
	}
	if !MayChangeKey(cases[0].ev) {
		t.Error("MayChangeKey of a full before-image that changed a column: want true (it cannot know the key)")
	}
	composite := up([]Column{num("a", "1"), num("b", "3")}, []Column{num("a", "1"), num("b", "2")})
	if !ChangesKey(composite, []string{"a", "b"}) || ChangesKey(composite, []string{"a"}) {
		t.Error("composite key: only a change of one of its columns is a key change")
	}
}
