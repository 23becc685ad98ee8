package dms

import (
	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Column rules of TableRules.Rule.
const (
	RuleExclude = "excluded"
	RuleHash    = "hashed"
	RuleMask    = "masked"
)

// TableRules are a table's configured column rules as the sink applies them (its sink.tables
// entry: exclude, hash and mask columns, primary_key, the timestamp settings, sink.time_type).
// The sink implements them (sink.Config.Rules); a Normalizer given them (SetRules) shows the
// types and values exactly as the sink stores them, because both call the same code.
type TableRules interface {
	// Desired maps a table-def to the columns the table wants, typed as stored; excluded
	// columns are left out.
	Desired(def *change.TableDef) []DesiredColumn
	// Key is the primary key: the configured one, else the table-def's (defKey).
	Key(defKey []string) []string
	// Create is the schema the sink gives a new table: from the table-def def when there is
	// one, else from configured columns, else inferred from the event ev; source says which
	// (table-def, configuration, inferred). An error is a table the sink cannot create (it
	// pauses the table and dead-letters its records).
	Create(def *change.TableDef, ev *change.Event) (cols []ColumnState, source string, err error)
	// InferType types a column first seen in data.
	InferType(c change.Column) iceberg.Type
	// Rule names the rule of a column (RuleExclude, RuleHash, RuleMask), "" for none.
	Rule(name string) string
	// Value is the value the sink converts for the column (hashed or masked); keep is false
	// for an excluded column.
	Value(name string, v change.Value) (out change.Value, keep bool)
}

// SetRules makes n apply the rules of each source table ("schema.table"); nil rules (the
// default) map types with the Normalizer's TypeOptions and store every value as sent.
func (n *Normalizer) SetRules(rules func(src string) TableRules) { n.rules = rules }

// rulesFor returns the rules of src, nil when none are set.
func (n *Normalizer) rulesFor(src string) TableRules {
	if n.rules == nil {
		return nil
	}
	return n.rules(src)
}
