//go:build integration

package integration

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChaos is the crash-anywhere run (see chaos.go): generated traffic flows while a
// seeded schedule kills workers (SIGKILL, or at an armed fault point), freezes one with SIGSTOP
// until its leases move, stops, adds and removes workers, and splits and merges shards; then the
// tables must equal the generator's expected state, no checkpoint may ever pass committed data,
// and no file may be referenced twice. The default is a short run (12 cycles, a few minutes);
// `make chaos` runs 200 cycles. DMS2ICEBERG_CHAOS_SEED replays a run.
func TestChaos(t *testing.T) {
	c := newChaosRun(t, chaosOptionsFromEnv(t))
	c.run()
	st := c.led.stats()
	if n := len(st.violations) + len(st.problems); n > 0 {
		t.Fatalf("CHAOS: seed %d: %d violations and %d problems (see above)", c.opt.Seed, len(st.violations), len(st.problems))
	}
}

// TestChaosSchedule checks the schedule: every kind of action at least once when there are
// enough cycles, the first split and merge in the first half, and the same schedule for the same
// seed.
func TestChaosSchedule(t *testing.T) {
	for _, cycles := range []int{12, 200} {
		plan := chaosSchedule(rand.New(rand.NewPCG(7, 1)), cycles)
		if len(plan) != cycles {
			t.Fatalf("%d cycles: plan has %d actions", cycles, len(plan))
		}
		count := map[string]int{}
		for _, a := range plan {
			count[a]++
		}
		for _, a := range []string{actKill, actFault, actStop, actTerm, actSplit, actMerge} {
			if count[a] == 0 {
				t.Errorf("%d cycles: no %s in %v", cycles, a, plan)
			}
		}
		if count[actFault] < 6 {
			t.Errorf("%d cycles: %d fault cycles, want one per fault point at least", cycles, count[actFault])
		}
		for _, a := range []string{actSplit, actMerge} {
			if i := slices.Index(plan, a); i >= cycles/2 {
				t.Errorf("%d cycles: first %s at cycle %d, want it in the first half", cycles, a, i+1)
			}
		}
		if again := chaosSchedule(rand.New(rand.NewPCG(7, 1)), cycles); !slices.Equal(plan, again) {
			t.Errorf("%d cycles: the same seed drew another schedule", cycles)
		}
	}
}
