package checkpoint

import "github.com/dms2iceberg/dms2iceberg/pkg/change"

// Covered reports whether seq is at or below the watermark wm (already in the table).
func Covered(wm, seq string) bool {
	return wm != "" && change.CompareSeq(seq, wm) <= 0
}
