package main

import (
	"runtime/debug"
	"testing"
)

// The service sets a soft memory limit from the byte budget unless GOMEMLIMIT is set.
func TestApplyMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	t.Setenv("GOMEMLIMIT", "")
	limit, fromEnv := applyMemoryLimit(128 << 20)
	if fromEnv || limit != 768<<20 || debug.SetMemoryLimit(-1) != 768<<20 {
		t.Fatalf("limit %d (from GOMEMLIMIT %v), runtime %d: want 768 MiB from the budget", limit, fromEnv, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(old)
	t.Setenv("GOMEMLIMIT", "3GiB") // the runtime read it at start; here only its presence counts
	limit, fromEnv = applyMemoryLimit(256 << 20)
	if !fromEnv || limit != old {
		t.Fatalf("with GOMEMLIMIT set: limit %d (from GOMEMLIMIT %v), want the runtime's %d untouched", limit, fromEnv, old)
	}
}
