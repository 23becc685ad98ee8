//go:build integration

package integration

// The chaos run's observer (chaosObserver): a goroutine of its own that, every second while the
// cycles run, scrapes the workers' /metrics, reads the lease table (counting acquisitions and
// moves, checking that a checkpoint never moves backwards and that SHARD_END is final) and
// samples the oracle's checkpoint-vs-watermark check every CheckEvery.

import (
	"context"
	"fmt"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// chaosObserver watches the run; its fields are its goroutine's only.
type chaosObserver struct {
	checkEvery time.Duration
	cl         *chaosCluster // its scraper and its count of running workers
	stream     *chaosStream
	oracle     *chaosOracle
	led        *chaosLedger
	seen       map[string]checkpoint.LeaseRow // last observed lease per shard
}

// observe samples the lease table and the workers' /metrics every second and checks the committed prefix every
// CheckEvery, until ctx ends.
func (o *chaosObserver) observe(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		o.cl.scr.scrapeAll()
		rows, err := o.stream.leases(ctx)
		if err != nil {
			continue // the lease table does not exist yet, or the test is ending
		}
		o.noteLeases(rows)
		if time.Since(last) >= o.checkEvery {
			last = time.Now()
			if err := o.oracle.checkCommitted(ctx, "sample"); err != nil && ctx.Err() == nil {
				o.led.logf("sampled check skipped: %v", err)
			}
		}
	}
}

// noteLeases counts lease acquisitions (epoch increments) and moves (owner changes).
// It also checks that a checkpoint never moves backwards and that SHARD_END is final.
func (o *chaosObserver) noteLeases(rows map[string]checkpoint.LeaseRow) {
	var bad []string
	running := int(o.cl.running.Load())
	o.led.with(func(st *chaosStats) {
		st.workerSamples[min(running, len(st.workerSamples)-1)]++
		for shard, r := range rows {
			prev := o.seen[shard]
			if r.Epoch > prev.Epoch {
				st.acquisitions += int(r.Epoch - prev.Epoch)
				if prev.Owner != "" && r.Owner != prev.Owner {
					st.leaseMoves++
				}
			}
			switch {
			case prev.Checkpoint == checkpoint.ShardEnd && r.Checkpoint != checkpoint.ShardEnd:
				bad = append(bad, fmt.Sprintf("shard %s: checkpoint SHARD_END was overwritten with %q (owner %s, epoch %d)", shard, r.Checkpoint, r.Owner, r.Epoch))
			case isSeq(prev.Checkpoint) && isSeq(r.Checkpoint) && change.CompareSeq(r.Checkpoint, prev.Checkpoint) < 0,
				isSeq(prev.Checkpoint) && r.Checkpoint == "":
				bad = append(bad, fmt.Sprintf("shard %s: checkpoint moved backwards from %s to %q (owner %s, epoch %d)", shard, prev.Checkpoint, r.Checkpoint, r.Owner, r.Epoch))
			}
			o.seen[shard] = r
		}
	})
	for _, b := range bad {
		o.led.violation("%s", b)
	}
}

func isSeq(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
