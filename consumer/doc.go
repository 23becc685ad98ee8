// Package consumer owns reading the Kinesis stream: the KCL worker (vmware-go-kcl-v2, polling
// mode), one shard processor per leased shard, decoding each record into a change event, handing
// events to the sink, and writing the shard's checkpoint only up to what the sink has committed
// (checkpoint.Shard). It declares the small Sink interface it needs; cmd plugs sink.Iceberg in.
// Config (config.go) is the `consumer:` section of the service configuration with DefaultConfig
// and Validate, whose errors name the YAML path.
//
// Concurrency: the KCL runs one goroutine per leased shard and calls that shard's processor from
// it; a processor's decoder and checkpointer are used only there. Acknowledgements arrive from
// the sink's writer goroutines through checkpoint.Shard, which is safe for concurrent use.
//
// The ordering guard's consumer side: every processor records the Kinesis arrival of
// what it hands on (change.Event.Arrival) and its reads at the tip; one goroutine per Consumer
// (horizon.go, started and waited for by Run, outliving the worker's shutdown so the sink keeps
// committing while processors drain) publishes each owned shard's read horizon on its lease row,
// scans the lease table, and computes the stream watermark W, the commit bound and the
// per-table cross-process gates (watermark.go, a pure function of that snapshot).
// Consumer.Watermark, Consumer.CommitBound and Consumer.CommitBounds read them through atomics,
// from any goroutine; Consumer.BoundsChanged wakes the writers a gate held back. A processor pauses inside ProcessRecords (read-
// ahead alignment) while it is too far ahead of W, waking on every recomputation.
//
// The arrival margin (margin.go): processors feed one marginMeter per Consumer with lower bounds
// on Kinesis's delay from consecutive reads at the tip, and with the records they hand on at or
// before their horizon (late); the horizon loop reads the margin once per round.
//
// Heartbeats (heartbeat.go, consumer.heartbeat_interval, off by default): a second goroutine
// of Run, stopped with reading and waited for, puts a heartbeat record into each owned quiet
// shard; processors skip heartbeat records (whatever the setting) after folding their arrival
// into the shard's horizon.
//
// Lease balancing (handoff.go): the horizon loop hands every scan of the lease table to the
// balancer, which keeps this worker's presence row, updates the fair share the lease store
// consults (checkpoint.Balance), and hands one lease at a time above the share off to the
// worker below it: the shard's processor drains (ProcessRecords, on the KCL's goroutine), then
// the lease store refuses the lease's next renewal so that the KCL releases it.
//
// Consumer.Run starts the worker and returns only after the worker has shut down, at the latest
// ShutdownSlack past the stop's deadline (because the KCL's own shutdown can hang). The deadline
// is Config.ShutdownTimeout from the stop, or the process's (WithShutdownDeadline); every
// processor's shutdown during the stop drains by it.
package consumer
