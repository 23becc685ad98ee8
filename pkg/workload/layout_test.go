package workload

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

func TestParseLayout(t *testing.T) {
	for _, l := range Layouts() {
		got, err := ParseLayout(l.String())
		if err != nil || got != l {
			t.Errorf("ParseLayout(%q) = %v, %v", l.String(), got, err)
		}
	}
	if LayoutTable != 0 || LayoutTable.String() != "table" || LayoutDMSDefault.String() != "dms-default" || LayoutPrimaryKey.String() != "primary-key" {
		t.Fatal("layout names or zero value changed")
	}
	var l Layout
	if err := l.UnmarshalText([]byte("primary-key")); err != nil || l != LayoutPrimaryKey {
		t.Fatalf("UnmarshalText: %v, %v", l, err)
	}
	if b, err := LayoutDMSDefault.MarshalText(); err != nil || string(b) != "dms-default" {
		t.Fatalf("MarshalText: %s, %v", b, err)
	}
	if _, err := Layout(9).MarshalText(); err == nil || l.UnmarshalText([]byte("x")) == nil {
		t.Fatal("unknown layout marshals or unmarshals")
	}
	if _, err := ParseLayout("shard"); err == nil {
		t.Fatal("unknown layout accepted")
	}
	if err := (Config{Layout: 7}).Validate(); err == nil {
		t.Fatal("Config with an unknown layout validates")
	}
}

// wantPartition is the partition a data record must have under layout l, per dms-format.md §6
// and §8, decided from the record alone: partition-key-type, and the Kinesis partition key.
func wantPartition(l Layout, table, op string, data map[string]any) (string, string) {
	keys := map[string][]string{
		"shop.customers": {"id"}, "shop.order_items": {"order_id", "line_no"}, "shop.types": {"id"},
		"shop.promotions": {"id"}, "shop.sessions": {"sid"},
	}[table]
	byKey := false
	switch l {
	case LayoutTable:
		byKey = table == "shop.order_items"
	case LayoutDMSDefault:
		byKey = op == "load" && keys != nil
	case LayoutPrimaryKey:
		byKey = keys != nil
	}
	if !byKey {
		return "schema-table", table
	}
	pk := table
	for _, k := range keys {
		pk += fmt.Sprintf(".%v", data[k])
	}
	return "primary-key", pk
}

func TestLayoutPartitionKeys(t *testing.T) {
	const task = "TASKID0000000000000000000A"
	for _, l := range Layouts() {
		t.Run(l.String(), func(t *testing.T) {
			cfg := Config{Seed: 21, Changes: 3000, LoadRows: 60, TaskID: task, Layout: l, SchemaChanges: true,
				Reload: Reload{Table: Customers, At: 1500, Deletes: 5, Updates: 5}}
			dec := dms.NewDecoder(dms.DefaultConfig())
			seen := map[string]int{}
			i := -1
			for m := range New(cfg).Messages() {
				i++
				if m.DeadLetter != "" {
					continue
				}
				r := parse(t, m)
				md := r.Metadata
				var ev change.Event
				if err := dec.Decode(m.Data, &ev); err != nil {
					t.Fatalf("decode: %v\n%s", err, m.Data)
				}
				if md["record-type"] == "control" {
					// The five initial create-table records go by the task's table-level key in
					// every layout; later control records (schema changes, the reload) by
					// "shop.<table>" in the table layout only.
					want := task + "." + m.Table
					switch {
					case m.Table == ".awsdms_apply_exceptions":
						want = task
					case l == LayoutTable && i >= 5:
						want = m.Table
					}
					if m.PartitionKey != want || md["partition-key-type"] != "task-id" || md["partition-key-value"] != task {
						t.Fatalf("control record %s %s: partition key %q (want %q), metadata %v", m.Table, m.Op, m.PartitionKey, want, md)
					}
					seen[m.Table+" "+m.Op]++
					continue
				}
				op := md["operation"].(string)
				if m.Keyless != (m.Table == Schema+"."+Events) {
					t.Fatalf("%s %s: Keyless %v", m.Table, op, m.Keyless)
				}
				wantType, wantKey := wantPartition(l, m.Table, op, r.Data)
				if md["partition-key-type"] != wantType || m.PartitionKey != wantKey {
					t.Fatalf("%s %s: partition %v %q, want %s %q\n%s", m.Table, op, md["partition-key-type"], m.PartitionKey, wantType, wantKey, m.Data)
				}
				pkv, hasValue := md["partition-key-value"]
				if (wantType == "primary-key") != hasValue || (hasValue && pkv != wantKey) {
					t.Fatalf("%s %s: partition-key-value %v for %s partitioning", m.Table, op, pkv, wantType)
				}
				seen[wantType+" "+op]++
			}
			// Each layout shows the partition kinds it is meant to.
			want := map[Layout][]string{
				LayoutTable:      {"schema-table load", "schema-table update", "primary-key load", "primary-key update"},
				LayoutDMSDefault: {"primary-key load", "schema-table load", "schema-table insert", "schema-table update", "schema-table delete"},
				LayoutPrimaryKey: {"primary-key load", "primary-key insert", "primary-key update", "primary-key delete", "schema-table insert"},
			}[l]
			for _, k := range want {
				if seen[k] == 0 {
					t.Errorf("no %s record", k)
				}
			}
			if l == LayoutDMSDefault && (seen["primary-key update"] > 0 || seen["primary-key insert"] > 0) {
				t.Errorf("dms-default wrote CDC by primary key: %v", seen)
			}
			if seen["shop.customers add-column"] == 0 || seen["shop.customers create-table"] != 2 {
				t.Errorf("control records missing: %v", seen)
			}
		})
	}
}

