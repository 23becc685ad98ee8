// Package maintenance owns the maintenance of the Iceberg tables the sink writes: when each step
// is due, and the steps themselves: the conversion of equality deletes into position deletes
// (delete modes position and dv) and the positional branch kept free of them, compaction (delete
// files applied and dropped, small files merged), snapshot expiry, manifest rewrite and orphan
// cleanup; the per-table lease that lets one worker of many maintain a table (design.md,
// "Maintenance"); and the hand-off of its commits to the table's writer. The planning of deletes
// as positions (the probe, the key and manifest caches, deletion vectors, the vectors a
// compaction carries) is sink/deletes'; the maintainer holds a deletes.Planner and hands the
// writer its plans (Vectors, VectorsOfKeys). It does not import the sink: the sink constructs a
// Maintainer per table and calls it through a two-method interface (AfterCommit, Vectors).
//
// Types and files, one concept each:
//   - Maintainer (maintainer.go, schedule.go): one run of the steps (maintain) and when: Run's
//     loop, measuring a table and deciding which steps are due; maintained is the table as every
//     part sees it (catalog, identifier, config, log);
//   - config.go: Config with DefaultConfig and Validate (YAML under sink.maintenance);
//   - metrics.go: the Metrics interface, Status and Report;
//   - leaseHolder (lease.go): the lease in two table properties: acquire, validate, renew,
//     release;
//   - committer (handoff.go): the commit of every step, through commit.Run, as jobs the writer
//     may run (the hand-off slot);
//   - converter (position.go): the conversion of equality deletes into position deletes (a
//     deletes.Plan, two commits);
//   - branchMover (branch.go): the positional branch each conversion moves to its converted
//     snapshot;
//   - compactor (compact.go): compaction as plan, rewrite and commit (with the vectors it
//     carries, deletes.Planner.Carry);
//   - cleaner (steps.go): snapshot expiry, manifest rewrite, orphan cleanup;
//   - deferredDeletes (deferred.go): files of expired snapshots deleted once the retention has
//     passed;
//   - vectors.go: the writer's deletion vectors (Vectors, VectorsOfKeys) and the key cache the
//     sink gives every maintainer (KeyCache, an alias of deletes.KeyCache);
//   - Slots (slots.go): the process-wide bound on tables maintained at once;
//   - api.go: RunTable, the on-demand run of every step (the maintain command).
//
// Every persisted name (lease, last-run times, snapshot summary keys) is in sink/tableprop.
//
// Concurrency: a Maintainer's Run loop is one goroutine, owned by the caller (the sink runs one
// per table and cancels it when the table's writer has finished). It alone measures, schedules,
// plans and rewrites (the compactor, converter, branchMover, cleaner and deferredDeletes are
// its alone); during a run it starts one goroutine that renews the lease and waits for it
// before the run returns. The table's writer calls AfterCommit on its own goroutine after each
// commit: it never blocks there except to run the one maintenance commit that is waiting for it
// (the committer's hand-off slot), which it stages on the table it just committed, so the two
// never conflict, and, after a conversion's first commit (and its second, with the positional
// branch), to wait at most followUpWait for the next; the maintenance goroutine waits for that
// job's result at most HandoffWait and then commits on its own (a commit that loses a race is
// restaged on the newest table and yields to the writers between attempts). The state the two
// goroutines share is atomic: the slot, the newest committed table, the time of the writer's
// last commit and the lease's end; the key cache is shared by every maintainer of the process
// and locked. Vectors and VectorsOfKeys run on the writer's goroutine and read only the
// planner's key cache and manifest cache, both locked. RunTable runs the same steps on the
// calling goroutine, with no hand-off.
package maintenance
