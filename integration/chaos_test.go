//go:build integration

package integration

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
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

// TestChaosOptionsDeps checks how EnvChaosDeps, EnvChaosLayout and EnvChaosWorkers are read:
// the canonical list of faulted dependencies, all, heartbeats on whenever Kinesis is faulted,
// and the defaults unchanged without the variables.
func TestChaosOptionsDeps(t *testing.T) {
	for _, env := range []string{EnvChaosHeartbeat, EnvChaosLayout, EnvChaosWorkers} {
		t.Setenv(env, "") // the run's own settings do not apply here
	}
	for _, c := range []struct {
		deps, want                      string
		rest, s3, dynamo, kinesis, beat bool
	}{
		{deps: "", want: ""},
		{deps: "kinesis, dynamodb", want: "dynamodb,kinesis", dynamo: true, kinesis: true, beat: true},
		{deps: "all", want: "s3,dynamodb,kinesis", s3: true, dynamo: true, kinesis: true, beat: true},
		{deps: "rest,dynamodb", want: "rest,dynamodb", rest: true, dynamo: true},
		{deps: "s3", want: "s3", s3: true},
	} {
		t.Setenv(EnvChaosDeps, c.deps)
		t.Setenv(EnvChaosSeed, "2") // even: heartbeats off unless Kinesis is faulted; (2/3) mod 2 = 0: dms-default
		o := chaosOptionsFromEnv(t)
		if o.Deps != c.want || o.DepsREST != c.rest || o.DepsS3 != c.s3 || o.DepsDynamo != c.dynamo || o.DepsKinesis != c.kinesis {
			t.Errorf("%s=%q: got %q (rest %v s3 %v dynamodb %v kinesis %v)", EnvChaosDeps, c.deps, o.Deps, o.DepsREST, o.DepsS3, o.DepsDynamo, o.DepsKinesis)
		}
		if (o.Heartbeat > 0) != c.beat {
			t.Errorf("%s=%q: heartbeat_interval %s", EnvChaosDeps, c.deps, o.Heartbeat)
		}
		if o.Layout != layoutDMSDefault || o.MaxWorkers != 3 {
			t.Errorf("defaults changed: layout %q, %d workers", o.Layout, o.MaxWorkers)
		}
	}
	t.Setenv(EnvChaosLayout, layoutPKFull)
	t.Setenv(EnvChaosWorkers, "4")
	if o := chaosOptionsFromEnv(t); o.Layout != layoutPKFull || o.MaxWorkers != 4 {
		t.Errorf("layout %q, %d workers; want %s, 4", o.Layout, o.MaxWorkers, layoutPKFull)
	}
}

// TestChaosOptionsBySeed checks what the seed picks when the variables are unset: the layout by
// (seed/3) mod 2 and the delete mode by seed mod 3, so that six consecutive seeds cover every
// pair; the variables override both.
func TestChaosOptionsBySeed(t *testing.T) {
	for _, env := range []string{EnvChaosLayout, EnvChaosDeleteMode, EnvChaosDeps, EnvChaosRate} {
		t.Setenv(env, "")
	}
	pairs := map[string]bool{}
	for seed, want := range []string{layoutDMSDefault, layoutDMSDefault, layoutDMSDefault, layoutPKFull, layoutPKFull, layoutPKFull} {
		t.Setenv(EnvChaosSeed, strconv.Itoa(seed))
		o := chaosOptionsFromEnv(t)
		if o.Layout != want {
			t.Errorf("seed %d: layout %q, want %q", seed, o.Layout, want)
		}
		pairs[o.Layout+"/"+o.DeleteMode] = true
	}
	if len(pairs) != 6 {
		t.Errorf("six consecutive seeds gave %d layout/delete-mode pairs, want 6: %v", len(pairs), pairs)
	}
	t.Setenv(EnvChaosSeed, "3")
	t.Setenv(EnvChaosLayout, layoutDMSDefault)
	t.Setenv(EnvChaosDeleteMode, "dv")
	if o := chaosOptionsFromEnv(t); o.Layout != layoutDMSDefault || o.DeleteMode != "dv" {
		t.Errorf("seed 3 with %s and %s set: layout %q, delete mode %q", EnvChaosLayout, EnvChaosDeleteMode, o.Layout, o.DeleteMode)
	}
}

