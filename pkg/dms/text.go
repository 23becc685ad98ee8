package dms

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkText enforces the string rule of Decode on a document fastjson has parsed: every JSON
// string (keys, values, metadata, table-defs, strings nested in JSON values) must be Unicode
// text, because fastjson's best-effort unescaping would otherwise store something other than
// the source value:
//
//   - bytes that are not UTF-8 (including UTF-8-encoded surrogates, CESU-8) → ErrBadString;
//   - a \u escape of a surrogate that is not a high surrogate immediately followed by a \u
//     escape of a low surrogate → ErrBadString (fastjson kept the six characters, or merged a
//     high surrogate with the next escape into U+FFFD);
//   - an escape JSON does not define (\q, \u12) → ErrSyntax (fastjson kept it literally).
//
// Once these hold, fastjson's unescaping is exact. The check allocates nothing: utf8.Valid over
// the whole record and one IndexByte per backslash. A document that parsed has backslashes only
// inside strings, so every backslash found by scanning escape by escape starts an escape.
func checkText(data []byte) *DecodeError {
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return textErr(ErrBadString, data, off, "invalid UTF-8")
	}
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j
		if i+1 >= len(data) {
			return textErr(ErrSyntax, data, i, "invalid escape")
		}
		switch data[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
			continue
		case 'u':
		default:
			return textErr(ErrSyntax, data, i, "invalid escape "+string(data[i:i+2]))
		}
		r, ok := hex4(data, i+2)
		if !ok {
			return textErr(ErrSyntax, data, i, "invalid escape "+string(data[i:min(i+6, len(data))]))
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if r2, ok := hex4(data, i+8); ok && data[i+6] == '\\' && data[i+7] == 'u' && r2 >= 0xDC00 && r2 < 0xE000 {
				i += 12
				continue
			}
			return textErr(ErrBadString, data, i, "lone surrogate escape "+string(data[i:i+6])+" (a high surrogate not followed by a low one)")
		case r >= 0xDC00 && r < 0xE000:
			return textErr(ErrBadString, data, i, "lone surrogate escape "+string(data[i:i+6])+" (a low surrogate without a high one)")
		}
		i += 6
	}
}

// hex4 parses the four hex digits at data[i:i+4].
func hex4(data []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		h, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// textErr builds the error for a bad byte at off, naming the JSON member that holds it. It
// runs only for rejected records.
func textErr(kind ErrorKind, data []byte, off int, what string) *DecodeError {
	path, key := fieldAt(data, off)
	reason := path + ": " + what + " in a string value"
	if key != "" {
		reason = path + ": " + what + " in the key " + quoteTrunc(key)
	}
	return decodeErr(kind, off, strings.ToValidUTF8(reason, "\uFFFD"))
}

// fieldAt names the member of a parsed document that holds byte off, as a path: data.name,
// metadata.table-name, control.table-def.columns.a.type, data.tags[1]. When off is inside a
// key, path names the object holding the key and key is the key's raw text.
func fieldAt(data []byte, off int) (path, key string) {
	type frame struct {
		obj, wantKey bool
		key          string
		idx          int
	}
	var st []frame
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '{':
			st = append(st, frame{obj: true, wantKey: true})
		case c == '[':
			st = append(st, frame{})
		case (c == '}' || c == ']') && len(st) > 0:
			st = st[:len(st)-1]
		case c == ',' && len(st) > 0:
			if top := &st[len(st)-1]; top.obj {
				top.wantKey = true
			} else {
				top.idx++
			}
		case c == ':' && len(st) > 0:
			st[len(st)-1].wantKey = false
		case c == '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			isKey := len(st) > 0 && st[len(st)-1].obj && st[len(st)-1].wantKey
			raw := string(data[i+1 : min(j, len(data))])
			if off < i || off > j {
				if isKey {
					st[len(st)-1].key = raw
				}
				i = j
				continue
			}
			if isKey {
				return joinPath(len(st)-1, func(k int) (bool, string, int) { return st[k].obj, st[k].key, st[k].idx }), raw
			}
			return joinPath(len(st), func(k int) (bool, string, int) { return st[k].obj, st[k].key, st[k].idx }), ""
		}
		if i >= off {
			break
		}
	}
	return joinPath(len(st), func(k int) (bool, string, int) { return st[k].obj, st[k].key, st[k].idx }), ""
}

// joinPath joins the first n frames (the top-level object contributes its member's key only).
func joinPath(n int, frame func(int) (obj bool, key string, idx int)) string {
	var b strings.Builder
	for k := 0; k < n; k++ {
		obj, key, idx := frame(k)
		if obj {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(key)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(idx))
			b.WriteByte(']')
		}
	}
	if b.Len() == 0 {
		return "(top level)"
	}
	return b.String()
}
