package consumer

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Stream, c.Application, c.WorkerID, c.Region = "s", "dms2iceberg-s", "w1", "eu-west-1"
	return c
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if c.ShardSync != 100*time.Millisecond || c.Failover != 30*time.Second || c.IdleBetweenReads != 250*time.Millisecond ||
		c.MaxRecords != 10000 || c.ShutdownTimeout != 30*time.Second || c.Decoder != dms.DefaultConfig() ||
		c.ArrivalMargin != 2*time.Second || c.ArrivalMarginFloor != 250*time.Millisecond {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if c.Stream != "" || c.Application != "" || c.WorkerID != "" || c.Region != "" || !c.AtTimestamp.IsZero() {
		t.Fatalf("DefaultConfig() fills required fields: %+v", c)
	}
	if err := c.Validate(); err == nil || err.Error() != "stream: required" {
		t.Fatalf("DefaultConfig().Validate() = %v, want stream: required", err)
	}
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("defaults with the required fields rejected: %v", err)
	}
}

func TestConfigValidateNamesTheYAMLPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Stream = "" }, "stream: required"},
		{func(c *Config) { c.Application = "" }, "application: required"},
		{func(c *Config) { c.WorkerID = "" }, "worker_id: required"},
		{func(c *Config) { c.Region = "" }, "region: required"},
		{func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown_timeout: must be positive, got 0s"},
		{func(c *Config) { c.ShardSync = -time.Second }, "consumer.shard_sync: must be positive, got -1s"},
		{func(c *Config) { c.ShardSync = time.Millisecond }, "consumer.shard_sync: must be at least 10ms, got 1ms"},
		{func(c *Config) { c.Failover = 0 }, "consumer.failover: must be positive, got 0s"},
		{func(c *Config) { c.IdleBetweenReads = 0 }, "consumer.idle_between_reads: must be positive, got 0s"},
		{func(c *Config) { c.MaxInflightBytes = 0 }, "consumer.max_inflight_bytes: must be positive, got 0"},
		{func(c *Config) { c.ArrivalMarginFloor = -time.Millisecond }, "consumer.arrival_margin_floor: must not be negative, got -1ms"},
		{func(c *Config) { c.MaxRecords = 0 }, "consumer.max_records: must be 1..10000, got 0"},
		{func(c *Config) { c.MaxRecords = 10001 }, "consumer.max_records: must be 1..10000, got 10001"},
		{func(c *Config) { c.Decoder.BeforeImageField = "" }, "dms.before_image_field: must not be empty"},
	} {
		c := validConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
	c := validConfig()
	c.MaxRecords = 1
	if err := c.Validate(); err != nil {
		t.Fatalf("max_records 1 rejected: %v", err)
	}
}

// New takes the configuration as it is: nothing is zero-filled, an invalid one is refused.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Failover = 0
	if _, err := New(c, aws.Config{}, nil, nil); err == nil || !strings.Contains(err.Error(), "consumer.failover") {
		t.Fatalf("New with failover 0: %v", err)
	}
	got, err := New(validConfig(), aws.Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.cfg != validConfig() {
		t.Fatalf("New changed the configuration: %+v", got.cfg)
	}
}