// TestChaosRecoveryCounts checks that the recovery counters keep each series' largest value and
// sum by the label that names the recovery, and that the KCL's lines are counted.
func TestChaosRecoveryCounts(t *testing.T) {
	s := &scraper{}
	p := s.add("w1", "")
	lease := func(shard, event string, v float64) metrictest.Sample {
		return metrictest.Sample{Name: "dms2iceberg_shard_heartbeats_total", Labels: map[string]string{"shard": shard, "event": event}, Value: v}
	}
	p.noteRecoveries([]metrictest.Sample{lease("s0", "put_failed", 3), lease("s1", "put_failed", 2),
		{Name: "dms2iceberg_table_commit_failures_total", Labels: map[string]string{"table": "a"}, Value: 4}})
	p.noteRecoveries([]metrictest.Sample{lease("s0", "put_failed", 1)}) // recreated from zero
	got := s.recoveryTotals()
	if got["dms2iceberg_shard_heartbeats_total{event=put_failed}"] != 5 || got["dms2iceberg_table_commit_failures_total"] != 4 {
		t.Errorf("totals %v", got)
	}
	var k kclEvidence
	k.scan([]byte("x\tERROR\tkcl\tError getting records from Kinesis that cannot be retried: ExpiredIteratorException: gone\n" +
		"x\tWARN\tkcl\tError in refreshing lease on shard: s0\n"))
	if k.consumersEnded != 1 || k.iteratorsExpired != 1 || k.renewalsFailed != 1 {
		t.Errorf("evidence %+v", k)
	}
}

// TestChaosFirstOfEachKind checks the coverage rules in front of the AWS rules: one per kind of
// each rule, each injecting once, ahead of the rule itself, which keeps its probability; the
// GetRecords ones with probability 0.2, the heartbeat puts' with 1 (a short run puts few).
func TestChaosFirstOfEachKind(t *testing.T) {
	rules := kinesisFaultRules(0.02, 0.2, time.Second, true)
	firsts := map[string]int{}
	kinds := map[string]int{}
	for _, r := range rules {
		if strings.HasSuffix(r.Name, "-first") {
			want := map[string]float64{"get-records-first": 0.2, "put-records-first": 1}[r.Name]
			if r.Max != 1 || len(r.Kinds) != 1 || r.Prob != want {
				t.Errorf("coverage rule %+v, want probability %v", r, want)
			}
			firsts[r.Name]++
			continue
		}
		if r.Max != 0 || firsts[r.Name+"-first"] != len(r.Kinds) {
			t.Errorf("rule %s (%+v) after %d coverage rules of its own", r.Name, r, firsts[r.Name+"-first"])
		}
		kinds[r.Name] = len(r.Kinds)
		if want := map[string]float64{"get-records": 0.02, "put-records": 0.2}[r.Name]; r.Prob != want {
			t.Errorf("%s probability %v, want %v", r.Name, r.Prob, want)
		}
	}
	if kinds["get-records"] != 5 || kinds["put-records"] != 4 || firsts["get-records-first"] != 5 || firsts["put-records-first"] != 4 {
		t.Errorf("rules by name %v, coverage rules %v; want 5 and 4 of each", kinds, firsts)
	}
}

// TestGenLedger checks how the generator's account is read from its log and compared with the
// stream's: equal counts pass; a record lost, stored twice, or refused and not sent again is a
// difference.
func TestGenLedger(t *testing.T) {
	log := filepath.Join(t.TempDir(), "gen.log")
	text := "gen: created stream s with 4 shards\n" +
		"gen: 100/2000 records sent, 50 records/s, 3 requests, 0 records re-sent\n" +
		"gen: 2000/2000 records sent, 290 records/s, 61 requests, 12 records re-sent after a failure\n" +
		"gen: stream s: 2000 records in 6.9s (290 records/s), 61 PutRecords requests, 12 records re-sent after a failure\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := readGenLedger(log)
	if err != nil {
		t.Fatal(err)
	}
	if l.workload != 2000 || l.sent != 2000 || l.requests != 61 || l.resent != 12 || l.took != 6900*time.Millisecond {
		t.Fatalf("ledger %+v", l)
	}
	if r := l.rate(); r < 289 || r > 291 {
		t.Fatalf("rate %.1f, want 2000/6.9 s", r)
	}
	l.stream, l.partialEntries = 2000, 9
	if d := l.differences(); len(d) != 0 {
		t.Fatalf("equal accounts: %v", d)
	}
	for name, change := range map[string]func(*genLedger){
		"a record lost":           func(l *genLedger) { l.stream-- },
		"a record stored twice":   func(l *genLedger) { l.stream++ },
		"gen stopped short":       func(l *genLedger) { l.sent-- },
		"refused, not sent again": func(l *genLedger) { l.partialEntries = 13 },
	} {
		bad := l
		change(&bad)
		if len(bad.differences()) == 0 {
			t.Errorf("%s: no difference", name)
		}
	}
	if err := os.WriteFile(log, []byte("gen: created stream s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readGenLedger(log); err == nil {
		t.Error("a log without the last lines was read")
	}
}
