package commit

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// Permanent and Sent classify an error without changing what it says, and what it wraps is still
// found through the mark.
func TestMarksKeepTheErrorAndItsText(t *testing.T) {
	t.Parallel()
	inner := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	for _, c := range []struct {
		name     string
		err      error
		sentinel error
	}{
		{"permanent", Permanent(inner), ErrPermanent},
		{"sent", Sent(inner), ErrSent},
		{"wrapped", fmt.Errorf("commit shop.t: %w", Permanent(inner)), ErrPermanent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if !errors.Is(c.err, c.sentinel) {
				t.Errorf("%v does not match its sentinel", c.err)
			}
			if want := inner.Error(); c.name != "wrapped" && c.err.Error() != want {
				t.Errorf("text %q, want %q", c.err.Error(), want)
			}
			var pe *fs.PathError
			if !errors.As(c.err, &pe) || pe != inner || !errors.Is(c.err, fs.ErrNotExist) {
				t.Errorf("%v: the wrapped error is not found through the mark", c.err)
			}
		})
	}
	if Permanent(nil) != nil || Sent(nil) != nil {
		t.Error("a nil error is marked")
	}
	if errors.Is(Sent(inner), ErrPermanent) || errors.Is(Permanent(inner), ErrSent) || errors.Is(inner, ErrPermanent) {
		t.Error("a sentinel matches an error not marked with it")
	}
}
