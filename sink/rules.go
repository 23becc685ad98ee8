package sink

import (
	"slices"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// Rules returns the column rules the sink applies to source table src ("schema.table"): its
// sink.tables entry (exclude, hash and mask columns, primary_key, timestamptz settings) and
// sink.time_type. They are the writers' own settings, so `dms2iceberg decode` (a
// dms.Normalizer given them) shows exactly the types and values the sink stores.
func (c Config) Rules(src string) dms.TableRules { return tableRules{c.settingsFor(src)} }

// tableRules exposes a writer's settings as dms.TableRules.
type tableRules struct{ st *settings }

func (r tableRules) Desired(def *change.TableDef) []dms.DesiredColumn { return r.st.desired(def) }
func (r tableRules) Key(defKey []string) []string                     { return r.st.key(defKey) }
func (r tableRules) InferType(c change.Column) iceberg.Type           { return r.st.inferType(c) }
func (r tableRules) Value(name string, v change.Value) (change.Value, bool) {
	return r.st.value(name, v)
}

func (r tableRules) Rule(name string) string {
	switch {
	case r.st.exclude[name]:
		return dms.RuleExclude
	case r.st.hash[name]:
		return dms.RuleHash
	case r.st.mask[name]:
		return dms.RuleMask
	}
	return ""
}

func (r tableRules) Create(def *change.TableDef, ev *change.Event) ([]dms.ColumnState, string, error) {
	sc, source, err := buildSchema(def, r.st, ev)
	if err != nil {
		return nil, "", err
	}
	out := make([]dms.ColumnState, 0, len(sc.Fields()))
	for _, f := range sc.Fields() {
		out = append(out, dms.ColumnState{Name: f.Name, Type: f.Type, Required: f.Required,
			Key: slices.Contains(sc.IdentifierFieldIDs, f.ID), Doc: f.Doc})
	}
	return out, source, nil
}

// key is the table's primary key: the configured one, else defKey (the table-def's).
func (st *settings) key(defKey []string) []string {
	if len(st.primaryKey) > 0 {
		return st.primaryKey
	}
	return defKey
}
