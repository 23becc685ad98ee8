// Package commit owns the one loop through which every Iceberg commit of the sink goes: table
// batches, schema changes, drops, key changes, dead letters and maintenance.
//
// The caller passes an Op whose Stage function stages and commits its change on the table it is
// given. The loop owns everything around that: how many attempts, reloading the table after a
// failure, recognising a lost race (the reloaded table moved since the attempt was staged, or
// table.ErrCommitFailed), the wait before the next attempt, the closing deadline (a closing
// committer keeps trying until its context ends, with shorter waits), and telling the caller of
// every reloaded table so that it re-checks its watermarks and control staleness before it
// stages again (Op.Reloaded). An attempt whose commit request was sent and failed without a
// definite answer (UnknownOutcome: a lost response, a timeout, a 5xx) is resolved by that reload,
// and the caller is told how (Op.Resolved: landed, not landed, or committed by another writer,
// told apart by a token in the snapshot summary, CommittedBy). An error marked with ErrPermanent (Permanent) ends the loop at once, and so does a
// table (given or reloaded) whose state a newer state version of dms2iceberg wrote
// (tableprop.CheckStateVersion): nothing is staged on it.
//
// It also owns what a committed table may be kept as (Detach): iceberg-go's committed tables keep
// their transaction, and with it every earlier version, alive.
//
// Concurrency: Run blocks until the commit landed, the caller said the reloaded table already
// holds the change, the attempts ran out, or the context ended. It starts no goroutines; the
// callbacks run on the calling goroutine.
package commit
