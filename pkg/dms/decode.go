package dms

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Decoder turns DMS JSON records into change.Events. It reuses one JSON parser and is not safe
// for concurrent use; create one per goroutine.
//
// It holds the parts of decoding, each with its own state: the fast path's scanner (fast.go),
// the general path's readers of the metadata and of the images (meta.go, image.go), the text
// of the event being decoded (arena.go) and the slab fresh events' columns are carved from
// (slab.go); control records are parsed by the functions of control.go.
type Decoder struct {
	cfg Config
	p   fastjson.Parser

	text  eventText
	fast  fastScanner
	meta  *metaReader
	image *imageReader
	// cols is what the fast path carves fresh events' columns from.
	cols columnSlab
	// slowOnly turns the fast path off (tests compare the two paths).
	slowOnly bool
}

// NewDecoder returns a Decoder for cfg. It does not validate cfg (call Config.Validate); an
// empty BeforeImageField means no before-image object is recognised.
func NewDecoder(cfg Config) *Decoder {
	d := &Decoder{cfg: cfg, fast: fastScanner{cfg: cfg}}
	d.meta = newMetaReader(&d.text)
	d.image = newImageReader(cfg, &d.text)
	return d
}

// Config returns the decoder's configuration.
func (d *Decoder) Config() Config { return d.cfg }

// noColumns is the zero-capacity, non-nil Columns of a data record with an empty image.
var noColumns = make([]change.Column, 0)

var kplMagic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// Decode decodes one DMS record into ev.
//
// It sets ev.Schema, ev.Table, ev.Op, ev.Columns, ev.Before, ev.Control and ev.Meta, and leaves
// ev.Pos, ev.Raw and ev.Ack alone. All strings in ev are copied out of data into one byte arena
// allocated for this event, so data may be reused as soon as Decode returns and ev may be handed
// to another goroutine.
//
// Decode reuses the backing array of ev.Columns (ev.Columns[:0]) when it is large enough:
// pass an Event whose Columns is nil when the previous event decoded into it is still in use
// elsewhere. Columns and Before may share one backing array; treat both as read-only (never
// append to ev.Columns).
//
// Details:
//   - Columns is the data image in JSON object order (non-nil for data records, nil for
//     control records). Duplicate names are passed through as they appear. With object mapping
//     map-record-to-document, data is {"_doc": {...}}; when data has that single key and its value
//     is an object, the members of _doc are the columns.
//   - Before comes from the configured before-image object (nil when absent or empty), or, with
//     Config.BIEnabled, from the BI columns of an update record (see Config.BIEnabled).
//   - Values keep the JSON kind: numbers as their literal text (never via float64), strings
//     unescaped, booleans "true"/"false", objects and arrays as compact JSON text (KindJSON),
//     null as KindNull. Bare NaN/Inf tokens, the spellings fastjson accepts
//     (nan, inf, -inf, +inf, any case) and Infinity are rejected with ErrSyntax, naming the
//     column: NaN and infinities are not JSON numbers; quoted, they are strings, which float
//     and double columns convert (Convert).
//   - Control records get Op OpControl and Control.Op set to metadata.operation as written
//     (unknown control operations pass through). A data record whose operation is a truncate
//     (IsTruncate) is decoded as the control record it is: Op OpControl, Control.Op as
//     written, its data (if any) ignored; it needs schema-name and a non-empty table-name. Control.TableDef is parsed from
//     control.table-def when present: columns in JSON order, nullable defaulting to true,
//     length/precision/scale from numbers or numeric strings, primary-key from an array of
//     strings.
//   - The JSON is parsed with fastjson, and for a duplicated envelope key the first occurrence
//     wins. Data records of the common flat shape are read by a one-pass reader of our own
//     instead (fast.go), which gives exactly the same event; everything else, and every error,
//     goes through fastjson. Every JSON string in the record (keys, values, metadata, table-def, strings nested
//     in JSON values) must be Unicode text, so that it is stored exactly: bytes that are not
//     UTF-8 and \u escapes of unpaired surrogates are ErrBadString, escapes JSON does not
//     define (\q, \u12) are ErrSyntax; the reason names the field (data.name, metadata.
//     table-name, data: ... in the key "..."). Raw control characters in strings are kept as
//     the bytes they are. Number literals are checked against the JSON grammar (ErrSyntax
//     otherwise).
//   - Meta gets every known metadata field; numbers (transaction-id, ...) as their literal
//     text, strings as is, null as absent.
//
// Errors are *DecodeError. On error, Op is OpUnknown, Columns, Before and Control are nil, and
// Meta holds whatever metadata was decoded before the problem was found (useful for logs).
func (d *Decoder) Decode(data []byte, ev *change.Event) error { return d.decodeInto(data, ev, false) }

