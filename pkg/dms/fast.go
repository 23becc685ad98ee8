package dms

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
	"unsafe"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The fast path of Decode: one pass over a data record of the common shape, without fastjson.
//
// fastjson parses the whole record into a tree, then Decode visits it, checkText scans it again
// for UTF-8 and escapes, and every string is unescaped and copied once more: in
// BenchmarkPipeline's profile that was about a third of the process's CPU, the largest part of
// it. Most records are flat: an envelope of metadata (strings and numbers), a data object (and
// maybe a before-image) of strings, numbers, booleans and nulls. decodeFast reads exactly that
// shape in one pass, keeping spans of data, checks and copies each string once, and builds the
// same Event the general path builds. Anything else (a control or truncate record, an object or
// array value, a duplicated envelope or metadata key, an escaped key, a null or unusual metadata
// value, and every error) makes it give up, and Decode runs the general path, which gives the
// answer and the error exactly as before. FuzzDecode checks that both paths give equal events.

// span is the content of a JSON string (between its quotes) or a number token in the record.
type span struct {
	start, end int32
	esc        bool // has a backslash escape
}

// fastCol is a column of a data or before-image object.
type fastCol struct {
	key  span
	kind change.Kind
	val  span // string content or number token; unused for booleans and null
	bi   bool // an add-before-image-columns column (key is the source column name)
}

// metaFields are the metadata keys, in the order of the spans fastScanner keeps.
var metaFields = [...]string{"timestamp", "record-type", "operation", "partition-key-type",
	"partition-key-value", "schema-name", "table-name", "transaction-id", "transaction-record-id",
	"prev-transaction-id", "prev-transaction-record-id", "commit-timestamp", "stream-position"}

const (
	metaRecordType = 1
	metaOperation  = 2
	metaSchema     = 5
	metaTable      = 6
)

// fastScanner is the fast path's reader of a record: one pass that checks the record has the
// common shape and keeps the spans of its metadata and columns (its scratch is kept in the
// Decoder between records). It reads the record only; eventText makes the event's strings out
// of the spans.
type fastScanner struct {
	cfg     Config
	meta    [len(metaFields)]span
	metaSet uint16
	cols    []fastCol
	before  []fastCol
}

// decodeFast decodes data into ev when data has the common shape, and reports whether it did.
// When it did not, ev.Meta and the backing array of cols may have been written to (the general
// path starts by clearing ev).
func (d *Decoder) decodeFast(data []byte, ev *change.Event, cols []change.Column) bool {
	s := &d.fast
	if !s.scan(data) {
		return false
	}
	op, ok := s.dataOp(data)
	if !ok {
		return false
	}
	// Everything is checked but the escapes: copy the strings out, then fill in the event.
	// From here on ev is written to; should a late escape send the record to the general path
	// after all, Decode clears what was written.
	// Shared: strings point into data, and only escaped ones are copied out (eventText.span).
	d.text.startFast(len(data))
	m := &ev.Meta
	if !s.copyMeta(data, m, &d.text) {
		return false
	}
	columns, before, ok := d.fastImages(data, cols, op)
	if !ok {
		return false
	}
	ev.Schema, ev.Table, ev.Op = m.SchemaName, m.TableName, op
	ev.Columns, ev.Before, ev.Control = columns, before, nil
	return true
}

// fastImages makes the event's columns and before-image of the scanned record with operation
// op, reusing the backing array of cols when it is large enough.
func (d *Decoder) fastImages(data []byte, cols []change.Column, op change.Op) (columns, before []change.Column, ok bool) {
	s := &d.fast
	n := len(s.cols)
	total := n + len(s.before)
	var buf []change.Column
	switch {
	case total == 0 && cols == nil:
		buf = noColumns
	case cap(cols) >= total:
		buf = cols[:total]
	default:
		buf = d.cols.take(total)
	}
	front, back := 0, n-1
	for _, c := range s.cols {
		col, ok := d.text.column(data, c)
		if !ok {
			return nil, nil, false
		}
		if c.bi {
			buf[back] = col
			back--
		} else {
			buf[front] = col
			front++
		}
	}
	for i, j := front, n-1; i < j; i, j = i+1, j-1 {
		buf[i], buf[j] = buf[j], buf[i]
	}
	if len(s.before) > 0 {
		for k, c := range s.before {
			col, ok := d.text.column(data, c)
			if !ok {
				return nil, nil, false
			}
			buf[n+k] = col
		}
		before = buf[n:total:total]
	} else if front < n && op == change.OpUpdate {
		before = buf[front:n:n]
	}
	return buf[:front], before, true
}

