//go:build integration

package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// BenchmarkScale measures how the service scales out on the layout of hot tables: primary-key
// partitioning (DMS ParallelApply) with MySQL's full before-images and primary-key changes, no
// per-table configuration, one shared catalog per run.
//
//	make bench-scale   (BENCH_SHARDS, default 8; BENCH_CHANGES, default 50000;
//	                    BENCH_LOAD_ROWS per table, default 500; BENCH_WORKERS, default "1,2,4";
//	                    BENCH_LIVE_RATE records/s of the live run, default 500; 0 skips it)
//
// backlog/workers=N: the stream is filled beforehand; N service processes start together on a
// fresh KCL application and catalog, and the time is measured from their start until every shard
// is checkpointed at its last record (everything committed), then verify must find every table
// equal to the expected state. The ratio to one worker is what matters on this 2-core machine:
// more workers cannot be faster here, and must not be slower.
//
// live: gen writes at BENCH_LIVE_RATE while two workers read; a third joins after a third of the
// run and the first leaves (graceful stop) after two thirds. Reported: the time from gen's end
// until everything is committed, the shards per worker after the join, and verify.
func BenchmarkScale(b *testing.B) {
	RequireEmulators(b)
	bin := BuildBinary(b)
	shards := envInt(b, "BENCH_SHARDS", 8)
	changes := envInt(b, "BENCH_CHANGES", 50000)
	loadRows := envInt(b, "BENCH_LOAD_ROWS", 500)
	workers := []int{1, 2, 4}
	if v := os.Getenv("BENCH_WORKERS"); v != "" {
		workers = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_WORKERS=%q: want a comma-separated list of positive counts", v)
			}
			workers = append(workers, n)
		}
	}
	s := newScaleStream(b, bin, shards, changes, loadRows, 0)
	times := map[int]time.Duration{}
	for _, n := range workers {
		b.Run(fmt.Sprintf("backlog/workers=%d", n), func(b *testing.B) {
			for range b.N {
				took := s.backlogRun(b, n)
				times[n] = took
				b.ReportMetric(took.Seconds(), "s-to-equal")
				if one, ok := times[1]; ok && n > 1 {
					b.ReportMetric(took.Seconds()/one.Seconds(), "x-one-worker")
				}
			}
		})
	}
	if rate := envIntZero(b, "BENCH_LIVE_RATE", 500); rate > 0 {
		b.Run("live", func(b *testing.B) {
			for range b.N {
				liveScaleRun(b, bin, shards, rate, loadRows)
			}
		})
	}
}

// envIntZero is envInt that also accepts 0.
func envIntZero(b *testing.B, name string, def int) int {
	if os.Getenv(name) == "0" {
		return 0
	}
	return envInt(b, name, def)
}

// scaleStream is one generated primary-key workload with full before-images.
type scaleStream struct {
	bin, stream, expected string
	last                  map[string]string
}

// newScaleStream creates a stream of shards shards and fills it with gen (at rate records/s, 0:
// as fast as the stream takes them). It waits for gen to finish.
func newScaleStream(b *testing.B, bin string, shards, changes, loadRows, rate int) *scaleStream {
	b.Helper()
	s := &scaleStream{bin: bin, stream: UniqueName("bench-scale")}
	s.expected = filepath.Join(b.TempDir(), "expected.json")
	CreateStream(b, s.stream, int32(shards))
	b.Cleanup(func() { DeleteStream(b, s.stream) })
	start := time.Now()
	_, stderr, err := RunCLI(b, bin, s.genArgs(shards, changes, loadRows, rate)...)
	if err != nil {
		b.Fatalf("gen: %v\n%s", err, stderr)
	}
	s.last, _ = ordLastSequences(b, s.stream)
	b.Logf("gen: %d changes, %d load rows per table on %d shards in %s", changes, loadRows, shards, time.Since(start).Round(time.Millisecond))
	return s
}

func (s *scaleStream) genArgs(shards, changes, loadRows, rate int) []string {
	return []string{"gen", "--stream", s.stream, "--shards", strconv.Itoa(shards), "--layout", "primary-key",
		"--full-before-images", "--load-rows", strconv.Itoa(loadRows), "--changes", strconv.Itoa(changes),
		"--seed", "35", "--rate", strconv.Itoa(rate), "--expected", s.expected}
}

// scaleConfig writes a service configuration with the defaults a user gets (no per-table
// configuration) on a fresh application and data directory; it returns the config path and the
// application (lease table) name.
func (s *scaleStream) scaleConfig(b *testing.B) (string, string) {
	b.Helper()
	app, dir := UniqueName("dms2iceberg-scale"), b.TempDir()
	b.Cleanup(func() { DeleteTable(b, app) })
	cfg := map[string]any{"stream": s.stream, "application": app, "data_dir": dir, "shutdown_timeout": "60s", "http_addr": ""}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.Fatal(err)
	}
	return path, app
}

