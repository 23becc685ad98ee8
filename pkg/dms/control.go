package dms

import (
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Control records: their table-def parsing, and truncates written as data records. Control
// records are rare, so this path favours clarity over allocations; the strings go into the
// event's arena like all others.

// decodeControl fills the control part of a control record.
func decodeControl(top *fastjson.Object, ev *change.Event, text *eventText) *DecodeError {
	ctl := &change.Control{Op: ev.Meta.Operation}
	if cv := top.Get("control"); cv != nil {
		switch cv.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeObject:
			if tv := cv.Get("table-def"); tv != nil && tv.Type() != fastjson.TypeNull {
				td, err := tableDef(tv, text)
				if err != nil {
					return err
				}
				ctl.TableDef = td
			}
		default:
			return decodeErr(ErrBadField, -1, "control is "+typeName(cv)+", want object")
		}
	}
	ev.Op = change.OpControl
	ev.Control = ctl
	return nil
}

// IsTruncate reports whether a record's operation is a table truncate: DMS documents no name
// for it on Kinesis (shared/dms-format.md §5), so "truncate" (as a data or a control operation),
// "truncate-table" and the legacy guide's "TruncateTable" are accepted, in any case. The sink
// applies it as one snapshot that removes every row older than it.
func IsTruncate(op string) bool {
	return strings.EqualFold(op, "truncate") || strings.EqualFold(op, "truncate-table") || strings.EqualFold(op, "TruncateTable")
}

// decodeTruncate makes a data record whose operation is a truncate the control record it is;
// seen is what metaReader found of the metadata.
func decodeTruncate(ev *change.Event, seen uint16) *DecodeError {
	if seen&seenSchema == 0 {
		return decodeErr(ErrMissingMetadata, -1, "metadata.schema-name is missing on a truncate record")
	}
	if seen&seenTable == 0 || ev.Table == "" {
		return decodeErr(ErrMissingMetadata, -1, "metadata.table-name is missing or empty on a truncate record")
	}
	ev.Op = change.OpControl
	ev.Control = &change.Control{Op: ev.Meta.Operation}
	return nil
}

func tableDef(tv *fastjson.Value, text *eventText) (*change.TableDef, *DecodeError) {
	if tv.Type() != fastjson.TypeObject {
		return nil, decodeErr(ErrBadField, -1, "control.table-def is "+typeName(tv)+", want object")
	}
	td := &change.TableDef{}
	if cv := tv.Get("columns"); cv != nil && cv.Type() != fastjson.TypeNull {
		co, err := cv.Object()
		if err != nil {
			return nil, decodeErr(ErrBadField, -1, "control.table-def.columns is "+typeName(cv)+", want object")
		}
		td.Columns = make([]change.ColumnDef, 0, co.Len())
		var derr *DecodeError
		co.Visit(func(key []byte, v *fastjson.Value) {
			if derr != nil {
				return
			}
			var c change.ColumnDef
			c, derr = columnDef(key, v, text)
			td.Columns = append(td.Columns, c)
		})
		if derr != nil {
			return nil, derr
		}
	}
	if pv := tv.Get("primary-key"); pv != nil {
		switch pv.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			b, _ := pv.StringBytes()
			td.PrimaryKey = []string{text.str(b)}
		case fastjson.TypeArray:
			items, _ := pv.Array()
			td.PrimaryKey = make([]string, 0, len(items))
			for i, it := range items {
				b, err := it.StringBytes()
				if err != nil {
					return nil, decodeErr(ErrBadField, -1, "control.table-def.primary-key["+strconv.Itoa(i)+"] is "+typeName(it)+", want string")
				}
				td.PrimaryKey = append(td.PrimaryKey, text.str(b))
			}
		default:
			return nil, decodeErr(ErrBadField, -1, "control.table-def.primary-key is "+typeName(pv)+", want array of strings")
		}
	}
	return td, nil
}

func columnDef(key []byte, v *fastjson.Value, text *eventText) (change.ColumnDef, *DecodeError) {
	c := change.ColumnDef{Name: text.str(key), Nullable: true}
	o, err := v.Object()
	if err != nil {
		return c, decodeErr(ErrBadField, -1, "control.table-def.columns."+string(key)+" is "+typeName(v)+", want object")
	}
	var derr *DecodeError
	o.Visit(func(k []byte, fv *fastjson.Value) {
		if derr != nil || fv.Type() == fastjson.TypeNull {
			return
		}
		field := string(k)
		bad := func(want string) {
			derr = decodeErr(ErrBadField, -1, "control.table-def.columns."+string(key)+"."+field+" is "+typeName(fv)+", want "+want)
		}
		switch field {
		case "type":
			b, err := fv.StringBytes()
			if err != nil {
				bad("string")
				return
			}
			c.Type = text.str(b)
		case "length", "precision", "scale":
			n, ok := intField(fv)
			if !ok {
				bad("integer")
				return
			}
			switch field {
			case "length":
				c.Length = n
			case "precision":
				c.Precision = n
			default:
				c.Scale = n
			}
		case "nullable":
			switch fv.Type() {
			case fastjson.TypeTrue:
				c.Nullable = true
			case fastjson.TypeFalse:
				c.Nullable = false
			case fastjson.TypeString:
				b, _ := fv.StringBytes()
				switch string(b) {
				case "true", "TRUE", "True":
					c.Nullable = true
				case "false", "FALSE", "False":
					c.Nullable = false
				default:
					bad("boolean")
				}
			default:
				bad("boolean")
			}
		}
	})
	return c, derr
}

// intField reads a non-negative-or-negative integer written as a JSON number or numeric string.
func intField(v *fastjson.Value) (int, bool) {
	var s string
	switch v.Type() {
	case fastjson.TypeNumber:
		s = string(v.MarshalTo(nil))
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		s = string(b)
	default:
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, false
	}
	return n, true
}