// scan reads the record's envelope: one object holding a metadata object, a data object, maybe
// the before-image (an object or null) and other keys with scalar values, each key once. The
// record's keys are read in this one loop, which is the per-record part of the hot path. It
// reports whether the record has that shape; the checks of what the metadata says are dataOp's.
func (s *fastScanner) scan(data []byte) bool {
	if len(data) > 1<<30 || s.cfg.BeforeImageField == "metadata" || s.cfg.BeforeImageField == "data" {
		return false
	}
	s.metaSet, s.cols, s.before = 0, s.cols[:0], s.before[:0]
	i := skipWS(data)
	if i == len(data) || data[i] != '{' {
		return false
	}
	i = skipWS1(data, i+1)
	var seen uint8 // 1 metadata, 2 data, 4 before-image
	for {
		key, j, ok := scanString(data, i)
		if !ok || key.esc {
			return false
		}
		i = skipWS1(data, j)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipWS1(data, i+1)
		if i >= len(data) {
			return false
		}
		k := data[key.start:key.end]
		switch {
		case string(k) == "metadata":
			if seen&1 != 0 || data[i] != '{' {
				return false
			}
			seen |= 1
			if i, ok = s.readMeta(data, i); !ok {
				return false
			}
		case string(k) == "data":
			if seen&2 != 0 || data[i] != '{' {
				return false
			}
			seen |= 2
			if s.cols, i, ok = s.readObject(data, i, s.cols, s.cfg.BIEnabled); !ok {
				return false
			}
		case s.cfg.BeforeImageField != "" && string(k) == s.cfg.BeforeImageField:
			if seen&4 != 0 {
				return false
			}
			seen |= 4
			switch data[i] {
			case '{':
				if s.before, i, ok = s.readObject(data, i, s.before, false); !ok {
					return false
				}
			case 'n':
				if i, ok = scanLiteral(data, i, "null"); !ok {
					return false
				}
			default:
				return false
			}
		default:
			if _, i, ok = scanScalar(data, i); !ok {
				return false
			}
		}
		i = skipWS1(data, i)
		if i >= len(data) {
			return false
		}
		if data[i] == '}' {
			i++
			break
		}
		if data[i] != ',' {
			return false
		}
		i = skipWS1(data, i+1)
	}
	return skipWS1(data, i) == len(data) && seen&3 == 3
}

// dataOp checks what the scanned metadata says: a data record with the required fields and a
// non-empty table name, whose operation it returns.
func (s *fastScanner) dataOp(data []byte) (change.Op, bool) {
	const need = 1<<metaRecordType | 1<<metaOperation | 1<<metaSchema | 1<<metaTable
	if s.metaSet&need != need || string(s.metaBytes(data, metaRecordType)) != "data" {
		return 0, false
	}
	var op change.Op
	switch string(s.metaBytes(data, metaOperation)) {
	case "load":
		op = change.OpLoad
	case "insert":
		op = change.OpInsert
	case "update":
		op = change.OpUpdate
	case "delete":
		op = change.OpDelete
	default:
		return 0, false
	}
	if t := s.meta[metaTable]; t.end == t.start {
		return 0, false
	}
	return op, true
}

// copyMeta sets m to the scanned metadata, its strings made by text.
func (s *fastScanner) copyMeta(data []byte, m *change.Metadata, text *eventText) bool {
	*m = change.Metadata{}
	dst := [...]*string{&m.Timestamp, &m.RecordType, &m.Operation, &m.PartitionKeyType,
		&m.PartitionKeyValue, &m.SchemaName, &m.TableName, &m.TransactionID, &m.TransactionRecordID,
		&m.PrevTransactionID, &m.PrevTransactionRecordID, &m.CommitTimestamp, &m.StreamPosition}
	for f := range metaFields {
		if s.metaSet&(1<<f) == 0 {
			continue
		}
		v, ok := text.span(data, s.meta[f])
		if !ok {
			return false
		}
		*dst[f] = v
	}
	return true
}

