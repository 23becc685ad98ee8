package sink

import (
	"strings"
	"testing"
)

// dmsOwnTable answers as lowering the whole name and testing the prefix does, for names in
// any case, with non-ASCII letters that lower to ASCII (Kelvin sign, dotted capital I) and
// with multi-byte runes at the prefix.
func TestDMSOwnTable(t *testing.T) {
	t.Parallel()
	names := []string{"", "a", "awsdms", "awsdms_", "AWSDMS_apply_exceptions", "AwsDms_x", "awsdms-x",
		"awsdmsx", "awsdms_\u212a", "\u212awsdms_", "awsdm\u0130_", "aw\u017fdms_", "orders", "awsdns_x",
		"awsdms\u00e9", "ÀWSDMS_x", "awsdms_status", "_awsdms_"}
	for _, n := range names {
		want := strings.HasPrefix(strings.ToLower(n), "awsdms_")
		if got := dmsOwnTable(n); got != want {
			t.Errorf("dmsOwnTable(%q) = %v, lowered name has the prefix: %v", n, got, want)
		}
	}
	if !dmsOwnTable("AWSDMS_APPLY_EXCEPTIONS") || dmsOwnTable("AWSDMSX_APPLY") {
		t.Error("the prefix is not told apart")
	}
}
