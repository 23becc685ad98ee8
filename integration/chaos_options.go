//go:build integration

package integration

// The chaos run's options (chaosOptions): what sizes a run, read from the environment
// (chaosOptionsFromEnv); the variables are listed in chaos.go.

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// chaosOptions sizes a run.
type chaosOptions struct {
	Seed      int64
	Cycles    int
	Shards    int32 // initial shard count
	MinShards int   // merges keep at least this many open shards
	MaxShards int   // splits keep at most this many open shards
	// MaxTotalShards bounds the stream's shards, closed ones included.
	MaxTotalShards int
	// MaxWorkers bounds the workers running at once (EnvChaosWorkers).
	MaxWorkers int
	LoadRows   int
	Changes    int
	// Rate is the generator's records per second, sized so that traffic lasts about as long as
	// the cycles.
	Rate     float64
	Failover time.Duration
	// CheckEvery is the interval of the sampled checkpoint check.
	CheckEvery time.Duration
	// Dwell bounds the random pause after each cycle.
	MinDwell, MaxDwell time.Duration
	// Deps is EnvChaosDeps as a canonical list ("" none, else some of rest, s3, dynamodb and
	// kinesis joined by commas); DepsREST, DepsS3, DepsDynamo and DepsKinesis its parts.
	Deps                                      string
	DepsREST, DepsS3, DepsDynamo, DepsKinesis bool
	// Heartbeat is the workers' consumer.heartbeat_interval (0: off).
	Heartbeat time.Duration
	// DeleteMode is the workers' sink.delete_mode.
	DeleteMode string
	// Layout is EnvChaosLayout: layoutDMSDefault or layoutPKFull.
	Layout string
}

// The workload layouts of EnvChaosLayout.
const (
	layoutDMSDefault = "dms-default"
	layoutPKFull     = "primary-key-full"
)

// cycleEstimate sizes the generator's rate: traffic is to last about cycles × cycleEstimate,
// a little longer than the cycles take, and the cycles wait for the traffic when they run ahead
// of it (pace), so that every cycle happens while records flow.
const cycleEstimate = 12 * time.Second

func chaosOptionsFromEnv(t *testing.T) chaosOptions {
	t.Helper()
	o := chaosOptions{Seed: time.Now().UnixNano() % 1_000_000_000, Cycles: 12, Shards: 4, MinShards: 2, MaxShards: 7, MaxTotalShards: 28,
		MaxWorkers: 3, LoadRows: 100, Failover: 4 * time.Second, CheckEvery: 5 * time.Second,
		MinDwell: time.Second, MaxDwell: 4 * time.Second}
	if v := os.Getenv(EnvChaosSeed); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvChaosSeed, v, err)
		}
		o.Seed = n
	}
	if v := os.Getenv(EnvChaosCycles); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", EnvChaosCycles, v)
		}
		o.Cycles = n
	}
	o.sizeWorkload(t)
	o.parseDeps(t)
	o.parseHeartbeat(t)
	o.parseDeleteMode(t)
	o.parseLayout(t)
	if v := os.Getenv(EnvChaosWorkers); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > len(chaosWorkerIDs) {
			t.Fatalf("%s=%q: want 2 to %d workers", EnvChaosWorkers, v, len(chaosWorkerIDs))
		}
		o.MaxWorkers = n
	}
	return o
}

// sizeWorkload sizes the workload and the generator's rate from the cycles, or the workload from
// EnvChaosRate.
func (o *chaosOptions) sizeWorkload(t *testing.T) {
	o.Changes = max(1500, 110*o.Cycles)
	records := float64(5 + 4*o.LoadRows + o.Changes)
	o.Rate = max(5, records/(float64(o.Cycles)*cycleEstimate.Seconds()))
	if v := os.Getenv(EnvChaosRate); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 1 {
			t.Fatalf("%s=%q: want records per second", EnvChaosRate, v)
		}
		o.Rate = r
		o.Changes = max(o.Changes, int(r*float64(o.Cycles)*cycleEstimate.Seconds())-(5+4*o.LoadRows))
	}
}

