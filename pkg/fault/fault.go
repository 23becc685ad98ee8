package fault

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The fault points.
const (
	AfterDecode      = "after-decode"      // a delivery was decoded, nothing handed on yet
	AfterDataFiles   = "after-data-files"  // a batch's data and delete files are written, not committed
	AfterCommit      = "after-commit"      // the catalog commit succeeded, nothing acknowledged yet
	BeforeCheckpoint = "before-checkpoint" // a checkpoint is about to be written
	AfterCheckpoint  = "after-checkpoint"  // a checkpoint was written
	DuringShutdown   = "during-shutdown"   // graceful shutdown has started
)

// Points lists every fault point.
var Points = []string{AfterDecode, AfterDataFiles, AfterCommit, BeforeCheckpoint, AfterCheckpoint, DuringShutdown}

type rule struct {
	at   int64   // kill at this hit (1-based); 0 when prob is used
	prob float64 // kill probability per hit
	hits atomic.Int64
}

var (
	enabled atomic.Bool
	mu      sync.Mutex
	rules   map[string]*rule
	// kill is replaced in tests.
	kill = func(point string) {
		fmt.Fprintf(os.Stderr, "dms2iceberg: fault point %s: killing the process\n", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never continue past the point
	}
)

// Configure installs a spec (see the package comment). An empty spec disables every point.
func Configure(spec string) error {
	parsed := map[string]*rule{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, r, err := parse(item)
		if err != nil {
			return err
		}
		parsed[name] = r
	}
	mu.Lock()
	rules = parsed
	mu.Unlock()
	enabled.Store(len(parsed) > 0)
	return nil
}

func parse(item string) (string, *rule, error) {
	if name, n, ok := strings.Cut(item, "@"); ok {
		at, err := strconv.ParseInt(n, 10, 64)
		if err != nil || at < 1 {
			return "", nil, fmt.Errorf("fault %q: @ needs a positive count", item)
		}
		return name, &rule{at: at}, known(name)
	}
	if name, p, ok := strings.Cut(item, "%"); ok {
		prob, err := strconv.ParseFloat(p, 64)
		if err != nil || prob <= 0 || prob > 1 {
			return "", nil, fmt.Errorf("fault %q: %% needs a probability in (0, 1]", item)
		}
		return name, &rule{prob: prob}, known(name)
	}
	return "", nil, fmt.Errorf("fault %q: want NAME@N or NAME%%P", item)
}

func known(name string) error {
	for _, p := range Points {
		if p == name {
			return nil
		}
	}
	return fmt.Errorf("unknown fault point %q (known: %s)", name, strings.Join(Points, ", "))
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
