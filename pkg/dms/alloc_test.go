//go:build !race

package dms

import (
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// The race detector changes allocation counts, so these checks only run without it.

func TestDecodeAllocs(t *testing.T) {
	d := NewDecoder(DefaultConfig())
	var ev change.Event
	if err := d.Decode(benchUpdate, &ev); err != nil {
		t.Fatal(err)
	}
	// Reused event: only the string arena.
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(benchUpdate, &ev) }); n > 1 {
		t.Errorf("Decode into a reused event: %v allocs, want ≤ 1", n)
	}
	// Fresh event: arena and Columns (the Event itself is the caller's).
	evs := make([]change.Event, 101)
	i := 0
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(benchUpdate, &evs[i]); i++ }); n > 2 {
		t.Errorf("Decode into a fresh event: %v allocs, want ≤ 2", n)
	}
}

// DecodeShared copies no strings: nothing for a reused event, Columns for a fresh one.
func TestDecodeSharedAllocs(t *testing.T) {
	d := NewDecoder(DefaultConfig())
	var ev change.Event
	if err := d.DecodeShared(benchUpdate, &ev); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = d.DecodeShared(benchUpdate, &ev) }); n != 0 {
		t.Errorf("DecodeShared into a reused event: %v allocs, want 0", n)
	}
	evs := make([]change.Event, 101)
	i := 0
	// A fresh event's columns come from a slab of 32 KiB (slab.go): less than one
	// allocation per record, which AllocsPerRun rounds down to 0.
	if n := testing.AllocsPerRun(100, func() { _ = d.DecodeShared(benchUpdate, &evs[i]); i++ }); n != 0 {
		t.Errorf("DecodeShared into a fresh event: %v allocs, want 0", n)
	}
}

func TestConvertAllocs(t *testing.T) {
	for _, tc := range convertCases {
		if tc.err != "" {
			continue
		}
		switch tc.t.(type) {
		case iceberg.BinaryType, iceberg.FixedType, iceberg.UUIDType:
			continue // the decoded bytes are a new string
		}
		if n := testing.AllocsPerRun(10, func() { _, _ = Convert(tc.t, tc.v) }); n != 0 {
			t.Errorf("Convert(%v, %q): %v allocs", tc.t, tc.v.Text, n)
		}
	}
}
