package stateversion

import (
	"fmt"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stored string
		ok     bool
	}{{"", true}, {"1", true}, {CurrentText, true}, {fmt.Sprint(Current + 1), false}, {"0", false}, {"x", false}, {"-1", false}} {
		err := Check("table", c.stored)
		if (err == nil) != c.ok || (err != nil) != IsRefused(err) {
			t.Errorf("Check(%q) = %v, want ok %v", c.stored, err, c.ok)
		}
	}
	want := fmt.Sprintf("table state written by dms2iceberg state version %d, this binary understands up to %d: upgrade", Current+1, Current)
	if err := Check("table", fmt.Sprint(Current+1)); err == nil || err.Error() != want {
		t.Fatalf("Check = %v, want %q", err, want)
	}
}