// metaBytes is the raw content of metadata field f (escaped fields are never compared: their
// raw bytes differ from every name they are compared with, and the general path decides).
func (s *fastScanner) metaBytes(data []byte, f int) []byte {
	sp := s.meta[f]
	if sp.esc {
		return nil
	}
	return data[sp.start:sp.end]
}

// readMeta reads the metadata object at data[i] ('{').
func (s *fastScanner) readMeta(data []byte, i int) (int, bool) {
	i = skipWS1(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	for {
		key, j, ok := scanString(data, i)
		if !ok || key.esc {
			return 0, false
		}
		i = skipWS1(data, j)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipWS1(data, i+1)
		kind, val, j2, ok := scanValue(data, i)
		if !ok {
			return 0, false
		}
		i = j2
		f := metaIndex(data[key.start:key.end])
		if f >= 0 {
			// Known fields: a string or a number once; null, other kinds and repeats are left to
			// the general path.
			if s.metaSet&(1<<f) != 0 || (kind != change.KindString && kind != change.KindNumber) {
				return 0, false
			}
			s.meta[f] = val
			s.metaSet |= 1 << f
		}
		i = skipWS1(data, i)
		if i >= len(data) {
			return 0, false
		}
		if data[i] == '}' {
			return i + 1, true
		}
		if data[i] != ',' {
			return 0, false
		}
		i = skipWS1(data, i+1)
	}
}

func metaIndex(k []byte) int {
	switch string(k) {
	case "timestamp":
		return 0
	case "record-type":
		return metaRecordType
	case "operation":
		return metaOperation
	case "partition-key-type":
		return 3
	case "partition-key-value":
		return 4
	case "schema-name":
		return metaSchema
	case "table-name":
		return metaTable
	case "transaction-id":
		return 7
	case "transaction-record-id":
		return 8
	case "prev-transaction-id":
		return 9
	case "prev-transaction-record-id":
		return 10
	case "commit-timestamp":
		return 11
	case "stream-position":
		return 12
	}
	return -1
}

// readObject reads the data or before-image object at data[i] ('{') into cols.
func (s *fastScanner) readObject(data []byte, i int, cols []fastCol, bi bool) ([]fastCol, int, bool) {
	i = skipWS1(data, i+1)
	if i < len(data) && data[i] == '}' {
		return cols, i + 1, true
	}
	for {
		key, j, ok := scanString(data, i)
		if !ok || key.esc {
			return nil, 0, false
		}
		i = skipWS1(data, j)
		if i >= len(data) || data[i] != ':' {
			return nil, 0, false
		}
		i = skipWS1(data, i+1)
		kind, val, j2, ok := scanValue(data, i)
		if !ok {
			return nil, 0, false
		}
		i = j2
		c := fastCol{key: key, kind: kind, val: val}
		if bi {
			if name, ok := s.cfg.stripBI(data[key.start:key.end]); ok {
				c.bi = true
				c.key.start = key.start + int32(len(s.cfg.BIPrefix))
				c.key.end = c.key.start + int32(len(name))
			}
		}
		cols = append(cols, c)
		i = skipWS1(data, i)
		if i >= len(data) {
			return nil, 0, false
		}
		if data[i] == '}' {
			return cols, i + 1, true
		}
		if data[i] != ',' {
			return nil, 0, false
		}
		i = skipWS1(data, i+1)
	}
}

// appendUnescaped appends the JSON string content s, unescaped, to dst.
func appendUnescaped(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return nil, false
		}
		switch s[i+1] {
		case '"', '\\', '/':
			dst = append(dst, s[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				return nil, false
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				r2, ok := hex4(s, i+8)
				if !ok || s[i+6] != '\\' || s[i+7] != 'u' || r2 < 0xDC00 || r2 >= 0xE000 {
					return nil, false
				}
				dst = utf8.AppendRune(dst, (r-0xD800)<<10|(r2-0xDC00)+0x10000)
				i += 12
				continue
			case r >= 0xDC00 && r < 0xE000:
				return nil, false
			}
			dst = utf8.AppendRune(dst, r)
			i += 6
			continue
		default:
			return nil, false
		}
		i += 2
	}
	return dst, true
}

