package dms

import "strconv"

// ErrorKind classifies why a record could not be decoded. Every kind means the record itself is
// unusable (retrying cannot help): the caller dead-letters it and moves on.
//
// ErrorKind implements error so that errors.Is(err, dms.ErrSyntax) matches a *DecodeError of
// that kind.
type ErrorKind uint8

const (
	// ErrSyntax: the input is not valid JSON (or a number literal is malformed).
	ErrSyntax ErrorKind = iota + 1
	// ErrEmpty: the input is empty or only whitespace.
	ErrEmpty
	// ErrAggregated: the input is a KPL aggregated record (magic F3 89 9A C2), which DMS is not
	// known to produce; it must be de-aggregated before decoding.
	ErrAggregated
	// ErrNotObject: the top-level JSON value is not an object.
	ErrNotObject
	// ErrMissingMetadata: the metadata object, or a metadata field the record needs
	// (record-type, operation; schema-name and table-name for data records), is absent.
	ErrMissingMetadata
	// ErrUnknownRecordType: metadata.record-type is neither "data" nor "control".
	ErrUnknownRecordType
	// ErrUnknownOperation: a data record's operation is not load, insert, update or delete.
	ErrUnknownOperation
	// ErrMissingData: a data record has no data object.
	ErrMissingData
	// ErrBadField: a known field has the wrong JSON type or shape (metadata, data, control or
	// the before-image not an object, a metadata value that is not a string or number, a
	// malformed table-def, an empty table-name on a data record).
	ErrBadField
	// ErrBadString: a JSON string (a value, a key, metadata, anywhere in the record) is not
	// Unicode text: it holds bytes that are not UTF-8, or a \u escape of a surrogate that is not
	// half of a high+low pair. Such text has no exact value in a Parquet string column, so the
	// record is dead-lettered; the reason names the field.
	ErrBadString
)

// String returns a short name of the kind, suitable as a metric label.
func (k ErrorKind) String() string {
	switch k {
	case ErrSyntax:
		return "syntax"
	case ErrEmpty:
		return "empty"
	case ErrAggregated:
		return "aggregated"
	case ErrNotObject:
		return "not_object"
	case ErrMissingMetadata:
		return "missing_metadata"
	case ErrUnknownRecordType:
		return "unknown_record_type"
	case ErrUnknownOperation:
		return "unknown_operation"
	case ErrMissingData:
		return "missing_data"
	case ErrBadField:
		return "bad_field"
	case ErrBadString:
		return "bad_string"
	default:
		return "kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "dms: " + k.String() }

// DecodeError is returned by Decoder.Decode for every record that cannot be decoded.
type DecodeError struct {
	// Offset is the byte offset in the input where the problem was found, or -1 when the
	// problem is semantic (a field with the wrong type) rather than positional.
	Offset int
	// Reason says what is wrong, naming the field where there is one.
	Reason string
	// Kind classifies the error.
	Kind ErrorKind
}

func (e *DecodeError) Error() string {
	s := "dms: decode: " + e.Kind.String() + ": " + e.Reason
	if e.Offset >= 0 {
		s += " (at byte " + strconv.Itoa(e.Offset) + ")"
	}
	return s
}

// Is reports whether target is the ErrorKind of e.
func (e *DecodeError) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

func decodeErr(kind ErrorKind, offset int, reason string) *DecodeError {
	return &DecodeError{Offset: offset, Reason: reason, Kind: kind}
}
