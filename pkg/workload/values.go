package workload

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Value constructors. The model keeps every column value exactly as it was written to the
// stream (JSON kind plus literal text), so the expected state is derived from the same text the
// service decodes.

var null = change.Value{Kind: change.KindNull}

func num(n int64) change.Value {
	return change.Value{Kind: change.KindNumber, Text: strconv.FormatInt(n, 10)}
}

func unum(n uint64) change.Value {
	return change.Value{Kind: change.KindNumber, Text: strconv.FormatUint(n, 10)}
}

func numText(s string) change.Value { return change.Value{Kind: change.KindNumber, Text: s} }

func str(s string) change.Value { return change.Value{Kind: change.KindString, Text: s} }

// boolean renders a BOOLEAN the two ways sources deliver it: a JSON boolean, or PostgreSQL's
// "t"/"f" text (observed in CDC records).
func boolean(rng *rand.Rand, b bool) change.Value {
	if rng.IntN(2) == 0 {
		return change.Value{Kind: change.KindBool, Text: strconv.FormatBool(b)}
	}
	if b {
		return str("t")
	}
	return str("f")
}

// digits returns n random decimal digits without a leading zero (n ≥ 1; "0" possible for n=1).
func digits(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := range n {
		d := rng.IntN(10)
		if i == 0 && n > 1 {
			d = 1 + rng.IntN(9)
		}
		b.WriteByte(byte('0' + d))
	}
	return b.String()
}

