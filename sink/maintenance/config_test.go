package maintenance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := maintenance.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*maintenance.Config){
		"max_delete_files":         func(c *maintenance.Config) { c.MaxDeleteFiles = 0 },
		"orphan_min_age":           func(c *maintenance.Config) { c.OrphanMinAge = time.Minute },
		"keep_last":                func(c *maintenance.Config) { c.KeepLast = 0 },
		"lease_duration":           func(c *maintenance.Config) { c.LeaseDuration = time.Second },
		"orphan_interval":          func(c *maintenance.Config) { c.OrphanInterval = -1 },
		"check_interval":           func(c *maintenance.Config) { c.CheckInterval = 0 },
		"position_delay":           func(c *maintenance.Config) { c.PositionDelay = -time.Second },
		"rewrite_deleted_fraction": func(c *maintenance.Config) { c.RewriteDeletedFraction = 1.5 },
		"concurrency":              func(c *maintenance.Config) { c.Concurrency = -1 },
		"max_snapshots":            func(c *maintenance.Config) { c.MaxSnapshots = c.KeepLast },
		"key_cache_bytes":          func(c *maintenance.Config) { c.KeyCacheBytes = -1 },
	} {
		c := maintenance.DefaultConfig()
		mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "sink.maintenance."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := maintenance.DefaultConfig()
	c.MaxSnapshots = 0  // no cap
	c.KeyCacheBytes = 0 // no key cache
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