// DecodeShared decodes like Decode, except that the strings of ev may point into data instead
// of being copied: data must not be modified while ev, or any string taken from it, is in use.
//
// The consumer decodes with it: a Kinesis record's bytes are never written after the SDK read
// them, and the event keeps them anyway (Event.Raw, for the dead letters) until it is
// acknowledged. Sharing saves the copy of every string and the arena that held them, which for
// a flat data record (the fast path) is about as large as the record itself; records the fast
// path does not take are copied as by Decode.
func (d *Decoder) DecodeShared(data []byte, ev *change.Event) error {
	return d.decodeInto(data, ev, true)
}

func (d *Decoder) decodeInto(data []byte, ev *change.Event, shared bool) error {
	d.text.shared = shared
	cols := ev.Columns[:0]
	if !d.slowOnly && d.decodeFast(data, ev, cols) {
		d.text.finishFast()
		return nil
	}
	ev.Schema, ev.Table, ev.Op = "", "", change.OpUnknown
	ev.Columns, ev.Before, ev.Control = nil, nil, nil
	ev.Meta = change.Metadata{}

	if err := d.decode(data, ev, cols); err != nil {
		ev.Op = change.OpUnknown
		ev.Columns, ev.Before, ev.Control = nil, nil, nil
		d.reset()
		return err
	}
	d.reset()
	return nil
}

func (d *Decoder) reset() {
	d.text.arena = nil
}

func (d *Decoder) decode(data []byte, ev *change.Event, cols []change.Column) *DecodeError {
	first := skipWS(data)
	if first == len(data) {
		return decodeErr(ErrEmpty, 0, "empty record")
	}
	if bytes.HasPrefix(data, kplMagic) {
		return decodeErr(ErrAggregated, 0, "KPL aggregated record (magic F3 89 9A C2); de-aggregate before decoding")
	}
	v, err := d.p.ParseBytes(data)
	if err != nil {
		return syntaxErr(data, err.Error())
	}
	if de := checkText(data); de != nil {
		return de
	}
	top, err := v.Object()
	if err != nil {
		return decodeErr(ErrNotObject, first, "top-level value is not a JSON object")
	}
	// One arena per event.
	d.text.startCopy(len(data))

	mv := top.Get("metadata")
	if mv == nil {
		return decodeErr(ErrMissingMetadata, -1, "no metadata object")
	}
	if mv.Type() != fastjson.TypeObject {
		return decodeErr(ErrBadField, -1, "metadata is "+typeName(mv)+", want object")
	}
	mo, _ := mv.Object()
	if err := d.meta.read(mo, &ev.Meta); err != nil {
		return err
	}
	m := &ev.Meta
	ev.Schema, ev.Table = m.SchemaName, m.TableName
	if d.meta.seen&seenRecordType == 0 {
		return decodeErr(ErrMissingMetadata, -1, "metadata.record-type is missing")
	}
	if d.meta.seen&seenOperation == 0 {
		return decodeErr(ErrMissingMetadata, -1, "metadata.operation is missing")
	}
	switch m.RecordType {
	case "data":
		return d.decodeData(top, ev, cols)
	case "control":
		return decodeControl(top, ev, &d.text)
	default:
		return decodeErr(ErrUnknownRecordType, -1, "metadata.record-type "+strconv.Quote(m.RecordType)+" is neither data nor control")
	}
}

