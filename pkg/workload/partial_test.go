package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// TestPartialUpdates checks Config.PartialUpdates against the same workload without it: the
// messages pair up one to one, only update images of keyed tables differ, and they hold the key
// plus exactly the columns whose value changed (a column changed to NULL as an explicit null).
// The expected state is the full rows, the same as without the option, and it is what the
// messages give when an absent column keeps its previous value, not when it is NULL.
func TestPartialUpdates(t *testing.T) {
	cfg := Config{Seed: 13, Changes: 4000, LoadRows: 100}
	pcfg := cfg
	pcfg.PartialUpdates = true
	full, part := collect(New(cfg)), collect(New(pcfg))
	if len(full) != len(part) {
		t.Fatalf("%d messages with partial updates, %d without", len(part), len(full))
	}
	defs := TableDefs()
	// state is the full workload's model, by table and key text: every column, absent = NULL.
	state := map[string]map[string][]change.Value{}
	keyOf := func(def change.TableDef, img map[string]any) string {
		var parts []string
		for _, k := range def.PrimaryKey {
			v, ok := img[k]
			if !ok {
				t.Fatalf("key column %s missing", k)
			}
			parts = append(parts, toValue(v).Text)
		}
		return strings.Join(parts, "|")
	}
	var updates, partial, keyOnly, explicitNull, keyChanges int
	for i := range full {
		f, p := full[i], part[i]
		if f.Table != p.Table || f.Op != p.Op || f.KeyChange != p.KeyChange || f.PartitionKey != p.PartitionKey || f.DeadLetter != p.DeadLetter {
			t.Fatalf("message %d: %+v with partial updates, %+v without", i, p, f)
		}
		fr := parse(t, f)
		def, keyed := defs[f.Table]
		keyed = keyed && len(def.PrimaryKey) > 0
		if f.Op != "update" || !keyed {
			if f.Op == "update" {
				t.Fatalf("message %d: update of keyless %s", i, f.Table)
			}
			if !bytes.Equal(f.Data, p.Data) {
				t.Fatalf("message %d (%s %s) differs with partial updates:\n%s\nwithout:\n%s", i, f.Table, f.Op, p.Data, f.Data)
			}
		}
		if fr.Control != nil || !keyed {
			continue
		}
		if state[f.Table] == nil {
			state[f.Table] = map[string][]change.Value{}
		}
		rows := state[f.Table]
		row := make([]change.Value, len(def.Columns))
		for ci, c := range def.Columns {
			row[ci] = toValue(fr.Data[c.Name])
		}
		k := keyOf(def, fr.Data)
		switch f.Op {
		case "load", "insert":
			rows[k] = row
			continue
		case "delete":
			delete(rows, k)
			continue
		}
		// An update: compare the partial image with the full one and the row it replaces.
		pr := parse(t, p)
		if !reflect.DeepEqual(pr.Metadata, fr.Metadata) || !reflect.DeepEqual(pr.BeforeImage, fr.BeforeImage) {
			t.Fatalf("message %d: metadata or before-image differ:\n%s\nwithout:\n%s", i, p.Data, f.Data)
		}
		prevKey := k
		if len(fr.BeforeImage) > 0 {
			prevKey = keyOf(def, fr.BeforeImage)
			keyChanges++
		}
		prev, ok := rows[prevKey]
		if !ok {
			t.Fatalf("message %d: update of %s key %s, which is not live", i, f.Table, prevKey)
		}
		updates++
		present := 0
		for ci, c := range def.Columns {
			pv, has := pr.Data[c.Name]
			isKey := slices.Contains(def.PrimaryKey, c.Name)
			switch {
			case isKey && !has:
				t.Fatalf("message %d: key column %s left out:\n%s", i, c.Name, p.Data)
			case isKey:
			case has:
				present++
				if toValue(pv) != row[ci] {
					t.Fatalf("message %d: %s is %v, the full image has %v", i, c.Name, pv, row[ci])
				}
				if row[ci] == prev[ci] {
					t.Fatalf("message %d: unchanged column %s (%v) written in a partial image:\n%s", i, c.Name, pv, p.Data)
				}
				if pv == nil {
					explicitNull++
					if !bytes.Contains(p.Data, []byte(fmt.Sprintf("%q:\tnull", c.Name))) && !bytes.Contains(p.Data, []byte(fmt.Sprintf("%q:null", c.Name))) {
						t.Fatalf("message %d: %s is not an explicit null:\n%s", i, c.Name, p.Data)
					}
				}
			default:
				if row[ci] != prev[ci] {
					t.Fatalf("message %d: changed column %s (%v -> %v) left out:\n%s", i, c.Name, prev[ci], row[ci], p.Data)
				}
			}
		}
		if present < len(def.Columns)-len(def.PrimaryKey) {
			partial++
		}
		if present == 0 {
			keyOnly++
		}
		delete(rows, prevKey)
		rows[k] = row
	}
	for what, n := range map[string]int{
		"updates": updates, "partial images": partial, "key-only images": keyOnly,
		"columns changed to an explicit null": explicitNull, "key changes": keyChanges,
	} {
		if n == 0 {
			t.Errorf("no %s", what)
		}
	}
	if partial*10 < updates*9 {
		t.Errorf("only %d of %d updates are partial images", partial, updates)
	}
	t.Logf("%d updates (%d key changes): %d partial images, %d key only, %d columns set to an explicit null",
		updates, keyChanges, partial, keyOnly, explicitNull)

	// The expected state is the full rows, equal to the workload without partial images, and
	// the partial messages give it when absent columns keep their values, not when they are NULL.
	exp := expected(t, pcfg)
	if !reflect.DeepEqual(exp, expected(t, cfg)) {
		t.Fatal("expected state with partial updates differs from the one without")
	}
	kept, nulled := replay(t, part, true), replay(t, part, false)
	differing := 0
	for _, et := range exp.Tables {
		got, err := ExpectedTableOf(et.Name, false, kept[et.Source])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(et, got) {
			t.Errorf("%s: replaying the partial images with absent columns kept does not give the expected state", et.Source)
		}
		got, err = ExpectedTableOf(et.Name, false, nulled[et.Source])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(et, got) {
			differing++
		} else if len(et.Key) > 0 {
			t.Errorf("%s: replaying the partial images with absent columns NULL gives the expected state too", et.Source)
		}
	}
	if differing != 3 {
		t.Errorf("%d tables differ when absent columns are NULL, want the 3 keyed ones", differing)
	}
}

