// Package tableprop owns every name dms2iceberg persists in Iceberg metadata: the table
// properties it sets and reads, and the keys it writes into snapshot summaries, each with its
// meaning. Nothing else in the repository spells one of these strings; status, the tests and the
// chaos oracle use these constants.
//
// Table properties survive snapshot expiry and compaction; snapshot summaries do not (they are
// for audit). Changing a name here changes persisted state: keep old names readable across an
// upgrade.
//
// Concurrency: constants and pure functions only.
package tableprop
