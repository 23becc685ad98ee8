package workload

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// TestSchemaScenario runs the schema-change scenario through the decoder and the schema
// simulation of dms.Normalizer (the sink's evolution rules, in stream order): every good record
// decodes and converts under the evolving schema, every injected bad record fails as its class
// says, the control records make the intended changes, and the expected state has the final
// schema.
func TestSchemaScenario(t *testing.T) {
	cfg := Config{Seed: 3, LoadRows: 60, Changes: 3000, SchemaChanges: true, BadRecords: 16}
	g := New(cfg)
	n := dms.NewNormalizer(dms.DefaultConfig(), dms.TypeOptions{})
	var changes []string
	bad := 0
	for m := range g.Messages() {
		rec := n.Normalize(m.Data)
		convErr := ""
		for _, f := range rec.Columns {
			if f.Error != "" {
				convErr = f.Name + ": " + f.Error
			}
		}
		switch m.DeadLetter {
		case "":
			if rec.Error != nil || convErr != "" {
				t.Fatalf("good record rejected (%+v %s):\n%s", rec.Error, convErr, m.Data)
			}
			if rec.Control != nil {
				for _, c := range rec.Control.Changes {
					changes = append(changes, rec.Schema+"."+rec.Table+": "+c)
				}
			}
		case "decode":
			bad++
			if rec.Error == nil {
				t.Fatalf("bad record decodes:\n%s", m.Data)
			}
		case "convert":
			bad++
			if rec.Error != nil || convErr == "" {
				t.Fatalf("bad record converts:\n%s", m.Data)
			}
		case "keyless_change":
			bad++
			if rec.Error != nil || !slices.ContainsFunc(rec.Warnings, func(w string) bool { return strings.Contains(w, "without a primary key") }) {
				t.Fatalf("keyless update not flagged: %+v\n%s", rec.Warnings, m.Data)
			}
		default:
			t.Fatalf("class %q", m.DeadLetter)
		}
	}
	if bad != cfg.BadRecords {
		t.Fatalf("%d bad records, want %d", bad, cfg.BadRecords)
	}
	for _, want := range []string{
		"shop.customers: add optional column tier string",
		"shop.customers: rename column name to full_name",
		"shop.customers: column email dropped at the source: kept with its data, no longer expected",
		"shop.events: add optional column source string",
		"shop.types: widen column c_int4 from int to long",
		"shop.types: widen column c_real4 from float to double",
		"shop.types: widen column c_num5 from decimal(5, 0) to decimal(10, 0)",
		"shop.promotions: widen column discount from decimal(5, 2) to decimal(7, 2)",
		"shop.promotions: add optional column max_uses int",
	} {
		if !slices.Contains(changes, want) {
			t.Errorf("missing schema change %q in\n%s", want, strings.Join(changes, "\n"))
		}
	}
	exp, err := g.Expected()
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.DeadLetters) != cfg.BadRecords {
		t.Fatalf("%d expected dead letters", len(exp.DeadLetters))
	}
	for _, dl := range exp.DeadLetters {
		if _, err := base64.StdEncoding.DecodeString(dl.Payload); err != nil || dl.Class == "" {
			t.Fatalf("dead letter %+v", dl)
		}
	}
	cols := map[string]string{}
	for _, et := range exp.Tables {
		for _, c := range et.Columns {
			cols[et.Name+"."+c.Name] = c.Type
		}
	}
	for k, want := range map[string]string{"customers.full_name": "string", "customers.tier": "string", "customers.email": "string",
		"types.c_int4": "long", "types.c_real4": "double", "types.c_num5": "decimal(10, 0)", "promotions.discount": "decimal(7, 2)",
		"promotions.max_uses": "int", "sessions.started": "timestamp", "events.source": "string"} {
		if cols[k] != want {
			t.Errorf("expected column %s: %q, want %q", k, cols[k], want)
		}
	}
	if _, ok := cols["customers.name"]; ok {
		t.Error("renamed column still expected under its old name")
	}
	// Every row written after the drop has no email; rows untouched since keep theirs.
	var withEmail, without int
	for _, et := range exp.Tables {
		if et.Name != Customers {
			continue
		}
		idx := slices.IndexFunc(et.Columns, func(c ExpectedColumn) bool { return c.Name == "email" })
		for _, row := range et.Rows {
			if row[idx] == nil {
				without++
			} else {
				withEmail++
			}
		}
	}
	if withEmail == 0 || without == 0 {
		t.Errorf("customers.email: %d rows with, %d without; want both", withEmail, without)
	}
	// The expected state round-trips through its encoding.
	var b bytes.Buffer
	if err := exp.Encode(&b); err != nil {
		t.Fatal(err)
	}
	back, err := DecodeExpected(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.DeadLetters) != len(exp.DeadLetters) || len(back.Tables) != len(exp.Tables) {
		t.Fatal("expected state does not round-trip")
	}
}