// decimal returns a NUMERIC value with up to intDigits integer digits and exactly scale
// fractional digits of precision, written in one of the textual styles DMS is known or suspected
// to use: all scale digits ("1234.50"), trailing zeros trimmed ("1234.5"), or six fractional
// digits as C's %f prints them ("46.570000", observed for MySQL decimals). neg allows negative
// values.
func decimal(rng *rand.Rand, intDigits, scale int, neg bool) change.Value {
	ip := digits(rng, 1+rng.IntN(intDigits))
	var fp string
	if scale > 0 {
		var b strings.Builder
		for range scale {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		fp = b.String()
	}
	negative := neg && rng.IntN(3) == 0 && strings.Trim(ip+fp, "0") != ""
	return numText(decimalText(rng, negative, ip, fp))
}

func decimalText(rng *rand.Rand, negative bool, ip, fp string) string {
	s := ip
	if negative {
		s = "-" + ip
	}
	if fp == "" {
		return s
	}
	switch style := rng.IntN(4); {
	case style == 0:
		fp = strings.TrimRight(fp, "0")
	case style == 1 && len(fp) < 6:
		fp += strings.Repeat("0", 6-len(fp))
	}
	if fp == "" {
		return s
	}
	return s + "." + fp
}

// quarter returns k/4 as exact decimal text: every such value with |k| < 2^24 is exact in
// float32, and |k| < 2^53 exact in float64.
func quarter(k int64) string {
	neg := k < 0
	if neg {
		k = -k
	}
	s := strconv.FormatInt(k/4, 10)
	switch k % 4 {
	case 1:
		s += ".25"
	case 2:
		s += ".5"
	case 3:
		s += ".75"
	}
	if neg && k != 0 {
		s = "-" + s
	}
	return s
}

const (
	minDatetime = -946771200 * int64(time.Second/time.Microsecond) // 1940-01-01
	maxDatetime = 4102444800 * int64(time.Second/time.Microsecond) // 2100-01-01
)

// datetime renders microseconds since the epoch as DMS writes DATETIME: UTC wall clock, 'T',
// a fraction of fracDigits digits (0, 3 or 6) that is dropped when it is zero, and 'Z'. The
// value is truncated to the precision first.
func datetime(micros int64, fracDigits int) string {
	unit := int64(1)
	switch fracDigits {
	case 0:
		unit = 1_000_000
	case 3:
		unit = 1_000
	}
	micros -= floorMod(micros, unit)
	t := time.UnixMicro(micros).UTC()
	s := t.Format("2006-01-02T15:04:05")
	frac := floorMod(micros, 1_000_000)
	if frac != 0 {
		switch fracDigits {
		case 3:
			s += "." + pad(frac/1000, 3)
		case 6:
			s += "." + pad(frac, 6)
		}
	}
	return s + "Z"
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func pad(n int64, w int) string {
	s := strconv.FormatInt(n, 10)
	if len(s) < w {
		s = strings.Repeat("0", w-len(s)) + s
	}
	return s
}

func randDatetime(rng *rand.Rand) int64 {
	return minDatetime + rng.Int64N(maxDatetime-minDatetime)
}

// randDate returns a DATE between 1940 and 2099, sometimes one of the epoch edges.
func randDate(rng *rand.Rand) string {
	switch rng.IntN(20) {
	case 0:
		return "1970-01-01"
	case 1:
		return "1969-12-31"
	case 2:
		return "2000-02-29"
	}
	return time.UnixMicro(randDatetime(rng)).UTC().Format("2006-01-02")
}

// randTime returns a TIME of day, with a six-digit fraction half of the time (dropped when zero).
func randTime(rng *rand.Rand) string {
	us := rng.Int64N(86400 * 1_000_000)
	if rng.IntN(2) == 0 {
		us -= us % 1_000_000
	}
	s := time.UnixMicro(us).UTC().Format("15:04:05")
	if f := us % 1_000_000; f != 0 {
		s += "." + pad(f, 6)
	}
	return s
}

const hexUpper = "0123456789ABCDEF"

// blob renders bytes as DMS writes BLOB/BYTES: upper-case hex with a 0x prefix.
func blob(rng *rand.Rand) string {
	n := 1 + rng.IntN(48)
	b := make([]byte, 2, 2+2*n)
	b[0], b[1] = '0', 'x'
	for range n {
		c := byte(rng.IntN(256))
		if rng.IntN(8) == 0 {
			c = 0
		}
		b = append(b, hexUpper[c>>4], hexUpper[c&0xF])
	}
	return string(b)
}

var firstNames = []string{
	"Anna", "Bob", "Chloé", "Dmitri", "Émile", "Fatima", "Grete", "Hiroshi", "Ingrid", "José",
	"Kwame", "Łukasz", "Maël", "Nuño", "Olga", "Priya", "Quentin", "Renée", "Søren", "Tomás",
	"Ulla", "Vũ", "Wen", "Xóchitl", "Yusuf", "Zoë", "王芳", "李雷", "Ольга", "Σοφία",
}

var lastNames = []string{
	"Müller", "O'Brien", "Smith", "García", "Nguyễn", "Kowalski", "Dubois", "Jensen", "Rossi",
	"Tanaka", "Ivanov", "Ångström", "Said", "van der Berg", "Øster", "Papadopoulos", "Кузнецов",
	"田中", "Cohen", "Andrade",
}

func personName(rng *rand.Rand) string {
	n := firstNames[rng.IntN(len(firstNames))] + " " + lastNames[rng.IntN(len(lastNames))]
	switch rng.IntN(25) {
	case 0:
		n += ` "Junior"`
	case 1:
		n += " \\ Jr."
	case 2:
		n = "  " + n + "  "
	}
	return n
}

func email(rng *rand.Rand, id int64) string {
	domains := []string{"example.com", "example.org", "mail.example.net", "exämple.de"}
	return "user" + strconv.FormatInt(id, 10) + "." + strconv.Itoa(rng.IntN(1000)) + "@" + domains[rng.IntN(len(domains))]
}

var wideStrings = []string{
	"Grüße aus Köln",
	"日本語のテキスト",
	"emoji 🎉🚀 and a ZWJ 👩‍💻",
	"tab\there and a\nnew line",
	`quote " and backslash \ and slash /`,
	"control \u0001\u001f chars",
	"Ελληνικά και Русский",
	"עברית וערבית العربية",
	"",
	" leading and trailing space ",
	"ümlaut-Ä-Ö-Ü-ß",
	"null",
	"0x41",
	"t",
}

func wideString(rng *rand.Rand) string {
	s := wideStrings[rng.IntN(len(wideStrings))]
	if rng.IntN(2) == 0 {
		s += " #" + strconv.Itoa(rng.IntN(100000))
	}
	return s
}

var skuChars = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"

func sku(rng *rand.Rand) string {
	b := []byte("SKU-")
	for range 8 {
		b = append(b, skuChars[rng.IntN(len(skuChars))])
	}
	s := string(b)
	if rng.IntN(20) == 0 {
		s += "-größe"
	}
	return s
}

var noteWords = []string{
	"deliver", "to", "the", "back", "door", "please", "gift", "wrap", "fragile", "Grüße",
	"call", "before", "arrival", "⚠", "\"rush\"", "order", "C:\\temp", "über", "naïve", "café",
}

// note returns an NCLOB text: usually short, sometimes multi-line, sometimes several KiB.
func note(rng *rand.Rand) string {
	n := 1 + rng.IntN(12)
	switch rng.IntN(40) {
	case 0:
		n = 500 + rng.IntN(1500) // a few KiB
	case 1, 2:
		n = 40 + rng.IntN(80)
	}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			if rng.IntN(15) == 0 {
				b.WriteString("\r\n")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(noteWords[rng.IntN(len(noteWords))])
	}
	return b.String()
}

var eventKinds = []string{"page_view", "click", "add_to_cart", "purchase", "signup", "error", "süche"}

// jsonText returns JSON text (what an NCLOB holding PostgreSQL json/jsonb carries) with nested
// objects, arrays, numbers, booleans, null and escaped strings.
func jsonText(rng *rand.Rand, kind string) string {
	o := &object{}
	o.set("user", num(int64(rng.IntN(1_000_000))))
	o.set("kind", kind)
	o.set("path", "/p/"+strconv.Itoa(rng.IntN(5000))+"?q=caf%C3%A9&x=\"1\"")
	tags := []string{}
	for range rng.IntN(4) {
		tags = append(tags, eventKinds[rng.IntN(len(eventKinds))])
	}
	o.set("tags", tags)
	o.set("amount", numText(quarter(rng.Int64N(40000)-2000)))
	o.set("ok", rng.IntN(2) == 0)
	nested := &object{}
	nested.set("ua", "Mozilla/5.0 (X11; Linux x86_64) — “quoted”")
	nested.set("lang", []string{"de-DE", "日本語"}[rng.IntN(2)])
	nested.set("ref", null)
	o.set("ctx", nested)
	return string(appendObject(nil, o, false, 1))
}

// value returns a random value for column i of t (row holds the key columns already).
func (r *run) value(t *tableState, i int, row []change.Value) change.Value {
	if r.sc != nil {
		if v, ok := r.sc.value(r, t, i, row); ok {
			return v
		}
	}
	rng := r.rng
	switch t.def.name {
	case Customers:
		switch i {
		case cName:
			return str(personName(rng))
		case cEmail:
			if rng.IntN(10) == 0 {
				return null
			}
			id, _ := strconv.ParseInt(row[cID].Text, 10, 64)
			return str(email(rng, id))
		case cBalance:
			if rng.IntN(20) == 0 {
				return null
			}
			return decimal(rng, 7, 2, true)
		case cActive:
			if rng.IntN(20) == 0 {
				return null
			}
			return boolean(rng, rng.IntN(4) != 0)
		case cCreatedAt:
			if rng.IntN(20) == 0 {
				return null
			}
			// 2010 to just before the workload starts
			from := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			us := from + rng.Int64N(max(r.cfg.Start.UnixMicro()-from, 1))
			if rng.IntN(2) == 0 {
				return str(datetime(us, 0))
			}
			return str(datetime(us, 6))
		}
	case OrderItems:
		switch i {
		case oSKU:
			return str(sku(rng))
		case oQty:
			return num(int64(1 + rng.IntN(100)))
		case oPrice:
			return decimal(rng, 5, 2, false)
		case oNote:
			if rng.IntN(3) == 0 {
				return null
			}
			return str(note(rng))
		}
	case Events:
		switch i {
		case eEventTime:
			return str(datetime(r.now-r.rng.Int64N(3_600_000_000), 6))
		case eKind:
			return str(eventKinds[rng.IntN(len(eventKinds))])
		case ePayload:
			kind := eventKinds[0]
			if row[eKind].Kind == change.KindString {
				kind = row[eKind].Text
			}
			return str(jsonText(rng, kind))
		}
	case Types:
		if rng.IntN(12) == 0 {
			return null
		}
		return typesValue(rng, i)
	}
	panic(fmt.Sprintf("workload: no value for %s column %d", t.def.name, i))
}

func typesValue(rng *rand.Rand, i int) change.Value {
	edge := rng.IntN(10) == 0
	pickEdge := func(vs ...int64) change.Value { return num(vs[rng.IntN(len(vs))]) }
	switch i {
	case tInt1:
		if edge {
			return pickEdge(-128, 127, 0)
		}
		return num(int64(rng.IntN(256) - 128))
	case tInt2:
		if edge {
			return pickEdge(-32768, 32767)
		}
		return num(int64(rng.IntN(65536) - 32768))
	case tInt4:
		if edge {
			return pickEdge(-2147483648, 2147483647)
		}
		return num(int64(int32(rng.Uint32())))
	case tInt8:
		if edge {
			return pickEdge(-9223372036854775808, 9223372036854775807, 9007199254740993)
		}
		return num(int64(rng.Uint64()))
	case tUint1:
		return num(int64(rng.IntN(256)))
	case tUint2:
		return num(int64(rng.IntN(65536)))
	case tUint4:
		if edge {
			return num(4294967295)
		}
		return num(int64(rng.Uint32()))
	case tUint8:
		if edge {
			return unum(18446744073709551615)
		}
		if rng.IntN(4) == 0 {
			return unum(rng.Uint64N(1 << 63))
		}
		return unum(1<<63 + rng.Uint64N(1<<63))
	case tReal4:
		return numText(quarter(rng.Int64N(800_001) - 400_000))
	case tReal8:
		return numText(quarter(rng.Int64N(1<<42) - 1<<41))
	case tNum38:
		if edge {
			return numText(decimalText(rng, rng.IntN(2) == 0, strings.Repeat("9", 28), strings.Repeat("9", 10)))
		}
		return decimal(rng, 28, 10, true)
	case tNum5:
		if edge {
			return pickEdge(-99999, 99999, 0)
		}
		return num(rng.Int64N(199999) - 99999)
	case tDate:
		return str(randDate(rng))
	case tTime:
		return str(randTime(rng))
	case tDT0:
		return str(datetime(randDatetime(rng), 0))
	case tDT3:
		return str(datetime(randDatetime(rng), 3))
	case tDT6:
		return str(datetime(randDatetime(rng), 6))
	case tBlob:
		return str(blob(rng))
	case tBool:
		return boolean(rng, rng.IntN(2) == 0)
	case tWstr:
		return str(wideString(rng))
	case tJSON:
		return str(jsonText(rng, eventKinds[rng.IntN(len(eventKinds))]))
	}
	panic(fmt.Sprintf("workload: no value for types column %d", i))
}
