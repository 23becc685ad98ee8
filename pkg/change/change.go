package change

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Op is the operation of a DMS record.
type Op uint8

const (
	// OpUnknown is the zero value; a decoder never returns it for a valid record.
	OpUnknown Op = iota
	// OpLoad is a full-load row ("load").
	OpLoad
	// OpInsert is a CDC insert.
	OpInsert
	// OpUpdate is a CDC update (after-image in Columns, optional before-image in Before).
	OpUpdate
	// OpDelete is a CDC delete (Columns hold the image the source provides, at least the key).
	OpDelete
	// OpControl is a control record; Control holds the details.
	OpControl
)

// String returns the DMS spelling of the operation.
func (o Op) String() string {
	switch o {
	case OpLoad:
		return "load"
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpControl:
		return "control"
	default:
		return fmt.Sprintf("op(%d)", uint8(o))
	}
}

// IsUpsert reports whether the operation carries a new row image (load, insert, update).
func (o Op) IsUpsert() bool { return o == OpLoad || o == OpInsert || o == OpUpdate }

// Kind is the JSON kind of a column value as DMS rendered it. The target column type decides how
// the text is converted (see pkg/dms).
type Kind uint8

const (
	// KindNull is an explicit JSON null.
	KindNull Kind = iota
	// KindNumber is a JSON number; Text is the literal exactly as written (never via float64).
	KindNumber
	// KindString is a JSON string; Text is the unescaped UTF-8 content.
	KindString
	// KindBool is a JSON boolean; Text is "true" or "false".
	KindBool
	// KindJSON is a JSON object or array; Text is its compact JSON text.
	KindJSON
)

// Value is one column value of a DMS image, not yet converted to a column type.
type Value struct {
	Kind Kind
	Text string
}

// Column is a named value. Images keep the order of the JSON object.
type Column struct {
	Name  string
	Value Value
}

// Position identifies the Kinesis record an event came from.
type Position struct {
	Stream string
	Shard  string
	// Seq is the Kinesis sequence number: a decimal string without leading zeros.
	Seq string
}

// Metadata holds the DMS metadata fields of a record. Absent fields are empty strings.
type Metadata struct {
	Timestamp               string
	RecordType              string
	Operation               string
	PartitionKeyType        string
	PartitionKeyValue       string
	SchemaName              string
	TableName               string
	TransactionID           string
	TransactionRecordID     string
	PrevTransactionID       string
	PrevTransactionRecordID string
	CommitTimestamp         string
	StreamPosition          string
}

// ColumnDef is one column of a DMS table-def.
type ColumnDef struct {
	Name string
	// Type is the DMS type name as written (for example WSTRING, INT4, INT32, TIMESTAMP).
	Type      string
	Length    int
	Precision int
	Scale     int
	Nullable  bool
}

// TableDef is the table definition carried by a control record (control.table-def).
type TableDef struct {
	// Columns in the order of the JSON object.
	Columns    []ColumnDef
	PrimaryKey []string
}

// Control holds the details of a control record.
type Control struct {
	// Op is the control operation as written: create-table, drop-table, rename-table, add-column,
	// drop-column, rename-column, column-type-change, change-columns, a truncate (also when DMS
	// wrote it as a data record, see dms.IsTruncate), or anything else DMS sends.
	Op string
	// TableDef is present when the record carried control.table-def.
	TableDef *TableDef
}

// Acker is told that n events it was attached to are finished: committed in a snapshot, found
// already committed, or written to the dead-letter place. Implementations are safe for concurrent
// use.
type Acker interface {
	Done(n int)
}

// Event is one decoded DMS record.
type Event struct {
	Schema string
	Table  string
	Op     Op
	// Columns is the data image (after-image for updates). For control records it is nil.
	Columns []Column
	// Before is the before-image, from the configured before-image object or from BI_ columns
	// (with the prefix and suffix removed). Nil when the record has none.
	Before []Column
	// Control is set for control records.
	Control *Control
	Meta    Metadata
	Pos     Position
	// Arrival is when the record reached Kinesis: its ApproximateArrivalTimestamp (millisecond
	// precision), set by the consumer's shard processor. The ordering guard orders changes
	// across shards by it and commits only changes that arrived at or before the stream's
	// commit bound. Zero when unknown (tests, decode command, a record without the timestamp).
	Arrival time.Time
	// Raw is the record as it arrived, for dead letters. It may alias the consumer's buffer and
	// is valid until the event is acknowledged.
	Raw []byte
	// Ack is told when this event is finished. May be nil (tests, decode command).
	Ack Acker
	// Replay marks an event re-applied from the dead-letter table (dms2iceberg dlq replay): its
	// Pos is the original position, which the table's watermarks normally cover, so a replayed
	// event bypasses the watermark checks and never advances a watermark.
	Replay bool
	// Redacted lists the columns of a replayed dead letter whose values were redacted when it
	// was dead-lettered (dms.RedactedColumns: column -> hashed, masked or excluded): they hold
	// what the sink stores, so the sink does not apply the rule again. Nil for live records.
	Redacted map[string]string
}

