package dms

import (
	"testing"

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