func (d *Decoder) decodeData(top *fastjson.Object, ev *change.Event, cols []change.Column) *DecodeError {
	switch ev.Meta.Operation {
	case "load":
		ev.Op = change.OpLoad
	case "insert":
		ev.Op = change.OpInsert
	case "update":
		ev.Op = change.OpUpdate
	case "delete":
		ev.Op = change.OpDelete
	default:
		if IsTruncate(ev.Meta.Operation) {
			return decodeTruncate(ev, d.meta.seen)
		}
		return decodeErr(ErrUnknownOperation, -1, "data operation "+strconv.Quote(ev.Meta.Operation)+" is not load, insert, update or delete")
	}
	if d.meta.seen&seenSchema == 0 {
		return decodeErr(ErrMissingMetadata, -1, "metadata.schema-name is missing on a data record")
	}
	if d.meta.seen&seenTable == 0 {
		return decodeErr(ErrMissingMetadata, -1, "metadata.table-name is missing on a data record")
	}
	if ev.Table == "" {
		return decodeErr(ErrBadField, -1, "metadata.table-name is empty on a data record")
	}

	dv := top.Get("data")
	if dv == nil || dv.Type() == fastjson.TypeNull {
		return decodeErr(ErrMissingData, -1, "data record without a data object")
	}
	if dv.Type() != fastjson.TypeObject {
		return decodeErr(ErrBadField, -1, "data is "+typeName(dv)+", want object")
	}
	do, _ := dv.Object()
	if do.Len() == 1 {
		if doc := do.Get("_doc"); doc != nil && doc.Type() == fastjson.TypeObject {
			do, _ = doc.Object()
		}
	}

	var bo *fastjson.Object
	if f := d.cfg.BeforeImageField; f != "" {
		if bv := top.Get(f); bv != nil {
			switch bv.Type() {
			case fastjson.TypeNull:
			case fastjson.TypeObject:
				bo, _ = bv.Object()
				if bo.Len() == 0 {
					bo = nil
				}
			default:
				return decodeErr(ErrBadField, -1, f+" is "+typeName(bv)+", want object")
			}
		}
	}

	columns, before, err := d.image.read(do, bo, cols, ev.Op)
	if err != nil {
		return err
	}
	ev.Columns, ev.Before = columns, before
	return nil
}

func skipWS(b []byte) int {
	for i, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return i
		}
	}
	return len(b)
}

// validNumber checks the JSON number grammar. The NaN/Inf spellings fastjson also accepts
// (nan, inf, -inf, +inf, any case) fail it: see numberReason.
func validNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i == len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	return i == len(s)
}

// numberReason says why a number token of field is rejected.
func numberReason(field, text string) string {
	if _, ok := nonFinite(text); ok {
		return field + ": " + bareNonFinite + " " + quoteTrunc(text)
	}
	return field + ": malformed number " + quoteTrunc(text)
}

// bareNonFinite is the reason for a bare NaN or infinity token, however spelled.
const bareNonFinite = "bare NaN/Infinity is not a JSON number (DMS must send it quoted, or null)"

func equalFold3(s, lower string) bool {
	for i := 0; i < 3; i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func typeName(v *fastjson.Value) string {
	switch v.Type() {
	case fastjson.TypeObject:
		return "an object"
	case fastjson.TypeArray:
		return "an array"
	case fastjson.TypeString:
		return "a string"
	case fastjson.TypeNumber:
		return "a number"
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return "a boolean"
	default:
		return "null"
	}
}

func quoteTrunc(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// syntaxErr builds an ErrSyntax error. It runs only for rejected input, so it can afford
// encoding/json to find the byte offset that fastjson does not report.
func syntaxErr(data []byte, reason string) *DecodeError {
	off := -1
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			off = int(se.Offset) - 1 // Offset counts the bytes read, including the bad one
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			off = len(data)
		}
	} else if end := int(dec.InputOffset()); end < len(data) {
		if ws := skipWS(data[end:]); end+ws < len(data) {
			off = end + ws
			reason = "unexpected data after the JSON value"
		}
	}
	if off >= 0 && off < len(data) {
		// fastjson reads Inf out of Infinity and then fails on the tail: name the column.
		start := off
		if start > 0 && (data[start-1] == '-' || data[start-1] == '+') {
			start--
		}
		end := start
		for end < len(data) && (data[end] == '-' || data[end] == '+' || data[end] >= 'A' && data[end] <= 'Z' || data[end] >= 'a' && data[end] <= 'z') {
			end++
		}
		if _, ok := nonFinite(string(data[start:end])); ok {
			path, _ := fieldAt(data, start)
			// The path comes from the record's keys, which need not be UTF-8 here.
			return decodeErr(ErrSyntax, start, strings.ToValidUTF8(path, "\uFFFD")+": "+bareNonFinite+" "+quoteTrunc(string(data[start:end])))
		}
	}
	if len(reason) > 200 {
		reason = reason[:200] + "..."
	}
	return decodeErr(ErrSyntax, off, strings.ToValidUTF8(reason, "\uFFFD"))
}