// CompareSeq compares two Kinesis sequence numbers (decimal strings without leading zeros):
// -1 if a < b, 0 if equal, +1 if a > b. The empty string is lower than any number.
func CompareSeq(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// DeadLetter is a record that could not be applied, with the reason. It is written durably before
// the record is acknowledged, so bad input is never dropped silently (invariant 4).
type DeadLetter struct {
	Stream string
	Shard  string
	Seq    string
	// Table is "schema.table" when known.
	Table  string
	Reason string
	Raw    []byte
	// Class is a short machine-readable cause, used as a metric label and a column of the
	// dead-letter table: decode, convert, keyless_change, incompatible_schema, table_paused,
	// table_dropped, target_taken, unsupported_control, control. Empty means decode when Table is
	// empty (the consumer's undecodable records), else convert.
	Class string
	// Op is the DMS operation of the record when known (insert, create-table, ...).
	Op string
}

// DeadLetterer stores dead letters durably. Implementations are safe for concurrent use.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, dl DeadLetter) error
}

// DeadLetterRedactor is a DeadLetterer that redacts what it stores (the sink's column rules);
// RedactDeadLetter returns dl as it would be stored, for a log line that must not show more.
type DeadLetterRedactor interface {
	RedactDeadLetter(dl DeadLetter) DeadLetter
}

// ChangesKey reports whether ev is an update that changes the key of its row: a column of key
// that its before-image holds differs in its after-image (or the after-image lacks it). A key
// column the before-image leaves out did not change (Oracle's before-images, and DMS's pk-only
// ones of an update that kept its key: {}). Values are compared as DMS rendered them. Unlike
// MayChangeKey it gives the right answer for full before-images (MySQL's ColumnFilter all).
func ChangesKey(ev *Event, key []string) bool {
	if ev.Op != OpUpdate || len(ev.Before) == 0 {
		return false
	}
	for _, k := range key {
		b, ok := column(ev.Before, k)
		if !ok {
			continue
		}
		if a, ok := column(ev.Columns, k); !ok || a != b {
			return true
		}
	}
	return false
}

// column returns the value of the column named name in img.
func column(img []Column, name string) (Value, bool) {
	for _, c := range img {
		if c.Name == name {
			return c.Value, true
		}
	}
	return Value{}, false
}

// PartitionPrimaryKey is DMS's metadata partition-key-type of a record whose Kinesis partition
// key is built from its row's primary key (DMS's default for full load, and for CDC under
// ParallelApply): every such record of a key goes to the key's shard.
const PartitionPrimaryKey = "primary-key"

// RoutedByKey reports whether ev's Kinesis partition key is its row's primary key
// (PartitionPrimaryKey), so that it shares its shard with every other record of that key that
// is routed the same way. An update that changes its key is routed by its new key.
func RoutedByKey(ev *Event) bool { return ev.Meta.PartitionKeyType == PartitionPrimaryKey }

// MayChangeKey reports whether ev is an update whose before-image may name another row than its
// after-image: a before-image column is absent from the after-image or has another value there.
// With DMS's pk-only before-images (BeforeImageSettings ColumnFilter pk-only, the recommended
// setting) that is exactly a primary-key change; with full before-images every update that
// changes a column counts. The consumer uses it to publish key changes for the ordering guard's
// cross-process gates before a table's key columns are known; an update without a before-image
// is never a key change (the sink cannot tell one either).
func MayChangeKey(ev *Event) bool {
	if ev.Op != OpUpdate || len(ev.Before) == 0 {
		return false
	}
	for i, b := range ev.Before {
		// DMS writes a full before-image in the after-image's column order: look at the same
		// place first, so the usual update costs one comparison per column, not a search.
		if i < len(ev.Columns) && ev.Columns[i].Name == b.Name {
			if ev.Columns[i].Value != b.Value {
				return true
			}
			continue
		}
		if a, ok := column(ev.Columns, b.Name); !ok || a != b.Value {
			return true
		}
	}
	return false
}

// KeyHash is the hash of the key columns' values in img, the same for one key value in every
// image and process: FNV-1a over each value's text (numbers without trailing fractional zeros,
// since DMS renders one NUMERIC value with and without them), never 0. ok is false when img
// lacks a key column. The ordering guard publishes and compares keys by it (design.md §4); two
// keys may share a hash, which only makes a change wait.
func KeyHash(img []Column, key []string) (h uint64, ok bool) {
	const offset, prime = 14695981039346656037, 1099511628211
	h = offset
	for _, k := range key {
		v, found := column(img, k)
		if !found {
			return 0, false
		}
		t := v.Text
		if v.Kind == KindNumber {
			t = trimFraction(t)
		}
		for i := 0; i < len(t); i++ {
			h = (h ^ uint64(t[i])) * prime
		}
		h = (h ^ 0xff) * prime // separator: ("ab", "c") and ("a", "bc") differ
	}
	if h == 0 {
		h = 1
	}
	return h, true
}

// trimFraction drops the trailing zeros of a plain decimal number's fraction, and the point
// when none is left ("43.950" and "43.95", "7.0" and "7"); exponent forms stay as written.
func trimFraction(t string) string {
	if strings.ContainsAny(t, "eE") || !strings.Contains(t, ".") {
		return t
	}
	t = strings.TrimRight(t, "0")
	return strings.TrimSuffix(t, ".")
}
