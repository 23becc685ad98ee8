package consumer

import (
	"fmt"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
)

// minShardSync is the shortest consumer.shard_sync: the KCL counts it in whole milliseconds.
const minShardSync = 10 * time.Millisecond

// MaxRecordsLimit is the largest GetRecords batch Kinesis serves.
const MaxRecordsLimit = 10000

// Config configures the consumer. The tagged fields are the `consumer:` section of the service
// configuration; the others (`yaml:"-"`) are set by cmd from the top-level keys they name, as
// sink.Config.Stream is. Validate's errors name the YAML path of the field.
type Config struct {
	// Stream is the Kinesis stream name. Required. cmd sets it from `stream`.
	Stream string `yaml:"-"`
	// Application names the KCL application; the lease table has the same name. Required. cmd
	// sets it from `application`.
	Application string `yaml:"-"`
	// WorkerID identifies this worker in the lease table. Required. cmd sets it from
	// `worker_id`.
	WorkerID string `yaml:"-"`
	// Region is the AWS region. Required. cmd sets it from `region`.
	Region string `yaml:"-"`
	// AtTimestamp, when set, starts shards without a checkpoint at this time instead of at
	// TRIM_HORIZON (the default). LATEST is never used. cmd sets it from `initial_timestamp`.
	AtTimestamp time.Time `yaml:"-"`
	// ShutdownTimeout bounds the graceful shutdown (flush, commit, checkpoint). Default 30s. cmd
	// sets it from `shutdown_timeout`.
	ShutdownTimeout time.Duration `yaml:"-"`
	// Decoder configures the DMS decoder. Default dms.DefaultConfig(). cmd sets it from `dms`.
	Decoder dms.Config `yaml:"-"`

	// ShardSync is how often the worker looks for new shards and free leases (the KCL's shard-sync
	// round, jittered by ±50%). The KCL takes at most one lease per round, so this bounds how
	// fast a worker takes its share: 64 leases take about 64 rounds. A round costs one
	// ListShards call (Kinesis allows 1000 a second per stream) and, for a worker that holds
	// its share, no lease-table read (checkpoint.Balance answers from the last scan). Default
	// 100ms; at least 10ms (docs/scaling.md, "Lease balancing").
	ShardSync time.Duration `yaml:"shard_sync"`
	// Failover is the lease duration: a worker that stops renewing loses its shards after it.
	// Default 30s.
	Failover time.Duration `yaml:"failover"`
	// IdleBetweenReads is the pause between empty GetRecords calls. Default 250ms.
	IdleBetweenReads time.Duration `yaml:"idle_between_reads"`
	// MaxRecords is the GetRecords batch limit, 1..10000. Default 10000.
	MaxRecords int `yaml:"max_records"`

	// ArrivalMargin is the most a caught-up shard's read horizon trails its read time: it
	// covers Kinesis propagation delay (AWS: typically under 1 s, no bound) plus clock skew
	// between Kinesis and this host (NTP, which the leases already need: tens of ms). The margin
	// used is measured from the stream (margin.go) and kept between ArrivalMarginFloor and
	// this; it is this until there is evidence, and again for 10 minutes after a late record.
	// Default 2s.
	ArrivalMargin time.Duration `yaml:"arrival_margin"`
	// ArrivalMarginFloor is the least arrival margin the measurement may give; at or above
	// ArrivalMargin the margin is fixed at ArrivalMargin. Default 250ms.
	ArrivalMarginFloor time.Duration `yaml:"arrival_margin_floor"`
	// HeartbeatInterval, when positive, makes the consumer put a small heartbeat record
	// (partition key HeartbeatPartitionKey) every this often into each shard it owns that is
	// caught up and has delivered nothing for that long. Reading it back gives the shard a read
	// horizon from Kinesis's own arrival time instead of read time minus ArrivalMargin, so an
	// idle shard holds the commit bound back by about this interval instead of the margin.
	// Needs kinesis:PutRecords on the stream, and every other consumer of the stream sees
	// the heartbeat records (dms2iceberg skips them). Default 0: off.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// MaxReadAhead is how far past the stream watermark W, by arrival time, a shard that is not
	// holding W back is read before its processor pauses (read-ahead alignment). Default 30s.
	MaxReadAhead time.Duration `yaml:"max_read_ahead"`
	// HorizonInterval is how often every owned shard's horizon is published on its lease row
	// and W recomputed; cmd keeps it at most sink.flush_interval. Default 1s.
	HorizonInterval time.Duration `yaml:"horizon_interval"`
	// MaxInflightBytes is the process-wide byte budget of records read and not yet finished
	// (committed, dead-lettered or acknowledged as duplicates), counted by their raw size: the
	// shard processors block before handing on a delivery that does not fit, except that a
	// processor holding nothing always hands on its next delivery (docs/design.md §8). It bounds
	// what the table writers' queues, buffers and pending dead letters hold together. Default
	// 128 MiB (membudget.DefaultLimit).
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
}

