package dms

import (
	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Bits of metaReader.seen: which metadata keys were present.
const (
	seenRecordType = 1 << iota
	seenOperation
	seenSchema
	seenTable
)

// metaReader reads the metadata object of a record on the general path into an event's Meta,
// and remembers which of the required keys were present (seen).
type metaReader struct {
	text *eventText
	meta *change.Metadata // the event's, during read
	seen uint16
	err  *DecodeError
	// visitFn is visit bound once, so that fastjson's Visit does not allocate a closure per
	// record.
	visitFn func(key []byte, v *fastjson.Value)
}

func newMetaReader(text *eventText) *metaReader {
	r := &metaReader{text: text}
	r.visitFn = r.visit
	return r
}

// read fills m from the metadata object mo: every known field, numbers as their literal text,
// strings as is, null as absent.
func (r *metaReader) read(mo *fastjson.Object, m *change.Metadata) *DecodeError {
	r.meta, r.seen, r.err = m, 0, nil
	mo.Visit(r.visitFn)
	err := r.err
	r.meta, r.err = nil, nil
	return err
}

func (r *metaReader) visit(key []byte, v *fastjson.Value) {
	if r.err != nil {
		return
	}
	m := r.meta
	var dst *string
	switch string(key) {
	case "timestamp":
		dst = &m.Timestamp
	case "record-type":
		dst = &m.RecordType
		r.seen |= seenRecordType
	case "operation":
		dst = &m.Operation
		r.seen |= seenOperation
	case "partition-key-type":
		dst = &m.PartitionKeyType
	case "partition-key-value":
		dst = &m.PartitionKeyValue
	case "schema-name":
		dst = &m.SchemaName
		r.seen |= seenSchema
	case "table-name":
		dst = &m.TableName
		r.seen |= seenTable
	case "transaction-id":
		dst = &m.TransactionID
	case "transaction-record-id":
		dst = &m.TransactionRecordID
	case "prev-transaction-id":
		dst = &m.PrevTransactionID
	case "prev-transaction-record-id":
		dst = &m.PrevTransactionRecordID
	case "commit-timestamp":
		dst = &m.CommitTimestamp
	case "stream-position":
		dst = &m.StreamPosition
	default:
		return
	}
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		*dst = r.text.str(b)
	case fastjson.TypeNumber:
		s := r.text.marshal(v)
		if !validNumber(s) {
			r.err = decodeErr(ErrSyntax, -1, numberReason("metadata."+string(key), s))
			return
		}
		*dst = s
	case fastjson.TypeNull:
		// Treated as absent.
		switch string(key) {
		case "record-type":
			r.seen &^= seenRecordType
		case "operation":
			r.seen &^= seenOperation
		case "schema-name":
			r.seen &^= seenSchema
		case "table-name":
			r.seen &^= seenTable
		}
	default:
		r.err = decodeErr(ErrBadField, -1, "metadata."+string(key)+" is "+typeName(v)+", want string or number")
	}
}
