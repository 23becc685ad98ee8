package sinktest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Allocator returns a checked Arrow allocator that fails the test, when it ends, if any of its
// memory was not released.
func Allocator(t testing.TB) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}
