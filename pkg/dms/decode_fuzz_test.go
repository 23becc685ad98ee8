package dms

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

var fuzzConfigs = []Config{DefaultConfig(), biCfg, biSuffixCfg, customBeforeCfg}

func fuzzConfigIndex(c *Config) uint8 {
	if c == nil {
		return 0
	}
	for i, fc := range fuzzConfigs {
		if fc == *c {
			return uint8(i)
		}
	}
	return 0
}

// FuzzDecode: no input panics; errors are well-formed *DecodeErrors; successful events are
// consistent with their metadata and do not alias the input.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add([]byte(tc.in), fuzzConfigIndex(tc.cfg))
	}
	f.Add(benchUpdate, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, cfgSel uint8) {
		cfg := fuzzConfigs[int(cfgSel)%len(fuzzConfigs)]
		d := NewDecoder(cfg)
		input := append([]byte(nil), data...)
		var ev change.Event
		err := d.Decode(input, &ev)
		// The fast path (fast.go) gives what the general path gives, error or event.
		slow := NewDecoder(cfg)
		slow.slowOnly = true
		var sev change.Event
		serr := slow.Decode(append([]byte(nil), data...), &sev)
		if (err == nil) != (serr == nil) || err != nil && err.Error() != serr.Error() {
			t.Fatalf("fast path error %v, general path error %v", err, serr)
		}
		if err == nil && !reflect.DeepEqual(ev, sev) {
			t.Fatalf("fast path event\n%s\ngeneral path event\n%s", dumpEvent(&ev), dumpEvent(&sev))
		}
		// DecodeShared gives the same event or error, and a later Decode into the same decoder
		// does not change it while its input is left alone.
		shared := append([]byte(nil), data...)
		var shev change.Event
		sherr := d.DecodeShared(shared, &shev)
		if (err == nil) != (sherr == nil) || err != nil && err.Error() != sherr.Error() {
			t.Fatalf("Decode error %v, DecodeShared error %v", err, sherr)
		}
		if err == nil {
			dump := dumpEvent(&shev)
			var other, again change.Event
			_ = d.Decode(benchUpdate, &other)
			// Nor does a later DecodeShared into a fresh event, which carves its columns and
			// escaped text from the same slabs (slab.go).
			_ = d.DecodeShared(append([]byte(nil), data...), &again)
			if !reflect.DeepEqual(shev, sev) || dumpEvent(&shev) != dump {
				t.Fatalf("DecodeShared event\n%s\ngeneral path event\n%s", dumpEvent(&shev), dumpEvent(&sev))
			}
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			if de.Kind < ErrSyntax || de.Kind > ErrBadString || de.Reason == "" || !utf8.ValidString(de.Reason) {
				t.Fatalf("malformed error %+v", de)
			}
			if de.Offset < -1 || de.Offset > len(data) {
				t.Fatalf("offset %d outside input of %d bytes", de.Offset, len(data))
			}
			if ev.Op != change.OpUnknown || ev.Columns != nil || ev.Before != nil || ev.Control != nil {
				t.Fatalf("event not cleared on error")
			}
			if de.Kind == ErrSyntax && json.Valid(data) && !strings.Contains(de.Reason, "depth") {
				t.Fatalf("valid JSON rejected as syntax error: %v", err)
			}
			return
		}
		if ev.Schema != ev.Meta.SchemaName || ev.Table != ev.Meta.TableName {
			t.Fatalf("Schema/Table %q.%q differ from metadata %q.%q", ev.Schema, ev.Table, ev.Meta.SchemaName, ev.Meta.TableName)
		}
		switch ev.Meta.RecordType {
		case "control":
			if ev.Op != change.OpControl || ev.Control == nil || ev.Control.Op != ev.Meta.Operation || ev.Columns != nil || ev.Before != nil {
				t.Fatalf("inconsistent control event: op %v control %+v", ev.Op, ev.Control)
			}
		case "data":
			if IsTruncate(ev.Meta.Operation) {
				// A truncate data record is the control record it is.
				if ev.Op != change.OpControl || ev.Control == nil || ev.Control.Op != ev.Meta.Operation || ev.Columns != nil || ev.Table == "" {
					t.Fatalf("inconsistent truncate event: op %v control %+v", ev.Op, ev.Control)
				}
				break
			}
			if ev.Op.String() != ev.Meta.Operation || ev.Control != nil || ev.Table == "" {
				t.Fatalf("inconsistent data event: op %v operation %q", ev.Op, ev.Meta.Operation)
			}
			if ev.Columns == nil {
				t.Fatalf("data event without Columns")
			}
		default:
			t.Fatalf("record-type %q accepted", ev.Meta.RecordType)
		}
		for _, cols := range [][]change.Column{ev.Columns, ev.Before} {
			for _, c := range cols {
				v := c.Value
				switch v.Kind {
				case change.KindNull:
					if v.Text != "" {
						t.Fatalf("null with text %q", v.Text)
					}
				case change.KindBool:
					if v.Text != "true" && v.Text != "false" {
						t.Fatalf("bool text %q", v.Text)
					}
				case change.KindNumber:
					if !validNumber(v.Text) {
						t.Fatalf("number text %q", v.Text)
					}
				case change.KindJSON:
					if json.Valid(data) && !json.Valid([]byte(v.Text)) {
						t.Fatalf("column %q: invalid compact JSON %q from valid input", c.Name, v.Text)
					}
				case change.KindString:
				default:
					t.Fatalf("kind %d", v.Kind)
				}
			}
		}
		if cfg.BIEnabled {
			for _, c := range ev.Columns {
				if len(c.Name) > len(cfg.BIPrefix)+len(cfg.BISuffix) &&
					strings.HasPrefix(c.Name, cfg.BIPrefix) && strings.HasSuffix(c.Name, cfg.BISuffix) {
					t.Fatalf("BI column %q left in Columns", c.Name)
				}
			}
		}
		// No aliasing: scribbling over the input and decoding something else must not change
		// the event.
		before := dumpEvent(&ev)
		for i := range input {
			input[i] = '#'
		}
		var other change.Event
		_ = d.Decode(benchUpdate, &other)
		if after := dumpEvent(&ev); after != before {
			t.Fatalf("event changed after input reuse:\n%s\nwas\n%s", after, before)
		}
		// Decoding the same input again into the used event gives the same result.
		if err := d.Decode(data, &ev); err != nil {
			t.Fatalf("second decode failed: %v", err)
		}
		if again := dumpEvent(&ev); again != before {
			t.Fatalf("second decode differs:\n%s\nwas\n%s", again, before)
		}
	})
}