// startWorker starts worker w<i> of a configuration.
func (s *scaleStream) startWorker(b *testing.B, config string, i int) *Service {
	return startCommand(b, s.bin, []string{"run", "--config", config},
		[]string{fmt.Sprintf("DMS2ICEBERG_WORKER_ID=w%d", i)}, "", ordLogTail)
}

// waitConsumed waits until every shard of s.last is checkpointed at its last record.
func (s *scaleStream) waitConsumed(b *testing.B, app string, svcs []*Service, timeout time.Duration) {
	b.Helper()
	WaitFor(b, timeout, 250*time.Millisecond, func() (bool, error) {
		for _, svc := range svcs {
			if svc != nil && svc.Exited() {
				return false, fmt.Errorf("service exited early:\n%s", tailFile(svc.LogPath, 8<<10))
			}
		}
		if behind := ordBehind(ordLeases(b, app), s.last); behind != "" {
			return false, fmt.Errorf("not consumed:%s", behind)
		}
		return true, nil
	}, "every shard to be checkpointed at its last record")
}

// verify stops the services gracefully and fails unless every table equals the expected state.
func (s *scaleStream) verify(b *testing.B, config string, svcs []*Service) {
	b.Helper()
	for _, svc := range svcs {
		if svc != nil && !svc.Exited() {
			if err := svc.Stop(90 * time.Second); err != nil {
				b.Errorf("graceful stop of pid %d: %v", svc.Pid(), err)
			}
		}
	}
	stdout, stderr, err := RunCLI(b, s.bin, "verify", "--config", config, "--expected", s.expected, "--max-diffs", "5")
	if err != nil {
		b.Fatalf("verify: the tables differ from the expected state (%v):\n%s%s", err, stdout, stderr)
	}
}

// backlogRun consumes the whole stream with n workers and returns the time until everything is
// committed.
func (s *scaleStream) backlogRun(b *testing.B, n int) time.Duration {
	config, app := s.scaleConfig(b)
	start := time.Now()
	var svcs []*Service
	for i := 1; i <= n; i++ {
		svcs = append(svcs, s.startWorker(b, config, i))
	}
	s.waitConsumed(b, app, svcs, 30*time.Minute)
	took := time.Since(start)
	b.Logf("%d workers: every shard committed at its last record after %s", n, took.Round(time.Millisecond))
	s.verify(b, config, svcs)
	return took
}

// liveScaleRun is the live part of BenchmarkScale.
func liveScaleRun(b *testing.B, bin string, shards, rate, loadRows int) {
	const seconds = 90
	s := &scaleStream{bin: bin, stream: UniqueName("bench-scale-live")}
	s.expected = filepath.Join(b.TempDir(), "expected.json")
	CreateStream(b, s.stream, int32(shards))
	b.Cleanup(func() { DeleteStream(b, s.stream) })
	config, app := s.scaleConfig(b)
	svcs := []*Service{s.startWorker(b, config, 1), s.startWorker(b, config, 2)}
	gen := StartCommand(b, bin, s.genArgs(shards, rate*seconds, loadRows, rate), nil)
	start := time.Now()
	time.Sleep(seconds * time.Second / 3)
	svcs = append(svcs, s.startWorker(b, config, 3))
	joined := time.Now()
	time.Sleep(seconds * time.Second / 3)
	held := leasesPerWorker(ordLeases(b, app))
	b.Logf("shards per worker %s after the third worker joined: %v", time.Since(joined).Round(time.Second), held)
	if err := svcs[0].Stop(90 * time.Second); err != nil {
		b.Errorf("graceful stop of w1: %v", err)
	}
	if err := gen.WaitTimeout(10 * time.Minute); err != nil {
		b.Fatalf("gen: %v\n%s", err, gen.Log())
	}
	genEnd := time.Now()
	b.Logf("gen wrote %d changes in %s (%.0f records/s)", rate*seconds, genEnd.Sub(start).Round(time.Second),
		float64(rate*seconds)/genEnd.Sub(start).Seconds())
	s.last, _ = ordLastSequences(b, s.stream)
	s.waitConsumed(b, app, svcs[1:], 10*time.Minute)
	b.ReportMetric(time.Since(genEnd).Seconds(), "s-after-gen")
	b.Logf("shards per worker after the first left: %v", leasesPerWorker(ordLeases(b, app)))
	s.verify(b, config, svcs[1:])
}

// leasesPerWorker counts the shards each worker holds.
func leasesPerWorker(leases map[string]ordLease) map[string]int {
	out := map[string]int{}
	for _, shard := range slices.Sorted(maps.Keys(leases)) {
		if o := leases[shard].owner; o != "" && !strings.HasPrefix(shard, "dms2iceberg") {
			out[o]++
		}
	}
	return out
}
