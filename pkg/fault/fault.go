package fault

import (
	"fmt"
	"strconv"
	"strings"
)

// The fault points.
const (
	AfterDecode      = "after-decode"      // a delivery was decoded, nothing handed on yet
	AfterDataFiles   = "after-data-files"  // a batch's data and delete files are written, not committed
	AfterCommit      = "after-commit"      // the catalog commit succeeded, nothing acknowledged yet
	BeforeCheckpoint = "before-checkpoint" // a checkpoint is about to be written
	AfterCheckpoint  = "after-checkpoint"  // a checkpoint was written
	DuringShutdown   = "during-shutdown"   // graceful shutdown has started

	// The points inside a table reload (design.md §7 "Reload"), hit only while a reload runs.
	AfterReloadMark     = "after-reload-mark"     // a reload's start is committed, its create-table not acknowledged
	BeforeReloadReplace = "before-reload-replace" // a reload's replace is staged, not committed
	AfterReloadReplace  = "after-reload-replace"  // a reload's replace is committed, nothing acknowledged
)

// EnvVar names the spec's environment variable, read only by binaries built with -tags faults.
const EnvVar = "DMS2ICEBERG_FAULTS"

// Points lists every fault point.
var Points = []string{AfterDecode, AfterDataFiles, AfterCommit, BeforeCheckpoint, AfterCheckpoint, DuringShutdown}

// ReloadPoints lists the fault points inside a table reload. They are not in Points (the chaos
// run's workload has no reload, so they would never be hit there); integration.TestReloadCrashes
// arms them.
var ReloadPoints = []string{AfterReloadMark, BeforeReloadReplace, AfterReloadReplace}

// rule is a parsed spec item.
type rule struct {
	at   int64   // kill at this hit (1-based); 0 when prob is used
	prob float64 // kill probability per hit
}

// parseSpec parses a comma-separated spec into its rules by point.
func parseSpec(spec string) (map[string]*rule, error) {
	parsed := map[string]*rule{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, r, err := parse(item)
		if err != nil {
			return nil, err
		}
		parsed[name] = r
	}
	return parsed, nil
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
	for _, p := range append(Points[:len(Points):len(Points)], ReloadPoints...) {
		if p == name {
			return nil
		}
	}
	return fmt.Errorf("unknown fault point %q (known: %s)", name, strings.Join(Points, ", "))
}
