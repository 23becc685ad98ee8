// Package sink owns everything on the Iceberg side: opening the catalog, creating tables from
// DMS table definitions, configuration or inferred values, and the table writers that buffer,
// deduplicate and commit each table's changes as one snapshot per batch (data files for new row
// images, equality-delete files for replaced and deleted keys, and the per-shard watermarks as
// table properties in the same commit). It also owns the dead-letter file, and runs table
// maintenance (compaction, snapshot expiry, manifest rewrite, orphan cleanup), which package
// sink/maintenance owns; a writer knows it only through the maintainer interface.
//
// Every commit (table batches, schema changes, drops, key changes, dead letters) goes through
// sink/commit's one loop with a stage function; every persisted property name comes from
// sink/tableprop. A table writer is a loop over parts that each own their fields (see writer.go):
// the planner (the pure buffer and dedupe plan, the order and the commit bound), the table state
// (targetTable), the committer (the commit path of rows), the schema and control appliers, the
// reload tracker and the dead letters; it is built with its collaborators (writerEnv) and never
// reaches back into the Iceberg value. Measurements go to one Metrics interface (NopMetrics by default); the
// post-commit hook is a commit listener (WithCommitListener), called on the writer's goroutine
// after each commit and before its records are acknowledged.
//
// The ordering guard (sink.ordering arrival, the default; order.go): a writer commits per shard
// only the prefix of its changes that arrived at or before the commit bound (WithCommitBound;
// without one, everything), decides the last change per key in arrival and DMS source-position
// order, holds control records and data records of a table not created yet until their turn in
// that order, and acknowledges only the changes a commit took. Each commit records the bound as
// dms2iceberg.complete-through. The buffer of a table whose bound does not move grows until the
// consumer's read-ahead alignment stops feeding it; intake never blocks on the bound (that could
// stall the very shard that holds the bound back).
//
// Concurrency: Iceberg.Run owns one goroutine per table writer and waits for all of them.
// Submit and Flush may be called from any number of goroutines; each table writer is the only
// goroutine that touches its table's buffer and catalog state, and hands results back only
// through change.Acker. Every intake queue is bounded (Config.QueueLength), so a slow commit
// applies backpressure to the shard processors; Buffers shows each queue's length and the size
// of the buffer its writer last published (atomics: no lock is shared with the writer). With maintenance on, Run also owns one maintainer
// goroutine per table, stopped when its writer finishes. It compacts on its own goroutine against
// a snapshot; its commits are handed to the writer, which runs them right after one of its own
// commits (maintainer.AfterCommit), so the two never race. Maintenance errors are logged and
// counted, never returned from Run. Metrics, the commit listener and the commit bound provider
// are called on the writers' goroutines: they must be safe for concurrent use and must not block.
package sink
