package change

import (
	"cmp"
	"encoding/json"
	"strings"
)

// SourcePos is the DMS source position of a change: its metadata fields as written ("" when
// absent). Where records carry them it is the source's commit order, which Kinesis arrival is
// not across shards (DMS batches its puts).
type SourcePos struct {
	CommitTS, TxID, TxRecord, Position string
}

// SourcePosOf returns ev's source position.
func SourcePosOf(ev *Event) SourcePos {
	return SourcePos{CommitTS: ev.Meta.CommitTimestamp, TxID: ev.Meta.TransactionID,
		TxRecord: ev.Meta.TransactionRecordID, Position: ev.Meta.StreamPosition}
}

// Compare orders two source positions by the fields both have: commit-timestamp (fixed-width
// UTC text); within one transaction its transaction-record-id; then stream-position (the
// source log position, which follows commit order) and last transaction-id (numbers within
// compared as numbers). Transaction ids follow transaction start, not commit, so they only
// break what nothing else does. 0 when they cannot be told apart.
func (p *SourcePos) Compare(q *SourcePos) int {
	if p.CommitTS != "" && q.CommitTS != "" {
		if c := strings.Compare(p.CommitTS, q.CommitTS); c != 0 {
			return c
		}
	}
	if p.TxID != "" && p.TxID == q.TxID && p.TxRecord != "" && q.TxRecord != "" {
		if c := NatCompare(p.TxRecord, q.TxRecord); c != 0 {
			return c
		}
	}
	for _, f := range [...][2]string{{p.Position, q.Position}, {p.TxID, q.TxID}} {
		if f[0] != "" && f[1] != "" {
			if c := NatCompare(f[0], f[1]); c != 0 {
				return c
			}
		}
	}
	return 0
}

// IsZero reports whether p has no field.
func (p *SourcePos) IsZero() bool { return *p == SourcePos{} }

// Encode is p as one string (a JSON array of the four fields; "" for the zero position), for a
// lease-row attribute.
func (p *SourcePos) Encode() string {
	if p.IsZero() {
		return ""
	}
	b, _ := json.Marshal([4]string{p.CommitTS, p.TxID, p.TxRecord, p.Position}) // strings only: cannot fail
	return string(b)
}

// DecodeSourcePos reads what Encode wrote; anything else is the zero position.
func DecodeSourcePos(s string) SourcePos {
	var f [4]string
	if s == "" || json.Unmarshal([]byte(s), &f) != nil {
		return SourcePos{}
	}
	return SourcePos{CommitTS: f[0], TxID: f[1], TxRecord: f[2], Position: f[3]}
}

// NatCompare compares a and b with every run of hex digits compared as a number, everything
// else byte by byte. Source positions mix bases: PostgreSQL LSNs ("00000002/0352A2F7") and SQL
// Server LSNs are hex, MySQL positions ("mysql-bin.000024:9812:...") and transaction ids decimal.
// Read as hex, decimal runs keep their order (without leading zeros a longer run is larger, and
// runs of one length order as strings in either base), so one rule serves both; a run of decimal
// digits alone would split "0352A2F7" and order it before "03523E78".
func NatCompare(a, b string) int {
	for a != "" && b != "" {
		if isHex(a[0]) && isHex(b[0]) {
			da, db := hexRun(a), hexRun(b)
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(strings.ToUpper(na), strings.ToUpper(nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexRun(s string) int {
	i := 0
	for i < len(s) && isHex(s[i]) {
		i++
	}
	return i
}

// RecordIdentity is the DMS identity of a CDC record: "<commit-timestamp>/<transaction-id>/
// <transaction-record-id>", the metadata DMS writes with the Kinesis endpoint setting
// IncludeTransactionDetails=true; "" when the record lacks any of them (details off, load and
// control records). It is the same for every copy DMS sends of one source change: a PutRecords
// retry re-sends the record as it was, and a task restarted from an earlier source position
// reads the same committed transactions again and numbers their records the same way
// (transaction-record-id counts the records DMS emits for the transaction, so this relies on
// the task's table mappings not changing between the two runs). The commit timestamp keeps
// transaction ids that the source reuses (PostgreSQL xids wrap around) apart.
func RecordIdentity(ev *Event) string {
	if ev.Op != OpInsert && ev.Op != OpUpdate && ev.Op != OpDelete {
		return ""
	}
	m := &ev.Meta
	if m.CommitTimestamp == "" || m.TransactionID == "" || m.TransactionRecordID == "" {
		return ""
	}
	return m.CommitTimestamp + "/" + m.TransactionID + "/" + m.TransactionRecordID
}

// KeyChangeNoter is implemented by the Acker of an event the ordering guard tracks across
// processes: the table writer, once it has compared the key columns of an update that may
// change its key (MayChangeKey), tells it the old key the update moves away (a hash of the
// key's encoding) or that it changes no key, so that other processes wait only where a change
// of theirs writes that key (design.md §4).
type KeyChangeNoter interface {
	MovesKey(hash uint64)
	MovesNoKey()
}
