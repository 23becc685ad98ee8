package maintenance

import (
	"context"
	"runtime"
)

// Slots bounds the maintenance runs of one process (Config.Concurrency). The sink gives one to
// every table's Maintainer (UseSlots); a Maintainer without one runs unbounded.
type Slots struct{ c chan struct{} }

// NewSlots returns room for n runs at once; n <= 0 means one per CPU (GOMAXPROCS).
func NewSlots(n int) *Slots {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return &Slots{c: make(chan struct{}, n)}
}

// acquire waits for a slot; the caller must call release once. A nil s admits every run.
func (s *Slots) acquire(ctx context.Context) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	select {
	case s.c <- struct{}{}:
		return func() { <-s.c }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// UseSlots makes m's scheduled runs wait for one of s (nil: unbounded). Call it before Run.
func (m *Maintainer) UseSlots(s *Slots) { m.runSlots = s }
