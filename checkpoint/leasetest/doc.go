// Package leasetest holds the contract every lease store of package checkpoint must keep
// (checkpoint.Leases over DynamoDB, checkpoint.MemLeases in memory): Run drives a store through
// acquisition, renewal, fencing, the never-backwards rule, the finality of SHARD_END, and the
// horizon attributes (published only by the owner under its epoch, removed by every acquisition,
// kept by renewals and checkpoints, frozen by SHARD_END), and lease balancing (a reserved lease
// goes only to its taker, a purposeful release refuses the renewal, presence rows, the share).
// The in-memory store runs it in checkpoint's unit tests; the DynamoDB one in the integration
// tests, against the emulator.
//
// Concurrency: Run's cases run in parallel, each on its own shard of the table the Table gives
// it; a Table must be safe for concurrent use.
package leasetest
