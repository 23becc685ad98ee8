package workload

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// object is a JSON object that keeps its key order, the way DMS composes its records.
type object struct {
	keys []string
	vals []any // change.Value, *object, []string, string, int64, bool
}

func (o *object) set(k string, v any) *object {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
	return o
}

// encode writes o the way DMS does. DMS prints its records with cJSON: MessageFormat "json" is
// cJSON's formatted output (tab indentation, a tab after each colon, ", " between array items),
// "json-unformatted" is the compact output followed by a newline.
func encode(dst []byte, o *object, pretty bool) []byte {
	dst = appendObject(dst, o, pretty, 1)
	if !pretty {
		dst = append(dst, '\n')
	}
	return dst
}

func appendObject(dst []byte, o *object, pretty bool, depth int) []byte {
	dst = append(dst, '{')
	if pretty {
		dst = append(dst, '\n')
	}
	for i, k := range o.keys {
		if pretty {
			for range depth {
				dst = append(dst, '\t')
			}
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		if pretty {
			dst = append(dst, '\t')
		}
		dst = appendValue(dst, o.vals[i], pretty, depth+1)
		if i < len(o.keys)-1 {
			dst = append(dst, ',')
		}
		if pretty {
			dst = append(dst, '\n')
		}
	}
	if pretty {
		for range depth - 1 {
			dst = append(dst, '\t')
		}
	}
	return append(dst, '}')
}

func appendValue(dst []byte, v any, pretty bool, depth int) []byte {
	switch v := v.(type) {
	case change.Value:
		switch v.Kind {
		case change.KindNull:
			return append(dst, "null"...)
		case change.KindString:
			return appendString(dst, v.Text)
		default: // numbers, booleans and JSON text are written as they are
			return append(dst, v.Text...)
		}
	case *object:
		return appendObject(dst, v, pretty, depth)
	case []string:
		dst = append(dst, '[')
		for i, s := range v {
			if i > 0 {
				dst = append(dst, ',')
				if pretty {
					dst = append(dst, ' ')
				}
			}
			dst = appendString(dst, s)
		}
		return append(dst, ']')
	case string:
		return appendString(dst, v)
	case int64:
		return strconv.AppendInt(dst, v, 10)
	case int:
		return strconv.AppendInt(dst, int64(v), 10)
	case bool:
		return strconv.AppendBool(dst, v)
	default:
		panic(fmt.Sprintf("workload: cannot encode %T", v))
	}
}

const hexLower = "0123456789abcdef"

// appendString escapes like cJSON: quote, backslash and control characters; everything else,
// including non-ASCII UTF-8 and '/', is written as it is. s must be valid UTF-8.
func appendString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		panic("workload: string is not valid UTF-8: " + strconv.Quote(s))
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexLower[c>>4], hexLower[c&0xF])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
