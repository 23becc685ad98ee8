package checkpoint

import (
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// WatermarkPrefix starts every table property that records, per stream and shard, the highest
// Kinesis sequence number whose change is in the table.
const WatermarkPrefix = "dms2iceberg.wm."

// WatermarkKey is the table property for one shard of one stream.
func WatermarkKey(stream, shard string) string {
	return WatermarkPrefix + stream + "." + shard
}

// Watermarks reads the watermarks of one stream from table properties into a map keyed by shard.
func Watermarks(props map[string]string, stream string) map[string]string {
	prefix := WatermarkPrefix + stream + "."
	out := make(map[string]string)
	for k, v := range props {
		if shard, ok := strings.CutPrefix(k, prefix); ok {
			out[shard] = v
		}
	}
	return out
}

// Covered reports whether seq is at or below the watermark wm (already in the table).
func Covered(wm, seq string) bool {
	return wm != "" && change.CompareSeq(seq, wm) <= 0
}
