package workload

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

func TestReloadValidate(t *testing.T) {
	for _, c := range []Config{
		{Changes: 10, Reload: Reload{At: 3}},
		{Changes: 10, Reload: Reload{Table: "nope"}},
		{Changes: 10, Reload: Reload{Table: Customers, At: 11}},
		{Changes: 10, Reload: Reload{Table: Customers, At: -1}},
		{Changes: 10, Reload: Reload{Table: Customers, Deletes: -1}},
		{Changes: 10, Reload: Reload{Table: Events, Updates: 1}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validates", c.Reload)
		}
	}
	if err := (Config{Changes: 10, Reload: Reload{Table: Events, At: 10, Deletes: 3}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// reloadRunOf runs cfg's finite model and returns its messages and the model.
func reloadRunOf(cfg Config) ([]Message, *run) {
	r := newRun(New(cfg).Config(), false)
	var msgs []Message
	r.produce(context.Background(), func(m Message) bool { msgs = append(msgs, m); return true })
	return msgs, r
}

// withoutEarlierRecords drops the data records of table before the reload's create-table:
// applying the rest in order is what replacing the table at the reload does.
func withoutEarlierRecords(msgs []Message, table string) []Message {
	start := slices.IndexFunc(msgs, func(m Message) bool { return m.Reload && m.Op == "create-table" })
	var out []Message
	for i, m := range msgs {
		if i < start && m.Table == table && m.Op != "create-table" {
			continue
		}
		out = append(out, m)
	}
	return out
}

func TestReloadReplacesTheTable(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		table string
	}{
		{Config{Seed: 41, Changes: 3000, LoadRows: 100, Layout: LayoutDMSDefault,
			Reload: Reload{Table: Customers, At: 1200, Deletes: 20, Updates: 15}}, "shop.customers"},
		{Config{Seed: 42, Changes: 2000, LoadRows: 60, Layout: LayoutPrimaryKey,
			Reload: Reload{Table: OrderItems, At: 900, Deletes: 10, Updates: 10}}, "shop.order_items"},
		{Config{Seed: 43, Changes: 2000, LoadRows: 60, Reload: Reload{Table: Events, At: 1000, Deletes: 12}}, "shop.events"},
		{Config{Seed: 44, Changes: 500, LoadRows: 40, Layout: LayoutDMSDefault, PartialUpdates: true,
			Reload: Reload{Table: Types, At: 500, Deletes: 5, Updates: 5}}, "shop.types"},
	} {
		t.Run(tc.table, func(t *testing.T) {
			msgs, r := reloadRunOf(tc.cfg)
			if len(r.rl.deleted) != tc.cfg.Reload.Deletes {
				t.Fatalf("%d rows deleted during the outage, want %d", len(r.rl.deleted), tc.cfg.Reload.Deletes)
			}
			checkReloadShape(t, msgs, tc.table, r.rl.size, tc.cfg.Reload.At < tc.cfg.Changes)
			exp := expected(t, tc.cfg)
			state := func(msgs []Message) map[string]ExpectedTable {
				rows := replay(t, msgs, tc.cfg.PartialUpdates)
				out := map[string]ExpectedTable{}
				for _, et := range exp.Tables {
					want, err := ExpectedTableOf(et.Name, false, rows[et.Source])
					if err != nil {
						t.Fatal(err)
					}
					out[et.Source] = want
				}
				return out
			}
			// Replacing the table at the reload gives the expected state.
			replaced := state(withoutEarlierRecords(msgs, tc.table))
			for _, et := range exp.Tables {
				if !reflect.DeepEqual(et, replaced[et.Source]) {
					t.Errorf("%s: expected state (%d rows) differs from the reloaded replay (%d rows)", et.Source, len(et.Rows), len(replaced[et.Source].Rows))
				}
			}
			// Upserting the reload's rows instead leaves rows deleted during the outage behind
			// (the stale rows the service must not keep), and only those.
			naive := state(msgs)[tc.table]
			var want ExpectedTable
			for _, et := range exp.Tables {
				if et.Source == tc.table {
					want = et
				}
			}
			extra := extraRows(naive.Rows, want.Rows)
			if len(extra) == 0 {
				t.Fatal("upserting the reload gives the expected state: the outage deleted nothing visible")
			}
			keyIdx := want.KeyIndexes()
			if keyIdx == nil {
				// Keyless: appending the reload duplicates every row it re-sends, and keeps the
				// deleted ones.
				def := r.table(tc.cfg.Reload.Table).def
				types, err := IcebergTypes(def.columns, false)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range r.rl.deleted {
					row, err := RenderRow(types, def.columns, d)
					if err != nil {
						t.Fatal(err)
					}
					if len(extraRows([][]*string{row}, extra)) != 0 || len(extraRows([][]*string{row}, want.Rows)) == 0 {
						t.Errorf("row %s deleted during the outage: not left behind, or expected", renderedText(row))
					}
				}
			}
			deleted := map[string]bool{}
			for _, d := range r.rl.deleted {
				deleted[valuesText(d)] = true
			}
			for _, row := range extra {
				if keyIdx == nil {
					break
				}
				parts := make([]*string, len(keyIdx))
				for i, ki := range keyIdx {
					parts[i] = row[ki]
				}
				if k := renderedText(parts); !deleted[k] {
					t.Errorf("stale row %s was not deleted during the outage", k)
				}
			}
			t.Logf("%d rows deleted in the outage, %d left behind by an upserting replay", len(r.rl.deleted), len(extra))
		})
	}
}

// checkReloadShape checks the records of a reload of table: one create-table marked Reload and
// newer than the first, then only load records of the table (marked Reload, one per row it
// holds: wantLoads) until its load is done, interleaved with CDC of other tables, then CDC of
// the table again if cdcAfter.
func checkReloadShape(t *testing.T, msgs []Message, table string, wantLoads int, cdcAfter bool) {
	t.Helper()
	var creates []int
	lastLoad := -1
	var firstTS string
	for i, m := range msgs {
		if m.Table == table && m.Op == "create-table" {
			creates = append(creates, i)
			ts := fmt.Sprint(parse(t, m).Metadata["timestamp"])
			if firstTS == "" {
				firstTS = ts
			} else if ts <= firstTS || !m.Reload {
				t.Fatalf("reload create-table %s (Reload %v) not newer than the first (%s)", ts, m.Reload, firstTS)
			}
			continue
		}
		if m.Reload {
			if m.Table != table || m.Op != "load" || len(creates) != 2 {
				t.Fatalf("record %d: %s %s marked Reload", i, m.Table, m.Op)
			}
			lastLoad = i
		}
	}
	if len(creates) != 2 || lastLoad < 0 {
		t.Fatalf("%d create-table records of %s, want 2; last reload load record %d", len(creates), table, lastLoad)
	}
	loads, others, after := 0, 0, 0
	for i := creates[1] + 1; i < len(msgs); i++ {
		m := msgs[i]
		switch {
		case i <= lastLoad && m.Table == table:
			if !m.Reload {
				t.Fatalf("record %d: %s %s while the table loads", i, m.Table, m.Op)
			}
			loads++
		case i <= lastLoad:
			others++
		case m.Table == table && m.Op != "bad":
			after++
		}
	}
	if loads != wantLoads {
		t.Fatalf("reload: %d load records for %d rows", loads, wantLoads)
	}
	if loads == 0 || (cdcAfter && (others == 0 || after == 0)) {
		t.Fatalf("reload: %d load records, %d other records during it, %d changes of the table after it", loads, others, after)
	}
}

func valuesText(vs []change.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Text
	}
	return strings.Join(parts, "|")
}

func renderedText(row []*string) string {
	parts := make([]string, len(row))
	for i, v := range row {
		if v != nil {
			parts[i] = *v
		}
	}
	return strings.Join(parts, "|")
}

// extraRows returns the rows of got not in want (as multisets).
func extraRows(got, want [][]*string) [][]*string {
	n := map[string]int{}
	for _, r := range want {
		n[renderedText(r)]++
	}
	var out [][]*string
	for _, r := range got {
		k := renderedText(r)
		if n[k] > 0 {
			n[k]--
			continue
		}
		out = append(out, r)
	}
	return out
}

func TestReloadOfEveryLayoutKeepsTheSourceState(t *testing.T) {
	// The reload changes what the source holds (the outage), not what the layouts share.
	base := Config{Seed: 45, Changes: 1500, LoadRows: 50, Reload: Reload{Table: Customers, At: 700, Deletes: 8, Updates: 8}}
	var first Expected
	for i, l := range Layouts() {
		cfg := base
		cfg.Layout = l
		e := expected(t, cfg)
		if i == 0 {
			first = e
		} else if !reflect.DeepEqual(e, first) {
			t.Errorf("%s: expected state differs from the table layout's", l)
		}
	}
	// An endless stream reloads a keyed table too, and skips the keyless one.
	for _, table := range []string{Customers, Events} {
		ctx, cancel := context.WithCancel(context.Background())
		reloads := 0
		n := 0
		for m := range New(Config{Seed: 46, LoadRows: 20, Reload: Reload{Table: table, At: 0, Deletes: 3}}).Stream(ctx) {
			if m.Reload {
				reloads++
			}
			if n++; n == 2000 {
				cancel()
			}
		}
		cancel()
		if (table == Customers) != (reloads > 0) {
			t.Errorf("endless stream: %d reload records for %s", reloads, table)
		}
	}
}
