package sink

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
)

// A commit that lost to another writer is re-staged soon, at every attempt; other failures back
// off exponentially; a closing writer waits less in both cases.
func TestRetryDelay(t *testing.T) {
	conflict := fmt.Errorf("commit: %w: metadata-location moved underneath us", table.ErrCommitFailed)
	other := errors.New("dial tcp: connection refused")
	cases := []struct {
		name     string
		err      error
		closing  bool
		attempt  int
		min, max time.Duration
	}{
		{"conflict first", conflict, false, 0, 10 * time.Millisecond, 20 * time.Millisecond},
		{"conflict late", conflict, false, 15, 500 * time.Millisecond, time.Second},
		{"conflict closing", conflict, true, 15, 125 * time.Millisecond, 250 * time.Millisecond},
		{"other first", other, false, 0, 25 * time.Millisecond, 50 * time.Millisecond},
		{"other late", other, false, 15, 10 * time.Second, 20 * time.Second},
		{"other closing", other, true, 15, time.Second, 2 * time.Second},
		{"huge attempt", other, false, 1 << 20, 10 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		for range 200 {
			d := retryDelay(c.attempt, c.err, c.closing)
			if d < c.min || d > c.max {
				t.Fatalf("%s: retryDelay(%d) = %s, want within [%s, %s]", c.name, c.attempt, d, c.min, c.max)
			}
		}
	}
}
