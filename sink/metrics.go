package sink

import "time"

// CommitInfo describes one successful table commit.
type CommitInfo struct {
	// Table is the target "namespace.table"; Source is the source "schema.table".
	Table, Source string
	SnapshotID    int64
	// Rows is the number of row images written, Deletes the number of keys deleted (every
	// touched key of a keyed table), Trimmed the changes dropped because the table already held
	// them.
	Rows, Deletes, Trimmed int
	// Attempts is how many commit attempts the batch took.
	Attempts int
	// Took is the time from the start of the flush to the commit.
	Took time.Duration
	// Oldest is when the oldest change of the batch arrived at the writer (freshness).
	Oldest time.Time
	// Watermarks are the table's per-shard watermarks after the commit.
	Watermarks map[string]string
}

// Metrics receives the sink's measurements and commit notifications. Implementations must be
// safe for concurrent use and must not block: they are called on the writers' goroutines. The
// default does nothing; cmd plugs in Prometheus and the post-commit hook.
type Metrics interface {
	// Committed is called after each successful table commit.
	Committed(info CommitInfo)
	// CommitFailed is called when a commit attempt fails and will be retried.
	CommitFailed(table string)
	// DeadLettered is called for each record sent to the dead-letter place.
	DeadLettered(table string)
	// Skipped counts events dropped because the table already holds them (replays).
	Skipped(table string, n int)
}

type nopMetrics struct{}

func (nopMetrics) Committed(CommitInfo) {}
func (nopMetrics) CommitFailed(string)  {}
func (nopMetrics) DeadLettered(string)  {}
func (nopMetrics) Skipped(string, int)  {}