// skipWS1 skips JSON whitespace from data[i].
func skipWS1(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString reads the string whose opening quote is at data[i]: its content span and the index
// after the closing quote. Its bytes must be UTF-8.
func scanString(data []byte, i int) (span, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return span{}, 0, false
	}
	start := i + 1
	esc, ascii := false, true
	for j := start; j < len(data); j++ {
		// Eight bytes at a time up to the next byte that needs a look.
		for j+8 <= len(data) {
			if m := strStops(binary.LittleEndian.Uint64(data[j:])); m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			j += 8
		}
		if j >= len(data) {
			break
		}
		c := data[j]
		if !strSpecial[c] {
			continue
		}
		switch c {
		case '"':
			if !ascii && !utf8.Valid(data[start:j]) {
				return span{}, 0, false
			}
			return span{start: int32(start), end: int32(j), esc: esc}, j + 1, true
		case '\\':
			esc = true
			j++ // the escaped byte is never the closing quote
		default:
			ascii = false
		}
	}
	return span{}, 0, false
}

// strStops marks, in the eight bytes of x (little-endian), the bytes scanString must look at
// (strSpecial) with their high bit. A byte is zero after the XOR with the quote or the backslash
// exactly when it is one; (v - 0x01…) &^ v & 0x80… flags every zero byte of v, and can flag a
// byte above a flagged one (a borrow), never one below: the lowest flag is always a real one,
// and only the lowest is used. Non-ASCII bytes are their own high bit.
func strStops(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, b := x^(ones*'"'), x^(ones*'\\')
	return ((q-ones)&^q | (b-ones)&^b | x) & highs
}

// strSpecial marks the bytes scanString must look at: the quote, the backslash, and non-ASCII.
var strSpecial = func() (t [256]bool) {
	t['"'], t['\\'] = true, true
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	return t
}()

// scanValue reads a scalar value at data[i]. For booleans val.start is 1 for true, 0 for false.
func scanValue(data []byte, i int) (change.Kind, span, int, bool) {
	if i >= len(data) {
		return 0, span{}, 0, false
	}
	switch c := data[i]; {
	case c == '"':
		sp, j, ok := scanString(data, i)
		return change.KindString, sp, j, ok
	case c == '-' || c >= '0' && c <= '9':
		j := i
		for j < len(data) && (data[j] >= '0' && data[j] <= '9' || data[j] == '-' || data[j] == '+' || data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
			j++
		}
		if !validNumber(unsafe.String(&data[i], j-i)) || j < len(data) && !delimiter(data[j]) {
			return 0, span{}, 0, false
		}
		return change.KindNumber, span{start: int32(i), end: int32(j)}, j, true
	case c == 't':
		j, ok := scanLiteral(data, i, "true")
		return change.KindBool, span{start: 1}, j, ok
	case c == 'f':
		j, ok := scanLiteral(data, i, "false")
		return change.KindBool, span{}, j, ok
	case c == 'n':
		j, ok := scanLiteral(data, i, "null")
		return change.KindNull, span{}, j, ok
	}
	return 0, span{}, 0, false // objects, arrays and anything else: the general path
}

// scanScalar reads a scalar value of a key fastScanner does not use.
func scanScalar(data []byte, i int) (change.Kind, int, bool) {
	k, _, j, ok := scanValue(data, i)
	return k, j, ok
}

func scanLiteral(data []byte, i int, lit string) (int, bool) {
	j := i + len(lit)
	if j > len(data) || string(data[i:j]) != lit || j < len(data) && !delimiter(data[j]) {
		return 0, false
	}
	return j, true
}

// delimiter reports a byte that may follow a scalar value.
func delimiter(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
