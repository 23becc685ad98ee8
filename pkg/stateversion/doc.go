// Package stateversion owns the format version of the state dms2iceberg persists: the
// properties it writes on its Iceberg tables (sink/tableprop.StateVersion) and the attributes it
// writes on its lease-table rows (checkpoint.AttrStateVersion). Both carry the same integer, the
// major version of that state's format, written by every commit and every lease acquisition and
// renewal.
//
// The compatibility rule: a binary reads state of its own version and of every older one (a
// missing stamp is version 1, the format before the stamp existed), and refuses state stamped
// with a newer version, or with a stamp it cannot read, without writing to it. A change that
// older binaries would misread (a property or attribute whose meaning changes, state they must
// not ignore) raises Current; additions older binaries may safely ignore do not.
//
// Concurrency: constants and pure functions only.
package stateversion
