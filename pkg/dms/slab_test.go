package dms

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// TestSlabsKeepEveryEvent: one decoder decodes many records (escaped strings of every length,
// from 1 to 12 columns, some records the fast path gives up on) into fresh events that all stay
// in use; every event still equals the general path's decoding of its record afterwards, so
// nothing carved from a slab was handed out twice or written after it was handed out.
func TestSlabsKeepEveryEvent(t *testing.T) {
	d := NewDecoder(DefaultConfig())
	slow := NewDecoder(DefaultConfig())
	slow.slowOnly = true
	const n = 500
	recs := make([][]byte, n)
	evs := make([]change.Event, n)
	for i := range recs {
		data := ""
		for c := range 1 + i%12 {
			if c > 0 {
				data += ","
			}
			switch (i + c) % 3 {
			case 0:
				data += fmt.Sprintf(`"c%d":"esc\"%d\\%s\u00e9"`, c, i, string(make([]byte, (i*c)%40)))
			case 1:
				data += fmt.Sprintf(`"c%d":%d`, c, i*c)
			default:
				data += fmt.Sprintf(`"c%d":"plain %d"`, c, i)
			}
		}
		if i%17 == 0 {
			data += `,"obj":{"nested":1}` // not the fast path's shape: the general path decodes it
		}
		recs[i] = fmt.Appendf(nil, `{"data":{%s},"metadata":{"timestamp":"2024-07-29T00:58:44.901234Z","record-type":"data","operation":"insert","partition-key-type":"schema-table","schema-name":"s","table-name":"t%d"}}`, data, i)
		for j := range recs[i] {
			if recs[i][j] == 0 {
				recs[i][j] = 'x'
			}
		}
		if err := d.DecodeShared(recs[i], &evs[i]); err != nil {
			t.Fatalf("record %d: %v\n%s", i, err, recs[i])
		}
	}
	for i := range recs {
		var want change.Event
		if err := slow.Decode(recs[i], &want); err != nil {
			t.Fatalf("record %d, general path: %v", i, err)
		}
		if !reflect.DeepEqual(evs[i], want) {
			t.Fatalf("record %d after all were decoded:\n%s\nwant\n%s", i, dumpEvent(&evs[i]), dumpEvent(&want))
		}
	}
}