// TestPartialUpdatesWithScenario runs PartialUpdates together with the schema-change scenario
// and bad records: the expected state and the dead letters stay those of the full workload, and
// no update image writes a dropped column.
func TestPartialUpdatesWithScenario(t *testing.T) {
	cfg := Config{Seed: 17, Changes: 3000, LoadRows: 50, SchemaChanges: true, BadRecords: 8}
	pcfg := cfg
	pcfg.PartialUpdates = true
	if !reflect.DeepEqual(expected(t, pcfg), expected(t, cfg)) {
		t.Fatal("expected state with partial updates differs from the one without")
	}
	full, part := collect(New(cfg)), collect(New(pcfg))
	if len(full) != len(part) {
		t.Fatalf("%d messages with partial updates, %d without", len(part), len(full))
	}
	shorter := 0
	for i := range full {
		if full[i].Op != "update" || full[i].DeadLetter != "" {
			if !bytes.Equal(full[i].Data, part[i].Data) {
				t.Fatalf("message %d (%s %s) differs with partial updates", i, full[i].Table, full[i].Op)
			}
			continue
		}
		var f, p struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(full[i].Data, &f); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(part[i].Data, &p); err != nil {
			t.Fatal(err)
		}
		for c, v := range p.Data {
			if fv, ok := f.Data[c]; !ok || !bytes.Equal(fv, v) {
				t.Fatalf("message %d: column %s of the partial image is not in the full one:\n%s\n%s", i, c, part[i].Data, full[i].Data)
			}
		}
		if len(p.Data) < len(f.Data) {
			shorter++
		}
	}
	if shorter == 0 {
		t.Fatal("no partial update images")
	}
}
