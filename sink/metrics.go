package sink

import "time"

// Metrics receives the sink's measurements. The default does nothing; cmd plugs in Prometheus.
type Metrics interface {
	// Committed is called after each successful table commit.
	Committed(table string, rows, deletes int, attempts int, took time.Duration)
	// CommitFailed is called when a commit attempt fails and will be retried.
	CommitFailed(table string)
	// DeadLettered is called for each record sent to the dead-letter place.
	DeadLettered(table string)
	// Skipped counts events dropped because the table already holds them (replays).
	Skipped(table string, n int)
}

type nopMetrics struct{}

func (nopMetrics) Committed(string, int, int, int, time.Duration) {}
func (nopMetrics) CommitFailed(string)                            {}
func (nopMetrics) DeadLettered(string)                            {}
func (nopMetrics) Skipped(string, int)                            {}