var fuzzTypes = []iceberg.Type{
	tInt, tLong, tFloat, tDouble, tDec102, tDec380, tDec3810, tDec200, iceberg.DecimalTypeOf(5, 5),
	iceberg.DecimalTypeOf(1, 0), tBool, tDate, tTime, tTS, tTSTZ, tStr, tBin, tFixed4, tUUID,
}

func fuzzTypeIndex(t iceberg.Type) uint8 {
	for i, ft := range fuzzTypes {
		if ft.Equals(t) {
			return uint8(i)
		}
	}
	return 0
}

// FuzzConvert: no (type, kind, text) panics; a successful conversion renders to text that
// converts back to the same Datum, encodes as a key, and survives an Arrow round trip.
func FuzzConvert(f *testing.F) {
	for _, tc := range convertCases {
		f.Add(fuzzTypeIndex(tc.t), uint8(tc.v.Kind), tc.v.Text)
	}
	// Domain seeds: kindSel/5 selects the domain (4 = UINT8, 64-bit).
	f.Add(fuzzTypeIndex(tDec200), uint8(change.KindNumber)+5*4, "-1")
	f.Add(fuzzTypeIndex(tDec200), uint8(change.KindNumber)+5*4, "18446744073709551616")
	f.Add(fuzzTypeIndex(tInt), uint8(change.KindNumber)+5*1, "256")
	f.Add(fuzzTypeIndex(tDouble), uint8(change.KindNumber), "1e-400")
	f.Add(fuzzTypeIndex(tFloat), uint8(change.KindString), "-Infinity")
	f.Fuzz(func(t *testing.T, typeSel, kindSel uint8, text string) {
		typ := fuzzTypes[int(typeSel)%len(fuzzTypes)]
		v := change.Value{Kind: change.Kind(kindSel % 5), Text: text}
		d, err := Convert(typ, v)
		if err != nil {
			var ce *ConvertError
			if !errors.As(err, &ce) || ce.Reason == "" || len(ce.Text) > 64 || ce.Type != typ.String() {
				t.Fatalf("malformed error %#v", err)
			}
			return
		}
		if d.Null != (v.Kind == change.KindNull) {
			t.Fatalf("null mismatch for kind %d", v.Kind)
		}
		if d.Null {
			return
		}
		r := Render(typ, d)
		if dt, ok := typ.(iceberg.DecimalType); ok {
			digits := strings.TrimPrefix(r, "-")
			intPart, frac, _ := strings.Cut(digits, ".")
			if len(frac) != dt.Scale() || len(strings.TrimLeft(intPart, "0"))+dt.Scale() > dt.Precision() {
				t.Fatalf("decimal %v rendered %q", typ, r)
			}
		}
		if _, ok := typ.(iceberg.StringType); !ok {
			back, err := Convert(typ, change.Value{Kind: change.KindString, Text: r})
			if err != nil || back != d {
				t.Fatalf("%v %q: rendered %q reconverts to %+v %v, want %+v", typ, text, r, back, err, d)
			}
		}
		// ConvertIn agrees with Convert, and only accepts values inside the domain.
		dom := Domain(int(kindSel/5) % len(domainNames))
		if dd, err := ConvertIn(typ, dom, v); err == nil {
			if dd != d || !inDomain(typ, dom, d) {
				t.Fatalf("ConvertIn(%v, %v, %q) = %+v, Convert %+v", typ, dom, text, dd, d)
			}
		} else if inDomain(typ, dom, d) {
			t.Fatalf("ConvertIn(%v, %v, %q) rejected a value in the domain: %v", typ, dom, text, err)
		}
		k1 := AppendKey(nil, typ, d)
		if k2 := AppendKey(nil, typ, d); string(k1) != string(k2) || len(k1) == 0 {
			t.Fatalf("AppendKey not deterministic")
		}

		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		as, err := ArrowSchema(iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "c", Type: typ}))
		if err != nil {
			t.Fatal(err)
		}
		b := array.NewBuilder(mem, as.Field(0).Type)
		defer b.Release()
		AppendDatum(b, typ, d)
		arr := b.NewArray()
		defer arr.Release()
		if got, ok := RenderArrow(arr, 0, typ); !ok || got != r {
			t.Fatalf("%v %q: RenderArrow %q, Render %q", typ, text, got, r)
		}
	})
}