// DefaultConfig returns the defaults documented on each field; the required fields are empty.
func DefaultConfig() Config {
	return Config{
		ShutdownTimeout:    30 * time.Second,
		Decoder:            dms.DefaultConfig(),
		ShardSync:          100 * time.Millisecond,
		Failover:           30 * time.Second,
		IdleBetweenReads:   250 * time.Millisecond,
		MaxRecords:         MaxRecordsLimit,
		ArrivalMargin:      DefaultArrivalMargin,
		ArrivalMarginFloor: DefaultArrivalMarginFloor,
		MaxReadAhead:       DefaultMaxReadAhead,
		HorizonInterval:    DefaultHorizonInterval,
		MaxInflightBytes:   membudget.DefaultLimit,
	}
}

// Validate reports the first invalid field by its YAML path.
func (c Config) Validate() error {
	for _, req := range []struct{ path, v string }{
		{"stream", c.Stream}, {"application", c.Application}, {"worker_id", c.WorkerID}, {"region", c.Region},
	} {
		if req.v == "" {
			return fmt.Errorf("%s: required", req.path)
		}
	}
	for _, pos := range []struct {
		path string
		v    time.Duration
	}{
		{"shutdown_timeout", c.ShutdownTimeout}, {"consumer.shard_sync", c.ShardSync},
		{"consumer.failover", c.Failover}, {"consumer.idle_between_reads", c.IdleBetweenReads},
		{"consumer.max_read_ahead", c.MaxReadAhead}, {"consumer.horizon_interval", c.HorizonInterval},
	} {
		if pos.v <= 0 {
			return fmt.Errorf("%s: must be positive, got %s", pos.path, pos.v)
		}
	}
	if c.ShardSync > 0 && c.ShardSync < minShardSync {
		return fmt.Errorf("consumer.shard_sync: must be at least %s, got %s", minShardSync, c.ShardSync)
	}
	if c.HeartbeatInterval < 0 || (c.HeartbeatInterval > 0 && c.HeartbeatInterval < minHeartbeatInterval) {
		return fmt.Errorf("consumer.heartbeat_interval: must be 0 (off) or at least %s, got %s", minHeartbeatInterval, c.HeartbeatInterval)
	}
	if c.ArrivalMargin < 0 {
		return fmt.Errorf("consumer.arrival_margin: must not be negative, got %s", c.ArrivalMargin)
	}
	if c.ArrivalMarginFloor < 0 {
		return fmt.Errorf("consumer.arrival_margin_floor: must not be negative, got %s", c.ArrivalMarginFloor)
	}
	if c.MaxInflightBytes <= 0 {
		return fmt.Errorf("consumer.max_inflight_bytes: must be positive, got %d", c.MaxInflightBytes)
	}
	if c.MaxRecords <= 0 || c.MaxRecords > MaxRecordsLimit {
		return fmt.Errorf("consumer.max_records: must be 1..%d, got %d", MaxRecordsLimit, c.MaxRecords)
	}
	if err := c.Decoder.Validate(); err != nil {
		return err // names its YAML path (dms.<key>)
	}
	return nil
}
