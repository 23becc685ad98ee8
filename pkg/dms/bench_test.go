package dms

import (
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// benchUpdate is a realistic json-unformatted update record (MySQL-style, transaction details
// and a pk-only before-image), about 400 bytes.
var benchUpdate = []byte(`{"data":{"order_id":1048576,"customer_id":73421,"status":"SHIPPED","amount":1249.95,"currency":"EUR","note":"leave at door","updated_at":"2024-07-29T00:58:44.895275Z"},"before-image":{"order_id":1048576},"metadata":{"timestamp":"2024-07-29T00:58:44.901234Z","record-type":"data","operation":"update","partition-key-type":"schema-table","schema-name":"shop","table-name":"orders","transaction-id":9324410911751,"transaction-record-id":3,"commit-timestamp":"2024-07-29T00:58:44.000000Z"}}` + "\n")

// BenchmarkDecode is the hot path: the caller reuses its Event (Columns capacity reused).
func BenchmarkDecode(b *testing.B) {
	d := NewDecoder(DefaultConfig())
	var ev change.Event
	b.SetBytes(int64(len(benchUpdate)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(benchUpdate, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFreshEvent decodes into a new Event every time (the caller hands each event
// off to another goroutine).
func BenchmarkDecodeFreshEvent(b *testing.B) {
	d := NewDecoder(DefaultConfig())
	b.SetBytes(int64(len(benchUpdate)))
	b.ReportAllocs()
	for b.Loop() {
		var ev change.Event
		if err := d.Decode(benchUpdate, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConvert converts the values of a typical row, one sub-benchmark per type family.
func BenchmarkConvert(b *testing.B) {
	for _, bc := range []struct {
		name string
		t    iceberg.Type
		v    change.Value
	}{
		{"long", iceberg.PrimitiveTypes.Int64, change.Value{Kind: change.KindNumber, Text: "1048576"}},
		{"int", iceberg.PrimitiveTypes.Int32, change.Value{Kind: change.KindNumber, Text: "73421"}},
		{"decimal", iceberg.DecimalTypeOf(12, 2), change.Value{Kind: change.KindNumber, Text: "1249.95"}},
		{"decimal38", iceberg.DecimalTypeOf(38, 10), change.Value{Kind: change.KindNumber, Text: "-1234567890123456789012345678.1234567890"}},
		{"double", iceberg.PrimitiveTypes.Float64, change.Value{Kind: change.KindNumber, Text: "2.718281828459045"}},
		{"string", iceberg.PrimitiveTypes.String, change.Value{Kind: change.KindString, Text: "SHIPPED"}},
		{"timestamp", iceberg.PrimitiveTypes.Timestamp, change.Value{Kind: change.KindString, Text: "2024-07-29T00:58:44.895275Z"}},
		{"timestamptz", iceberg.PrimitiveTypes.TimestampTz, change.Value{Kind: change.KindString, Text: "2024-07-29T00:58:44.895275+02:00"}},
		{"date", iceberg.PrimitiveTypes.Date, change.Value{Kind: change.KindString, Text: "2024-07-29"}},
		{"bool", iceberg.PrimitiveTypes.Bool, change.Value{Kind: change.KindString, Text: "t"}},
		{"binary", iceberg.PrimitiveTypes.Binary, change.Value{Kind: change.KindString, Text: "0x80057D942E"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Convert(bc.t, bc.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
