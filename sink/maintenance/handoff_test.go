package maintenance_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/sinktest"
)

// With the hand-off on, a conversion's two commits (the position deletes, then the drop of the
// equality deletes) both run between two commits of the writer: the writer that ran the first
// waits in AfterCommit for the second, instead of running it at its next commit a flush interval
// later. Here "the writer" calls AfterCommit every 20 ms; a conversion whose second commit waited
// for the next call would show two calls adopting one table each.
func TestConversionCommitsRunInOneHandoff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	m := newModel(h)
	m.load(100)
	mt, ctx := runConverter(t, h, time.Hour) // every maintenance commit waits for the writer
	// The writer waits for the second commit as long as it takes, so that the outcome does not
	// depend on how fast this machine stages it (the service waits 250 ms).
	mt.SetFollowUpWait(time.Hour)
	m.batch(1, 100)
	var calls, twice, adopted atomic.Int64
	writerCommit := func() {
		var n int64
		mt.AfterCommit(ctx, loadUsers(t, h.cat), func(*table.Table) error { n++; return nil })
		calls.Add(1)
		adopted.Add(n)
		if n >= 2 {
			twice.Add(1)
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang bound, not a speed assertion
	for {
		writerCommit()
		if eqFiles, posFiles := deleteKinds(t, loadUsers(t, h.cat)); eqFiles == 0 && posFiles > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("equality deletes never converted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if adopted.Load() < 2 || twice.Load() == 0 {
		t.Fatalf("%d writer commits adopted %d maintenance commits, %d of them two at once: want the conversion's two commits in one hand-off",
			calls.Load(), adopted.Load(), twice.Load())
	}
	rows, _ := scanRows(t, h.cat)
	sinktest.Eq(t, rows, m.want()...)
	h.close()
}
