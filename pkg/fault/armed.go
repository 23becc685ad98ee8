//go:build faults

package fault

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with fault points (the faults build tag).
const Enabled = true

// ConfigureFromEnv installs the spec in DMS2ICEBERG_FAULTS (unset or empty: no fault).
func ConfigureFromEnv() error {
	if err := Configure(os.Getenv(EnvVar)); err != nil {
		return fmt.Errorf("%s: %w", EnvVar, err)
	}
	return nil
}

var (
	enabled atomic.Bool
	mu      sync.Mutex
	rules   map[string]*armedRule
	// kill is replaced in tests.
	kill = func(point string) {
		fmt.Fprintf(os.Stderr, "dms2iceberg: fault point %s: killing the process\n", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never continue past the point
	}
)

// armedRule is a rule with its hit count.
type armedRule struct {
	rule
	hits atomic.Int64
}

// Configure installs a spec (see the package comment). An empty spec disables every point.
func Configure(spec string) error {
	parsed, err := parseSpec(spec)
	if err != nil {
		return err
	}
	armed := make(map[string]*armedRule, len(parsed))
	for name, r := range parsed {
		armed[name] = &armedRule{rule: *r}
	}
	mu.Lock()
	rules = armed
	mu.Unlock()
	enabled.Store(len(parsed) > 0)
	return nil
}

// Hit marks that the point was reached, and kills the process if its rule says so.
func Hit(point string) {
	if !enabled.Load() {
		return
	}
	mu.Lock()
	r := rules[point]
	mu.Unlock()
	if r == nil {
		return
	}
	n := r.hits.Add(1)
	if (r.at > 0 && n == r.at) || (r.prob > 0 && rand.Float64() < r.prob) {
		kill(point)
	}
}
