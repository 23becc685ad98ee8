package dms

import (
	"maps"
	"slices"

	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// RedactedKey is the top-level member of a DMS record whose column values were redacted
// (RedactRecord): {"<column>": "hashed" | "masked" | "excluded", ...}. The decoder ignores it
// (unknown top-level members are ignored); RedactedColumns reads it back, so that a replay
// knows which values already are what the sink stores.
const RedactedKey = "dms2iceberg-redacted"

// RedactRecord applies the column rules of the record's source table to the DMS JSON record
// raw, the way the sink applies them to what it stores: in every top-level object except
// metadata and control (data, the before-image whatever its field name, a data._doc wrapper),
// and, with cfg.BIEnabled, to add-before-image-columns columns under their column's rule,
// excluded columns are removed, hashed and masked ones get the value the sink stores (rules'
// Value), and RedactedKey lists them. Columns RedactedKey already lists are left as they are,
// so redacting twice changes nothing. Other top-level members that are not objects (the
// record does not decode) become null.
//
// src is the source table "schema.table" when the caller knows it, else "" (it is read from
// metadata); rules returns nil for a table without column rules (the record is kept as it is).
// ok is false when raw is not a JSON object naming its table: no rule can be matched. out is
// raw itself when nothing was redacted.
func RedactRecord(raw []byte, src string, cfg Config, rules func(src string) TableRules) (out []byte, table string, ok bool) {
	var p fastjson.Parser
	v, err := p.ParseBytes(raw)
	if err != nil {
		return raw, "", false
	}
	top, err := v.Object()
	if err != nil {
		return raw, "", false
	}
	if src == "" {
		m := top.Get("metadata")
		name := string(m.GetStringBytes("table-name"))
		if name == "" {
			return raw, "", false
		}
		src = string(m.GetStringBytes("schema-name")) + "." + name
	}
	r := rules(src)
	if r == nil {
		return raw, src, true
	}
	done := redactedOf(top)
	applied := map[string]string{}
	var a fastjson.Arena
	redact := func(o *fastjson.Object, data bool) {
		var drop []string
		o.Visit(func(key []byte, v *fastjson.Value) {
			name := string(key)
			if data && cfg.BIEnabled {
				if n, ok := stripBIName(cfg, name); ok {
					name = n
				}
			}
			rule := r.Rule(name)
			if rule == "" || done[name] != "" {
				return
			}
			applied[name] = rule
			if rule == RuleExclude {
				drop = append(drop, string(key))
				return
			}
			if out, _ := r.Value(name, jsonValue(v)); out.Kind != change.KindNull {
				*v = *a.NewString(out.Text)
			}
		})
		for _, k := range drop {
			for o.Get(k) != nil {
				o.Del(k)
			}
		}
	}
	emptied := false
	top.Visit(func(key []byte, v *fastjson.Value) {
		k := string(key)
		switch {
		case k == "metadata" || k == "control" || k == RedactedKey || v.Type() == fastjson.TypeNull:
			return
		case v.Type() != fastjson.TypeObject:
			// Columns in something else than an object (the record does not decode): no rule
			// can find them, so nothing of it is kept.
			*v = *a.NewNull()
			emptied = true
			return
		}
		o, _ := v.Object()
		if k == "data" && o.Len() == 1 {
			if doc := o.Get("_doc"); doc != nil && doc.Type() == fastjson.TypeObject {
				o, _ = doc.Object()
			}
		}
		redact(o, k == "data")
	})
	switch {
	case len(applied) == 0 && !emptied:
		return raw, src, true
	case len(applied) == 0:
		return v.MarshalTo(nil), src, true
	}
	maps.Copy(done, applied)
	mark := a.NewObject()
	for _, col := range slices.Sorted(maps.Keys(done)) {
		mark.Set(col, a.NewString(done[col]))
	}
	top.Set(RedactedKey, mark)
	return v.MarshalTo(nil), src, true
}

// RedactedColumns returns the columns RedactRecord redacted in raw and their rules, nil when
// raw is not a redacted record.
func RedactedColumns(raw []byte) map[string]string {
	var p fastjson.Parser
	v, err := p.ParseBytes(raw)
	if err != nil {
		return nil
	}
	top, err := v.Object()
	if err != nil {
		return nil
	}
	m := redactedOf(top)
	if len(m) == 0 {
		return nil
	}
	return m
}

func redactedOf(top *fastjson.Object) map[string]string {
	out := map[string]string{}
	mv := top.Get(RedactedKey)
	if mv == nil {
		return out
	}
	if mo, err := mv.Object(); err == nil {
		mo.Visit(func(key []byte, v *fastjson.Value) {
			if s := string(v.GetStringBytes()); s != "" {
				out[string(key)] = s
			}
		})
	}
	return out
}

// jsonValue is the change.Value the decoder makes of v (Decoder.value).
func jsonValue(v *fastjson.Value) change.Value {
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return change.Value{Kind: change.KindString, Text: string(b)}
	case fastjson.TypeNumber:
		return change.Value{Kind: change.KindNumber, Text: string(v.MarshalTo(nil))}
	case fastjson.TypeTrue:
		return change.Value{Kind: change.KindBool, Text: "true"}
	case fastjson.TypeFalse:
		return change.Value{Kind: change.KindBool, Text: "false"}
	case fastjson.TypeNull:
		return change.Value{Kind: change.KindNull}
	}
	return change.Value{Kind: change.KindJSON, Text: string(v.MarshalTo(nil))}
}

// stripBIName is Config.stripBI for a string.
func stripBIName(cfg Config, name string) (string, bool) {
	p, s := cfg.BIPrefix, cfg.BISuffix
	if len(name) <= len(p)+len(s) || name[:len(p)] != p || name[len(name)-len(s):] != s {
		return "", false
	}
	return name[len(p) : len(name)-len(s)], true
}
