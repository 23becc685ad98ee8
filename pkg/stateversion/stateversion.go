package stateversion

import (
	"errors"
	"fmt"
	"strconv"
)

// Current is the state version this binary writes and the newest it reads.
const Current = 1

// CurrentText is Current as it is stored.
var CurrentText = strconv.Itoa(Current)

// Error is state refused because it was written by a newer state version (or carries a stamp
// this binary cannot read).
type Error struct {
	// Kind names the state: "table" or "lease".
	Kind string
	// Found is the stored stamp.
	Found string
}

func (e *Error) Error() string {
	if _, err := strconv.Atoi(e.Found); err != nil {
		return fmt.Sprintf("%s state carries the state version %q, which this binary cannot read (it understands up to %d): upgrade", e.Kind, e.Found, Current)
	}
	return fmt.Sprintf("%s state written by dms2iceberg state version %s, this binary understands up to %d: upgrade", e.Kind, e.Found, Current)
}

// Check reads a stored stamp of state of kind ("" when absent: version 1) and refuses it with an
// *Error unless this binary understands it.
func Check(kind, stored string) error {
	if stored == "" {
		return nil
	}
	if n, err := strconv.Atoi(stored); err == nil && n >= 1 && n <= Current {
		return nil
	}
	return &Error{Kind: kind, Found: stored}
}

// IsRefused reports whether err is (or wraps) a refusal by Check.
func IsRefused(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
