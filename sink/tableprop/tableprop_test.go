package tableprop

import "testing"

func TestWatermarks(t *testing.T) {
	t.Parallel()
	props := map[string]string{
		Watermark("st", "shardId-1"):    "123",
		Watermark("other", "shardId-1"): "999",
		Watermark("st", "shardId-2"):    "7",
		Status:                          StatusActive,
	}
	wm := Watermarks(props, "st")
	if len(wm) != 2 || wm["shardId-1"] != "123" || wm["shardId-2"] != "7" {
		t.Fatalf("Watermarks = %v", wm)
	}
	if got := Watermark("st", "shardId-1"); got != "dms2iceberg.wm.st.shardId-1" {
		t.Fatalf("Watermark = %q: a persisted name changed", got)
	}
}

func TestCompleteThroughName(t *testing.T) {
	t.Parallel()
	if Source != "dms2iceberg.source" {
		t.Fatalf("a persisted name changed: %q", Source)
	}
	if CompleteThrough != "dms2iceberg.complete-through" || CompleteThroughLayout != "2006-01-02T15:04:05.000Z07:00" {
		t.Fatalf("a persisted name or format changed: %q %q", CompleteThrough, CompleteThroughLayout)
	}
}

func TestStateVersion(t *testing.T) {
	t.Parallel()
	if StateVersion != "dms2iceberg.state-version" {
		t.Fatalf("a persisted name changed: %q", StateVersion)
	}
	if err := CheckStateVersion("shop.orders", map[string]string{}); err != nil {
		t.Fatalf("an unstamped table (version 1) is refused: %v", err)
	}
	if err := CheckStateVersion("shop.orders", Stamp(map[string]string{}, nil)); err != nil {
		t.Fatalf("a table of this version is refused: %v", err)
	}
	if p := Stamp(map[string]string{}, map[string]string{StateVersion: "1"}); len(p) != 0 {
		t.Fatalf("Stamp rewrote a present stamp: %v", p)
	}
	err := CheckStateVersion("shop.orders", map[string]string{StateVersion: "2"})
	if want := "table shop.orders: table state written by dms2iceberg state version 2, this binary understands up to 1: upgrade"; err == nil || err.Error() != want {
		t.Fatalf("CheckStateVersion = %v, want %q", err, want)
	}
}