// parseHeartbeat sets the workers' heartbeat interval: by seed, always on when Kinesis is
// faulted (the heartbeat puts are a path the faults are for), or as EnvChaosHeartbeat says.
func (o *chaosOptions) parseHeartbeat(t *testing.T) {
	if o.Seed%2 != 0 || o.DepsKinesis {
		o.Heartbeat = 250 * time.Millisecond
	}
	if v := os.Getenv(EnvChaosHeartbeat); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration (0: off)", EnvChaosHeartbeat, v)
		}
		o.Heartbeat = d
	}
}

// parseLayout sets the workload's layout: by seed ((seed/3) mod 2: dms-default, then
// primary-key-full; with the delete mode's seed mod 3, six consecutive seeds cover every pair),
// or as EnvChaosLayout says.
func (o *chaosOptions) parseLayout(t *testing.T) {
	o.Layout = []string{layoutDMSDefault, layoutPKFull}[(o.Seed/3%2+2)%2]
	switch v := os.Getenv(EnvChaosLayout); v {
	case "":
	case layoutDMSDefault, layoutPKFull:
		o.Layout = v
	default:
		t.Fatalf("%s=%q: want %s or %s", EnvChaosLayout, v, layoutDMSDefault, layoutPKFull)
	}
}

func (o *chaosOptions) parseDeleteMode(t *testing.T) {
	o.DeleteMode = []string{maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV}[(o.Seed%3+3)%3]
	if v := os.Getenv(EnvChaosDeleteMode); v != "" {
		switch v {
		case maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV:
			o.DeleteMode = v
		default:
			t.Fatalf("%s=%q: want %s, %s or %s", EnvChaosDeleteMode, v,
				maintenance.DeleteModeEquality, maintenance.DeleteModePosition, maintenance.DeleteModeDV)
		}
	}
}

// parseDeps reads EnvChaosDeps: a comma-separated list of rest, s3, dynamodb and kinesis, or
// all (dynamodb, kinesis and s3: every dependency but the REST catalog, which cannot go with
// s3).
func (o *chaosOptions) parseDeps(t *testing.T) {
	for _, d := range strings.Split(os.Getenv(EnvChaosDeps), ",") {
		switch d = strings.TrimSpace(d); d {
		case "":
		case "rest":
			o.DepsREST = true
		case "s3":
			o.DepsS3 = true
		case "dynamodb":
			o.DepsDynamo = true
		case "kinesis":
			o.DepsKinesis = true
		case "all":
			o.DepsS3, o.DepsDynamo, o.DepsKinesis = true, true, true
		default:
			t.Fatalf("%s=%q: want a list of rest, s3, dynamodb and kinesis, all, or nothing", EnvChaosDeps, os.Getenv(EnvChaosDeps))
		}
	}
	if o.DepsREST && o.DepsS3 {
		// The REST server decides every table's location under its own warehouse and writes
		// the metadata files itself; the shared server (.ci/catalogs.sh) has a file://
		// warehouse and Hadoop's FileIO without an S3 file system, so it cannot put a table
		// in the S3 emulator. Faults on both at once need that server started with an S3
		// FileIO (ResolvingFileIO and s3.endpoint): a change to the shared emulators.
		t.Fatalf("%s: rest with s3: the shared REST catalog server cannot write s3:// (its FileIO has no S3); run rest and s3 separately", EnvChaosDeps)
	}
	var deps []string
	for _, d := range []struct {
		on   bool
		name string
	}{{o.DepsREST, "rest"}, {o.DepsS3, "s3"}, {o.DepsDynamo, "dynamodb"}, {o.DepsKinesis, "kinesis"}} {
		if d.on {
			deps = append(deps, d.name)
		}
	}
	o.Deps = strings.Join(deps, ",")
}
