// Package checkpoint owns the join between shards and tables: the per-shard Tracker that knows,
// for every delivery (one KCL ProcessRecords call) of a shard, how many of its events are not yet
// finished, and the highest sequence number below which everything is committed. Only that
// number may ever be written as the shard's Kinesis checkpoint (invariant 1). The Tracker also
// knows the arrival of the oldest unfinished delivery (Oldest) and, for deliveries registered
// by BeginTracked, per source table and Kind the oldest unacknowledged event (PendingTables).
//
// It also owns the lease table and the persisted names:
//
//   - leaserow.go: every lease-table attribute (Attr*), LeaseRow and ParseLeaseRow, the one
//     parser of lease rows;
//   - leases.go: the lease rules and LeaseStore, the interface a shard processor uses;
//   - dynamo.go: Leases, the DynamoDB store (the KCL's checkpointer, made safe);
//   - memleases.go: MemLeaseTable and MemLeases, the in-memory store for tests, with the same
//     rules (leasetest holds the contract both keep);
//   - share.go: lease balancing: workers' presence rows (PresenceKey), the fair share and the
//     hand-off plan (ComputeShare), and Balance, the view GetLease and FetchCheckpoint consult
//     (refusals above the share, reservations, purposeful release); dynamoshare.go and
//     memshare.go are the two stores' writes of it (Reserve, Announce, Withdraw);
//   - the horizon attributes of a lease row (AttrReadHorizon, AttrPendingFrom,
//     AttrPendingTables, AttrHorizonAt, AttrArrivalMargin): how far each shard's owner has
//     handed records on, by Kinesis arrival time, the oldest record it has not yet committed,
//     per table and kind the oldest it has not committed (gates.go: the ordering guard's
//     cross-process gates), and the arrival margin the owner measured;
//     every worker reads them all (Rows) to compute the stream-wide watermark and the gates
//     (package consumer);
//   - watermark.go: the per-shard watermark properties the sink writes into every Iceberg
//     commit.
//
// Concurrency: a Shard is shared by the shard processor that registers deliveries (one goroutine
// at a time) and the table writers that acknowledge events (many goroutines); every method is
// safe for concurrent use. Leases and MemLeases are safe for concurrent use; each of their
// writes is one conditional update. No lock is held across I/O.
package checkpoint
