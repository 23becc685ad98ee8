package dms

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// maskSSN masks column ssn and excludes column notes.
type maskSSN struct{}

func (maskSSN) Desired(*change.TableDef) []DesiredColumn { return nil }
func (maskSSN) Key(k []string) []string                  { return k }
func (maskSSN) Create(*change.TableDef, *change.Event) ([]ColumnState, string, error) {
	return nil, "", nil
}
func (maskSSN) InferType(change.Column) iceberg.Type { return iceberg.PrimitiveTypes.String }
func (maskSSN) Rule(name string) string {
	switch name {
	case "ssn":
		return RuleMask
	case "notes":
		return RuleExclude
	}
	return ""
}
func (r maskSSN) Value(name string, v change.Value) (change.Value, bool) {
	switch r.Rule(name) {
	case RuleExclude:
		return v, false
	case RuleMask:
		if v.Kind != change.KindNull {
			return change.Value{Kind: change.KindString, Text: "****"}, true
		}
	}
	return v, true
}

// The rules reach add-before-image-columns columns, a data._doc wrapper and a before-image of
// any field name; the record still decodes, with the marker listing the columns.
func TestRedactRecordReachesEveryImage(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BIEnabled, cfg.BeforeImageField = true, "old"
	raw := `{"data":{"_doc":{"id":1,"ssn":"s1","BI_ssn":"s0","notes":"n1","BI_notes":"n0"}},"old":{"ssn":"s9","notes":"n9"},` +
		`"metadata":{"record-type":"data","operation":"update","schema-name":"a","table-name":"b"}}`
	out, src, ok := RedactRecord([]byte(raw), "", cfg, func(string) TableRules { return maskSSN{} })
	if !ok || src != "a.b" {
		t.Fatalf("ok %v src %q", ok, src)
	}
	for _, clear := range []string{"s1", "s0", "s9", "n1", "n0", "n9"} {
		if strings.Contains(string(out), `"`+clear+`"`) {
			t.Fatalf("%s still holds %s", out, clear)
		}
	}
	if got := RedactedColumns(out); len(got) != 2 || got["ssn"] != RuleMask || got["notes"] != RuleExclude {
		t.Fatalf("marker %v in %s", got, out)
	}
	var ev change.Event
	if err := NewDecoder(cfg).Decode(out, &ev); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if len(ev.Columns) != 2 || ev.Columns[1].Value.Text != "****" {
		t.Fatalf("columns %+v", ev.Columns)
	}
}

// A table with rules whose record holds its columns in something else than an object (it does
// not decode): no rule can find the columns, so the member is emptied.
func TestRedactRecordEmptiesNonObjectImages(t *testing.T) {
	raw := `{"data":["s1"],"before-image":"s0","metadata":{"record-type":"data","operation":"insert","schema-name":"a","table-name":"b"}}`
	out, _, ok := RedactRecord([]byte(raw), "", DefaultConfig(), func(string) TableRules { return maskSSN{} })
	if !ok || strings.Contains(string(out), "s1") || strings.Contains(string(out), "s0") {
		t.Fatalf("%s (ok %v)", out, ok)
	}
	if again, _, _ := RedactRecord(out, "", DefaultConfig(), func(string) TableRules { return maskSSN{} }); string(again) != string(out) {
		t.Fatalf("redacted again: %s, was %s", again, out)
	}
	// Without rules (nil) the record is kept as it is.
	if out, _, _ := RedactRecord([]byte(raw), "", DefaultConfig(), func(string) TableRules { return nil }); string(out) != raw {
		t.Fatalf("changed without rules: %s", out)
	}
}
