// Package maintenance owns the maintenance of the Iceberg tables the sink writes: the conversion
// of equality deletes into position deletes (delete modes position and dv) and the positional
// branch kept free of them, compaction (delete files
// applied and dropped, small files merged), snapshot expiry, manifest rewrite and
// orphan cleanup, when each is due, and the per-table lease that lets one worker of many
// maintain a table (design.md, "Maintenance"), and the deletion vectors a dv table's writer
// commits instead of equality deletes. It does not import the sink: the sink constructs a
// Maintainer per table and calls it through a two-method interface (AfterCommit, Vectors).
//
// Files, one concept each:
//   - config.go: Config with DefaultConfig and Validate (YAML under sink.maintenance);
//   - metrics.go: the Metrics interface, Status and Report;
//   - maintainer.go: the Maintainer and one run of the steps (maintain);
//   - schedule.go: when: Run's loop, measuring a table and deciding which steps are due;
//   - lease.go: the lease in two table properties: acquire, validate, renew, release;
//   - handoff.go: the commit of every step, through commit.Run, as jobs the writer may run;
//   - position.go: the conversion of equality deletes into position deletes (plan, two commits);
//   - branch.go: the positional branch each conversion moves to its converted snapshot;
//   - vectors.go: the writer's deletion vectors (Vectors), and the compaction's carrying of
//     those committed while it rewrote;
//   - probe.go: the deleted keys of a scope and the readers of key and position columns;
//   - keycache.go: the process-wide, byte-bounded cache of data files' integer key columns;
//   - manifestcache.go: a maintainer's cache of the live entries of the manifests it listed;
//   - deferred.go: files of expired snapshots deleted once the retention has passed;
//   - slots.go: the process-wide bound on tables maintained at once;
//   - compact.go: compaction as plan, rewrite and commit;
//   - steps.go: snapshot expiry, manifest rewrite, orphan cleanup;
//   - api.go: RunTable, the on-demand run of every step (the maintain command).
//
// Every persisted name (lease, last-run times, snapshot summary keys) is in sink/tableprop.
//
// Concurrency: a Maintainer's Run loop is one goroutine, owned by the caller (the sink runs one
// per table and cancels it when the table's writer has finished). It alone measures, schedules,
// plans and rewrites; during a run it starts one goroutine that renews the lease and waits for
// it before the run returns. The table's writer calls AfterCommit on its own goroutine after
// each commit: it never blocks there except to run the one maintenance commit that is waiting
// for it (the hand-off slot), which it stages on the table it just committed, so the two never
// conflict, and, after a conversion's first commit (and its second, with the positional
// branch), to wait at most followUpWait for the next; the maintenance goroutine waits for that job's result at most HandoffWait and then
// commits on its own (a commit that loses a race is restaged on the newest table and yields to
// the writers between attempts). The state the two goroutines share is atomic: the slot, the
// newest committed table, the time of the writer's last commit and the lease's end; the key cache
// is shared by every maintainer of the process and locked. Vectors runs on the writer's
// goroutine and reads only the key cache and the manifest cache, both locked. RunTable runs
// the same steps on the calling goroutine, with no hand-off.
package maintenance
