package dms

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Records of the common shape take the fast path and decode to what the general path gives;
// the others are left to the general path.
func TestDecodeFastPath(t *testing.T) {
	meta := `"metadata":{"timestamp":"2024-07-29T00:58:44.901234Z","record-type":"data","operation":"update","schema-name":"shop","table-name":"orders","transaction-id":9324410911751}`
	for _, c := range []struct {
		name string
		cfg  Config
		in   string
		fast bool
	}{
		{"update with before-image", biCfg, string(benchUpdate), true},
		{"escapes and unicode", DefaultConfig(), `{"data":{"id":1,"s":"a\"b\\c\/d\n\u00e9\ud83d\ude00 é","b":true,"f":false,"z":null,"n":-1.5e3},` + meta + `}`, true},
		{"BI columns", biCfg, `{"data":{"id":2,"BI_id":1,"v":"x","BI_v":"y"},` + meta + `}`, true},
		{"BI suffix", biSuffixCfg, `{"data":{"id":2,"id__old":1},` + meta + `}`, true},
		{"empty data", DefaultConfig(), `{"data":{},` + meta + `}`, true},
		{"whitespace", DefaultConfig(), " \n{ \"data\" : { \"id\" : 1 } , " + meta + " }\r\n", true},
		{"object value", DefaultConfig(), `{"data":{"id":1,"j":{"a":1}},` + meta + `}`, false},
		{"control record", DefaultConfig(), `{"control":{},"metadata":{"record-type":"control","operation":"drop-table","schema-name":"shop","table-name":"orders"}}`, false},
		{"duplicate metadata key", DefaultConfig(), `{"data":{"id":1},"metadata":{"record-type":"data","record-type":"data","operation":"insert","schema-name":"s","table-name":"t"}}`, false},
		{"null metadata", DefaultConfig(), `{"data":{"id":1},"metadata":{"record-type":"data","operation":"insert","schema-name":"s","table-name":"t","transaction-id":null}}`, false},
		{"escaped key", DefaultConfig(), `{"data":{"i\u0064":1},` + meta + `}`, false},
		{"bare NaN", DefaultConfig(), `{"data":{"id":NaN},` + meta + `}`, false},
		{"lone surrogate", DefaultConfig(), `{"data":{"s":"\ud800"},` + meta + `}`, false},
		{"invalid UTF-8", DefaultConfig(), "{\"data\":{\"s\":\"\xff\"}," + meta + "}", false},
		{"trailing data", DefaultConfig(), `{"data":{"id":1},` + meta + `} x`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(c.cfg)
			var fev change.Event
			fast := d.decodeFast([]byte(c.in), &fev, nil)
			if fast != c.fast {
				t.Fatalf("fast path taken = %v, want %v", fast, c.fast)
			}
			var ev, sev change.Event
			err := d.Decode([]byte(c.in), &ev)
			slow := NewDecoder(c.cfg)
			slow.slowOnly = true
			serr := slow.Decode([]byte(c.in), &sev)
			if (err == nil) != (serr == nil) || err != nil && err.Error() != serr.Error() {
				t.Fatalf("errors differ: %v / %v", err, serr)
			}
			if !reflect.DeepEqual(ev, sev) {
				t.Fatalf("events differ:\n%s\n%s", dumpEvent(&ev), dumpEvent(&sev))
			}
			if fast && !reflect.DeepEqual(fev, sev) {
				t.Fatalf("fast event differs:\n%s\n%s", dumpEvent(&fev), dumpEvent(&sev))
			}
			var shev change.Event
			if sherr := d.DecodeShared([]byte(c.in), &shev); (sherr == nil) != (err == nil) || !reflect.DeepEqual(shev, sev) {
				t.Fatalf("DecodeShared differs (%v):\n%s\n%s", sherr, dumpEvent(&shev), dumpEvent(&sev))
			}
		})
	}
}

// DecodeShared points the strings of a fast-path record into it, and copies only escaped ones:
// changing the record changes the event (that is the contract), and the escaped value does not.
func TestDecodeSharedPointsIntoTheRecord(t *testing.T) {
	in := []byte(`{"data":{"id":1,"s":"plain","e":"a\nb"},"metadata":{"record-type":"data","operation":"insert","schema-name":"shop","table-name":"orders"}}`)
	d := NewDecoder(DefaultConfig())
	var ev change.Event
	if err := d.DecodeShared(in, &ev); err != nil {
		t.Fatal(err)
	}
	if got := ev.Columns[1].Value.Text; got != "plain" {
		t.Fatalf("s = %q", got)
	}
	for i := range in {
		if in[i] == 'p' || in[i] == 'a' {
			in[i] = 'X'
		}
	}
	if got := ev.Columns[1].Value.Text; got != "XlXin" {
		t.Errorf("shared s = %q after the record changed, want it to follow the record", got)
	}
	if got := ev.Columns[2].Value.Text; got != "a\nb" {
		t.Errorf("escaped e = %q, want the unescaped copy", got)
	}
}

// metaIndex knows every metadata field at its place in metaFields.
func TestMetaIndex(t *testing.T) {
	for f, name := range metaFields {
		if got := metaIndex([]byte(name)); got != f {
			t.Errorf("metaIndex(%q) = %d, want %d", name, got, f)
		}
	}
	if metaIndex([]byte("other")) != -1 {
		t.Error("unknown field found")
	}
}

// scanString's eight-byte skip finds the same end, escape and UTF-8 verdict as a byte-by-byte
// scan, with the first byte that needs a look at every offset of a word, after every kind of
// byte before it (a quote, a backslash pair, non-ASCII, a 0x01 that a borrow could flag).
func TestScanStringWordSkip(t *testing.T) {
	byByte := func(data []byte, i int) (span, int, bool) {
		start, esc := i+1, false
		for j := start; j < len(data); j++ {
			switch data[j] {
			case '"':
				if !utf8.Valid(data[start:j]) {
					return span{}, 0, false
				}
				return span{start: int32(start), end: int32(j), esc: esc}, j + 1, true
			case '\\':
				esc = true
				j++
			}
		}
		return span{}, 0, false
	}
	fills := []string{"a", "\x01", "\x00", "é", `\"`, `\\`, "\x7f", "\xff"}
	for n := 0; n < 20; n++ {
		for _, fill := range fills {
			for _, tail := range []string{`"`, `\""`, `é"`, "\x80\"", `"rest"`, ``, `\`} {
				data := []byte(`"` + strings.Repeat(fill, n) + tail + `,"k":1}`)
				gotSp, gotNext, gotOK := scanString(data, 0)
				wantSp, wantNext, wantOK := byByte(data, 0)
				if gotSp != wantSp || gotNext != wantNext || gotOK != wantOK {
					t.Fatalf("%q: scanString %+v %d %v, byte by byte %+v %d %v", data, gotSp, gotNext, gotOK, wantSp, wantNext, wantOK)
				}
			}
		}
	}
}
