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

	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
)

// BenchmarkScale measures how the service scales out on the layout of hot tables: primary-key
// partitioning (DMS ParallelApply) with MySQL's full before-images and primary-key changes, no
// per-table configuration, one shared catalog per run.
//
//	make bench-scale   (BENCH_SHARDS, default 8; BENCH_CHANGES, default 50000; BENCH_LOG_LEVEL; BENCH_KEEP;
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

// scaleConfig is one run's configuration with the defaults a user gets (no per-table
// configuration) on a fresh application and data directory, one file per worker that differs
// only in the worker's /metrics address.
type scaleConfig struct {
	app, dir string
	cfg      map[string]any
	// configs and addrs are each worker's config file and /metrics address, by worker number - 1.
	configs, addrs []string
}

func (s *scaleStream) newConfig(b *testing.B) *scaleConfig {
	b.Helper()
	c := &scaleConfig{app: UniqueName("dms2iceberg-scale"), dir: b.TempDir()}
	if d := os.Getenv("BENCH_KEEP"); d != "" { // keep the warehouse and the service logs there
		var err error
		if err = os.MkdirAll(d, 0o755); err == nil {
			c.dir, err = os.MkdirTemp(d, "scale")
		}
		if err != nil {
			b.Fatalf("BENCH_KEEP=%s: %v", d, err)
		}
	}
	b.Cleanup(func() { DeleteTable(b, c.app) })
	c.cfg = map[string]any{"stream": s.stream, "application": c.app, "data_dir": c.dir, "shutdown_timeout": "60s"}
	if lvl := os.Getenv("BENCH_LOG_LEVEL"); lvl != "" { // debug shows the KCL's lease rounds
		c.cfg["log_level"] = lvl
	}
	return c
}

// worker returns the config file of worker i (1-based), writing it on first use.
func (c *scaleConfig) worker(b *testing.B, i int) string {
	b.Helper()
	for len(c.configs) < i {
		n := len(c.configs) + 1
		addr := opsFreeAddr(b)
		cfg := maps.Clone(c.cfg)
		cfg["http_addr"] = addr
		out, err := yaml.Marshal(cfg)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(c.dir, fmt.Sprintf("config-w%d.yaml", n))
		if err := os.WriteFile(path, out, 0o644); err != nil {
			b.Fatal(err)
		}
		c.configs, c.addrs = append(c.configs, path), append(c.addrs, addr)
	}
	return c.configs[i-1]
}

// startWorker starts worker w<i> of a configuration.
func (s *scaleStream) startWorker(b *testing.B, c *scaleConfig, i int) *Service {
	return startCommand(b, s.bin, []string{"run", "--config", c.worker(b, i)},
		[]string{fmt.Sprintf("DMS2ICEBERG_WORKER_ID=w%d", i)}, "", ordLogTail)
}

// gateWait scrapes the running workers' /metrics: the seconds their writers held changes back
// for other workers' older ones (summed over tables and workers), and the seconds their commits
// took from the start of a flush (the commit wall time).
func (c *scaleConfig) gateWait(b *testing.B, svcs []*Service) (wait, commits float64) {
	for i, svc := range svcs {
		if svc == nil || svc.Exited() {
			continue
		}
		samples, err := metrictest.Scrape(scrapeClient, "http://"+c.addrs[i]+"/metrics")
		if err != nil {
			b.Logf("scrape w%d: %v", i+1, err)
			continue
		}
		for _, v := range metrictest.ByLabel(samples, "dms2iceberg_table_gate_wait_seconds_total", "table") {
			wait += v
		}
		for _, v := range metrictest.ByLabel(samples, "dms2iceberg_table_commit_duration_seconds_sum", "table") {
			commits += v
		}
	}
	return wait, commits
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
func (s *scaleStream) verify(b *testing.B, c *scaleConfig, svcs []*Service) {
	b.Helper()
	for _, svc := range svcs {
		if svc != nil && !svc.Exited() {
			if err := svc.Stop(90 * time.Second); err != nil {
				b.Errorf("graceful stop of pid %d: %v", svc.Pid(), err)
			}
		}
	}
	if os.Getenv("BENCH_KEEP") != "" {
		for _, svc := range svcs {
			if svc != nil {
				data, _ := os.ReadFile(svc.LogPath)
				_ = os.WriteFile(filepath.Join(c.dir, filepath.Base(svc.LogPath)), data, 0o644)
			}
		}
	}
	stdout, stderr, err := RunCLI(b, s.bin, "verify", "--config", c.worker(b, 1), "--expected", s.expected, "--max-diffs", "5")
	if err != nil {
		b.Fatalf("verify: the tables differ from the expected state (%v):\n%s%s", err, stdout, stderr)
	}
}

// backlogRun consumes the whole stream with n workers and returns the time until everything is
// committed.
func (s *scaleStream) backlogRun(b *testing.B, n int) time.Duration {
	c := s.newConfig(b)
	start := time.Now()
	var svcs []*Service
	for i := 1; i <= n; i++ {
		svcs = append(svcs, s.startWorker(b, c, i))
	}
	s.waitConsumed(b, c.app, svcs, 30*time.Minute)
	took := time.Since(start)
	wait, commits := c.gateWait(b, svcs)
	b.Logf("%d workers: every shard committed at its last record after %s; writers held changes for other workers' older ones %.1f s in all, commits took %.1f s in all",
		n, took.Round(time.Millisecond), wait, commits)
	b.ReportMetric(wait, "gate-wait-s")
	if commits > 0 {
		b.ReportMetric(wait/commits, "gate-wait/commit-time")
	}
	s.verify(b, c, svcs)
	return took
}

// liveScaleRun is the live part of BenchmarkScale.
func liveScaleRun(b *testing.B, bin string, shards, rate, loadRows int) {
	const seconds = 90
	s := &scaleStream{bin: bin, stream: UniqueName("bench-scale-live")}
	s.expected = filepath.Join(b.TempDir(), "expected.json")
	CreateStream(b, s.stream, int32(shards))
	b.Cleanup(func() { DeleteStream(b, s.stream) })
	c := s.newConfig(b)
	svcs := []*Service{s.startWorker(b, c, 1), s.startWorker(b, c, 2)}
	gen := StartCommand(b, bin, s.genArgs(shards, rate*seconds, loadRows, rate), nil)
	start := time.Now()
	time.Sleep(seconds * time.Second / 3)
	svcs = append(svcs, s.startWorker(b, c, 3))
	joined := time.Now()
	time.Sleep(seconds * time.Second / 3)
	held := leasesPerWorker(ordLeases(b, c.app))
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
	s.waitConsumed(b, c.app, svcs[1:], 10*time.Minute)
	b.ReportMetric(time.Since(genEnd).Seconds(), "s-after-gen")
	wait, commits := c.gateWait(b, svcs)
	b.Logf("shards per worker after the first left: %v; gate wait %.1f s, commits %.1f s", leasesPerWorker(ordLeases(b, c.app)), wait, commits)
	s.verify(b, c, svcs[1:])
}

// leasesPerWorker counts the shards each worker holds.
func leasesPerWorker(leases map[string]ordLease) map[string]int {
	out := map[string]int{}
	for _, shard := range slices.Sorted(maps.Keys(leases)) {
		if o := leases[shard].owner; o != "" && !strings.HasPrefix(shard, "~") {
			out[o]++
		}
	}
	return out
}
