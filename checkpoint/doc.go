// Package checkpoint owns the join between shards and tables: the per-shard Tracker that knows,
// for every delivery (one KCL ProcessRecords call) of a shard, how many of its events are not yet
// finished, and the highest sequence number below which everything is committed. Only that
// number may ever be written as the shard's Kinesis checkpoint (invariant 1).
//
// It also owns the names of the per-shard watermark properties that the sink writes into every
// Iceberg commit.
//
// Concurrency: a Shard is shared by the shard processor that registers deliveries (one goroutine
// at a time) and the table writers that acknowledge events (many goroutines); every method is
// safe for concurrent use. No lock is held across I/O.
package checkpoint
