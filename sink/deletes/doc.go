// Package deletes owns the planning of deletes as positions: the keys deleted by equality
// deletes (read from their files) or by a writer's batch (given in memory, VectorsOfKeys) are
// probed in the key column of every live data file they can apply to, and the positions found
// are written as Parquet position-delete files or, on a format v3 table, deletion vectors, each
// merged with the data file's live ones. It commits nothing: sink/maintenance commits a
// conversion's plans (and a compaction's carried vectors, Carry), and a table writer commits its
// batch's vectors. It imports neither sink nor sink/maintenance.
//
// Files, one concept each:
//   - plan.go: the Planner and a Plan (Planner.Plan): deleted keys, probe, position deletes;
//   - check.go: a plan checked against the newest table before each commit, and remerged with
//     the deletion vectors a writer replaced since;
//   - vectors.go: a writer's batch as deletion vectors, from keys in memory or equality-delete
//     files;
//   - carry.go: a compaction's carrying of the positions deleted while it rewrote;
//   - probe.go: the deleted keys of a scope and the readers of key columns;
//   - posdeletes.go: Parquet position-delete files (read, written) and where delete files go;
//   - keycache.go: the process-wide, byte-bounded cache of data files' key columns;
//   - keyenc.go, keybytes.go: the canonical encoding of keys other than one integer column, and
//     their columns in the key cache;
//   - manifestcache.go: a planner's cache of the live entries of the manifests it listed;
//   - live.go: a snapshot's live files and deletion vectors.
//
// Concurrency: a Planner's plans may run on several goroutines at once (a table's writer and its
// maintainer): the key cache, shared by every planner of the process, and the manifest cache are
// locked; a Plan belongs to the goroutine that made it.
package deletes
