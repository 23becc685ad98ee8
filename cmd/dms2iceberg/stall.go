package main

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// stallWatch decides whether /healthz fails: the pipeline is stuck when records were handed on
// and nothing has come of them for longer than the stall timeout. Per shard, a shard's records
// are waiting from the first delivery handed on after its last checkpoint; the checkpoint is
// written only after every change up to it is committed, so "no checkpoint since" means no
// commit took those records either (a stuck table writer, a catalog that rejects every commit,
// a lease table that refuses checkpoints). Idle shards never wait; a shard's lease ending
// (KCL release: lost, closed, stopping) forgets it.
//
// Limitation: a delivery handed on just before a checkpoint that does not yet cover it, on a
// shard that then receives nothing more, is not watched (Records reports counts, not sequence
// numbers).
//
// Safe for concurrent use; each call is a map operation under a mutex, once per delivery.
type stallWatch struct {
	now     func() time.Time
	mu      sync.Mutex
	timeout time.Duration        // 0: never stalled
	waiting map[string]time.Time // shard -> first delivery handed on since its last checkpoint
}

func newStallWatch(now func() time.Time) *stallWatch {
	return &stallWatch{now: now, waiting: map[string]time.Time{}}
}

// setTimeout sets the stall timeout (0 disables the check).
func (s *stallWatch) setTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeout = d
}

// handedOn notes a delivery of records of shard handed to the sink.
func (s *stallWatch) handedOn(shard string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.waiting[shard]; !ok {
		s.waiting[shard] = s.now()
	}
}

// checkpointed notes a checkpoint written for shard.
func (s *stallWatch) checkpointed(shard string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, shard)
}

// released forgets a shard whose lease ended.
func (s *stallWatch) released(shard string) { s.checkpointed(shard) }

// Stalled returns why the pipeline is stuck (the shards waiting longer than the timeout), or nil.
func (s *stallWatch) Stalled() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timeout <= 0 {
		return nil
	}
	now := s.now()
	var stuck []string
	for shard, since := range s.waiting {
		if d := now.Sub(since); d > s.timeout {
			stuck = append(stuck, fmt.Sprintf("%s (%s)", shard, d.Round(time.Second)))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	sort.Strings(stuck)
	return fmt.Errorf("no progress: records handed on and neither committed nor checkpointed for more than %s on shards %v", s.timeout, stuck)
}