func TestLayoutsShareTheSourceChanges(t *testing.T) {
	base := Config{Seed: 22, Changes: 3000, LoadRows: 80}
	var ops []string
	var exp Expected
	for i, l := range Layouts() {
		cfg := base
		cfg.Layout = l
		var got []string
		msgs := collect(New(cfg))
		for _, m := range msgs {
			got = append(got, opKey(m))
		}
		e := expected(t, cfg)
		if i == 0 {
			ops, exp = got, e
		} else {
			if !reflect.DeepEqual(got, ops) {
				t.Errorf("%s: operation sequence differs from the table layout's", l)
			}
			if !reflect.DeepEqual(e, exp) {
				t.Errorf("%s: expected state differs from the table layout's", l)
			}
		}
		// Applied in stream order, the records give the expected state.
		state := replay(t, msgs, false)
		for _, et := range e.Tables {
			want, err := ExpectedTableOf(et.Name, false, state[et.Source])
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(et, want) {
				t.Errorf("%s: %s: expected state differs from the replayed records", l, et.Source)
			}
		}
	}
}

func TestPrimaryKeyLayoutMovesKeyChangesToTheNewKey(t *testing.T) {
	ranges := EvenHashRanges(4)
	msgs := collect(New(Config{Seed: 23, Changes: 4000, LoadRows: 100, Layout: LayoutPrimaryKey}))
	// lastKey is the partition key of the latest record of each customer id.
	lastKey := map[string]string{}
	changes, moved := 0, 0
	for _, m := range msgs {
		if m.Table != "shop.customers" || m.Op == "create-table" {
			continue
		}
		r := parse(t, m)
		id := fmt.Sprint(r.Data["id"])
		if want := "shop.customers." + id; m.PartitionKey != want {
			t.Fatalf("%s record of customer %s under %q, want %q", m.Op, id, m.PartitionKey, want)
		}
		if m.KeyChange {
			changes++
			old := fmt.Sprint(r.BeforeImage["id"])
			if old == id || !strings.HasPrefix(lastKey[old], "shop.customers.") {
				t.Fatalf("key change %s -> %s without earlier records of the old key", old, id)
			}
			if m.OldPartitionKey != lastKey[old] {
				t.Fatalf("key change %s -> %s: OldPartitionKey %q, want the old key's %q", old, id, m.OldPartitionKey, lastKey[old])
			}
			if ShardOf(lastKey[old], ranges) != ShardOf(m.PartitionKey, ranges) {
				moved++ // the old key's records sit on another shard
			}
		}
		if !m.KeyChange && m.OldPartitionKey != "" {
			t.Fatalf("%s record of customer %s has OldPartitionKey %q", m.Op, id, m.OldPartitionKey)
		}
		lastKey[id] = m.PartitionKey
	}
	if changes == 0 || moved == 0 {
		t.Fatalf("%d key changes, %d of them to another of 4 shards", changes, moved)
	}
	t.Logf("%d key changes, %d to another shard", changes, moved)
}
