package sink

import (
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
)

// The DMS record identity of keyless tables (sink.keyless_identity, design.md §3.2): a DMS
// re-send (PutRecords retry, task restart) arrives with a new Kinesis sequence number that no
// watermark covers. A keyed table rewrites the row (last change per key); a keyless table would
// append it again. So a keyless table's inserts that carry an identity (change.RecordIdentity,
// IncludeTransactionDetails=true) store it in the extra column _dms_record_id (readers see
// it), and each is written with an equality delete of its identity: a re-sent insert replaces
// its earlier copy, within a batch the last copy survives. Keyless tables are created with the
// column when the setting is auto; it is optional: rows without an identity (full load,
// details off) hold null and are appended as before. It is not a source column: table-defs
// never name it, so schema evolution neither marks it dropped nor renames it, and a value a
// record carries under its name is not stored (a source column of that name that the table
// was created with is the source's, and the table then has no identity).

// KeylessIdentityColumn is the extra column of a keyless table that holds each row's DMS record
// identity (change.RecordIdentity), written with sink.keyless_identity auto. Keyless tables get
// it when they are created (buildSchema); tables created without it keep appending re-sends.
const KeylessIdentityColumn = deletes.IdentityColumn

// identityDoc starts the doc of the identity column; a column of that name without it is a
// source column, and the table then gets no identity.
const identityDoc = "dms2iceberg: DMS record identity"

// identityDocText is the full doc the column is created with.
const identityDocText = identityDoc + " (<commit-timestamp>/<transaction-id>/<transaction-record-id>, DMS IncludeTransactionDetails): a re-sent record replaces its earlier copy; null for records without it (full load)"

// findIdentity sets l's identity column (by name and doc) when the table has one.
func (l *layout) findIdentity(fields []iceberg.NestedField) {
	i, ok := l.byName[KeylessIdentityColumn]
	if !ok || isKey(l, i) || !strings.HasPrefix(fields[i].Doc, identityDoc) {
		return
	}
	if _, ok := fields[i].Type.(iceberg.StringType); !ok {
		return
	}
	l.hasID, l.idIdx, l.idID = true, i, fields[i].ID
	l.idArrow = arrow.NewSchema([]arrow.Field{l.arrow.Field(i)}, nil)
}

// identified reports whether l writes the identity of its rows: a keyless table with the
// column.
func (l *layout) identified() bool { return l.hasID && !l.keyed() }

// isIdentity reports whether column i is the identity column.
func (l *layout) isIdentity(i int) bool { return l.hasID && i == l.idIdx }

// identityField is the identity column of a new keyless table, with field id id.
func identityField(id int) iceberg.NestedField {
	return iceberg.NestedField{ID: id, Name: KeylessIdentityColumn, Type: iceberg.PrimitiveTypes.String, Doc: identityDocText}
}

// noteNoIdentity logs, once per writer, that a keyless table without the identity column takes
// inserts that carry an identity: created before sink.keyless_identity (or with it off), so
// their re-sends append duplicates. The column is not added to such a table: the equality
// deletes of the identity would apply to the data files written before it, which do not have
// the column, and iceberg-go v0.7.0 refuses to read a table whose equality-delete column is
// missing from a data file.
func (sa *schemaApplier) noteNoIdentity(ev *change.Event) {
	l := sa.st.lay
	if sa.identityNoted || !sa.set.identity || l.keyed() || l.hasID || ev.Op != change.OpInsert || change.RecordIdentity(ev) == "" {
		return
	}
	sa.identityNoted = true
	sa.log.Warn("keyless table without the DMS record identity column: re-sent records are appended again (re-create the table to get the column)",
		zap.String("column", KeylessIdentityColumn))
}

// identityDatum is ev's identity as the value of the identity column; null when it has none.
func identityDatum(ev *change.Event) dms.Datum {
	id := change.RecordIdentity(ev)
	if id == "" {
		return dms.Datum{Null: true}
	}
	return dms.Datum{S: id}
}
