package sink

import (
	"context"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// backoff and sleep are what maintenance.go still calls: removed when maintenance uses
// sink/commit.
func backoff(a int) time.Duration { return commit.Backoff(a) }

func sleep(ctx context.Context, d time.Duration) error { return commit.Sleep(ctx, d) }
