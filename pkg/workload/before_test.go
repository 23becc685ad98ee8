package workload

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestFullBeforeImages checks Config.FullBeforeImages against the same workload without it: the
// messages pair up one to one with the same data, and only the before-images of updates differ.
// Each holds every column of the row the update replaces (as MySQL's ColumnFilter all writes
// it), its key included, whether the key changed or not. The expected state is the same.
func TestFullBeforeImages(t *testing.T) {
	t.Parallel()
	for _, layout := range []Layout{LayoutDMSDefault, LayoutPrimaryKey} {
		cfg := Config{Seed: 21, Changes: 3000, LoadRows: 60, Layout: layout}
		fcfg := cfg
		fcfg.FullBeforeImages = true
		pk, full := collect(New(cfg)), collect(New(fcfg))
		if len(pk) != len(full) {
			t.Fatalf("layout %d: %d messages with full before-images, %d without", layout, len(full), len(pk))
		}
		defs := TableDefs()
		rows := map[string]map[string]map[string]any{} // table -> key text -> last data image
		keyOf := func(table string, img map[string]any) string {
			var parts []string
			for _, k := range defs[table].PrimaryKey {
				parts = append(parts, toValue(img[k]).Text)
			}
			return strings.Join(parts, "|")
		}
		var updates, keyChanges int
		for i := range pk {
			p, f := pk[i], full[i]
			if p.Table != f.Table || p.Op != f.Op || p.KeyChange != f.KeyChange || p.PartitionKey != f.PartitionKey {
				t.Fatalf("message %d: %+v with full before-images, %+v without", i, f, p)
			}
			pr, fr := parse(t, p), parse(t, f)
			if !reflect.DeepEqual(pr.Data, fr.Data) || !reflect.DeepEqual(pr.Metadata, fr.Metadata) {
				t.Fatalf("message %d: data or metadata differ:\n%s\nwithout:\n%s", i, f.Data, p.Data)
			}
			if p.Op != "update" {
				if !bytes.Equal(p.Data, f.Data) {
					t.Fatalf("message %d (%s %s) differs with full before-images", i, p.Table, p.Op)
				}
			}
			if fr.Control != nil || len(defs[p.Table].PrimaryKey) == 0 {
				continue
			}
			if rows[p.Table] == nil {
				rows[p.Table] = map[string]map[string]any{}
			}
			switch p.Op {
			case "load", "insert":
				rows[p.Table][keyOf(p.Table, fr.Data)] = fr.Data
			case "delete":
				delete(rows[p.Table], keyOf(p.Table, fr.Data))
			case "update":
				updates++
				oldKey := keyOf(p.Table, fr.Data)
				if p.KeyChange {
					keyChanges++
					oldKey = keyOf(p.Table, pr.BeforeImage)
				}
				old, ok := rows[p.Table][oldKey]
				if !ok {
					t.Fatalf("message %d: update of %s key %s the model does not hold", i, p.Table, oldKey)
				}
				if !reflect.DeepEqual(nonNull(fr.BeforeImage), nonNull(old)) || len(fr.BeforeImage) < len(defs[p.Table].Columns) {
					t.Fatalf("message %d: before-image %v, want the old row %v", i, fr.BeforeImage, old)
				}
				delete(rows[p.Table], oldKey)
				rows[p.Table][keyOf(p.Table, fr.Data)] = fr.Data
			}
		}
		if updates < 100 || keyChanges == 0 {
			t.Fatalf("layout %d: %d updates, %d key changes: the workload should have many of both", layout, updates, keyChanges)
		}
		if !reflect.DeepEqual(expected(t, cfg), expected(t, fcfg)) {
			t.Fatalf("layout %d: the expected state differs with full before-images", layout)
		}
	}
}

// nonNull is img without its null columns (a data image may leave a NULL column out).
func nonNull(img map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range img {
		if v != nil {
			out[k] = v
		}
	}
	return out
}
