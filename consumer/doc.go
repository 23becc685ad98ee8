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
// Consumer.Run starts the worker and returns only after the worker has shut down (bounded by
// Config.ShutdownTimeout, because the KCL's own shutdown can hang).
package consumer
