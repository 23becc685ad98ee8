package main

import (
	"os"
	"runtime/debug"
)

// softMemoryLimit is the Go soft memory limit (runtime/debug.SetMemoryLimit) the service runs
// under unless GOMEMLIMIT is set: four times the byte budget (consumer.max_inflight_bytes) plus
// 256 MiB. What the budget admits is live about twice (the raw record and its decoded copy),
// plus its converted row and a flush's Arrow batch and Parquet pages; the fixed part covers the
// tables' queues, the loaded table metadata and the SDKs. Without a limit the garbage collector
// lets the heap grow to twice the live heap and more under a high allocation rate (64 KiB
// records: peak RSS 12 times the budget, docs/benchmarks.md "Many tables").
func softMemoryLimit(budget int64) int64 { return 4*budget + 256<<20 }

// applyMemoryLimit sets softMemoryLimit(budget) unless the operator set GOMEMLIMIT (which the
// Go runtime applies itself). It returns the limit in effect and whether it came from
// GOMEMLIMIT.
func applyMemoryLimit(budget int64) (limit int64, fromEnv bool) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), true
	}
	limit = softMemoryLimit(budget)
	debug.SetMemoryLimit(limit)
	return limit, false
}
