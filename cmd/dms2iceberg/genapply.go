package main

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// gen --apply-threads N writes the workload as DMS's ParallelApply threads do
// (ParallelApplyThreads, primary-key partitioning): N requests in flight at once, each a
// PutRecords batch of up to --apply-batch records (500 at most) with distinct partition keys. Kinesis keeps the order of
// a partition key's records only across requests answered one after the other, so a record is
// sent only once every earlier record it must follow has been written (answered as stored):
//
//   - the earlier records of its partition key, and for a primary-key change those of the old
//     key (workload.Message.OldPartitionKey), which usually sit on another shard; the loads and
//     inserts of a keyless table (workload.Message.Keyless) are not ordered among themselves;
//   - for a control record (create-table, a schema change), every earlier record; and every
//     later record waits for it, as DMS applies DDL alone;
//   - for the first load record of a table after its CDC records, or its first CDC record
//     after its load records (the full load, a reload), every earlier record of the table.
//
// Records whose earlier records are written go ahead of blocked ones (another key's change does
// not wait), as parallel threads do. Failed entries of a request are sent again, first, and their
// keys stay blocked until they are written; a record that succeeded is never sent again.

// lockMode is how a record holds one of its order locks.
type lockMode uint8

const (
	lockShared lockMode = iota + 1
	lockExclusive
)

// orderLock is one lock a record holds from its dispatch until Kinesis stored it.
type orderLock struct {
	name string
	mode lockMode
}

// applyItem is one record on its way: its source position, locks and retry state.
type applyItem struct {
	m     workload.Message
	seq   int // position in the source
	locks []orderLock
	// due is when a failed record may be sent again.
	due time.Time
}

// heldLock counts the in-flight holders of a lock.
type heldLock struct {
	shared    int
	exclusive bool
}

// applyResult is one request's answer.
type applyResult struct {
	batch              []*applyItem
	out                *kinesis.PutRecordsOutput
	err                error
	sentAt, answeredAt time.Time
}

// applySender is the ParallelApply way of sending (see above). The sender it wraps holds the
// stream, the rate and the accounting (progress lines, summary, sent log); every field here
// belongs to send's goroutine, the threads only call PutRecords.
type applySender struct {
	s       *sender
	threads int
	// maxRecords bounds a request's records (at most maxBatchRecords): kinesis-mock answers
	// 25-50-record requests much faster per record than 500-record ones.
	maxRecords int
	// window bounds the records taken from the source and not yet dispatched.
	window int

	pending []*applyItem // taken, not dispatched, in source order
	retry   []*applyItem // dispatched, failed, to send again (holding their locks)
	held    map[string]*heldLock
	// class is the last data class (load or cdc) taken per table.
	class     map[string]string
	inFlight  int
	exhausted bool
	stalls    int
	backoff   time.Duration
	// firstBackoff is the first wait before failed records are sent again (100 ms; tests
	// shorten it).
	firstBackoff time.Duration
}

func newApplySender(s *sender, threads, maxRecords int) *applySender {
	return &applySender{s: s, threads: threads, maxRecords: min(maxRecords, maxBatchRecords), window: 4 * maxBatchRecords, held: map[string]*heldLock{},
		class: map[string]string{}, backoff: 100 * time.Millisecond, firstBackoff: 100 * time.Millisecond}
}

// dataOps are the operations of data records; every other one is a control record.
var dataOps = []string{"load", "insert", "update", "delete", "bad"}

// locksOf returns the locks of m, the next record of the source.
func (a *applySender) locksOf(m workload.Message) []orderLock {
	if !slices.Contains(dataOps, m.Op) {
		return []orderLock{{"*", lockExclusive}, {"key:" + m.PartitionKey, lockExclusive}}
	}
	// A keyless table's records (loads and inserts) need no order among themselves: they share
	// their key (the table's), and requests may carry several of them.
	keyMode := lockExclusive
	if m.Keyless {
		keyMode = lockShared
	}
	locks := []orderLock{{"*", lockShared}, {"key:" + m.PartitionKey, keyMode}}
	if m.OldPartitionKey != "" && m.OldPartitionKey != m.PartitionKey {
		locks = append(locks, orderLock{"key:" + m.OldPartitionKey, lockExclusive})
	}
	class := "cdc"
	if m.Op == "load" {
		class = "load"
	}
	mode := lockShared
	if prev, ok := a.class[m.Table]; ok && prev != class {
		mode = lockExclusive
	}
	a.class[m.Table] = class
	return append(locks, orderLock{"table:" + m.Table, mode})
}

// send writes every message of src to the stream.
func (a *applySender) send(ctx context.Context, src iter.Seq[workload.Message]) error {
	s := a.s
	s.init()
	next, stop := iter.Pull(src)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan []*applyItem)
	results := make(chan applyResult, a.threads)
	for range a.threads {
		go func() {
			for batch := range jobs {
				entries := make([]workload.Message, len(batch))
				for i, it := range batch {
					entries[i] = it.m
				}
				sentAt := s.now()
				out, err := s.request(ctx, entries)
				results <- applyResult{batch: batch, out: out, err: err, sentAt: sentAt, answeredAt: s.now()}
			}
		}()
	}
	defer close(jobs)
	for {
		if err := ctx.Err(); err != nil {
			a.drain(results)
			return err
		}
		if err := a.take(next); err != nil {
			a.drain(results)
			return err
		}
		for a.inFlight < a.threads {
			batch := a.batch()
			if len(batch) == 0 {
				break
			}
			a.inFlight++
			jobs <- batch
		}
		if a.inFlight == 0 && a.exhausted && len(a.pending) == 0 && len(a.retry) == 0 {
			return nil
		}
		var res applyResult
		select {
		case res = <-results:
		case <-time.After(a.wait()):
			continue
		case <-ctx.Done():
			continue
		}
		a.inFlight--
		if err := a.settle(res); err != nil {
			cancel()
			a.drain(results)
			return err
		}
		s.progress(false)
	}
}

// drain waits for the requests in flight (their answers are dropped: the send has failed).
func (a *applySender) drain(results <-chan applyResult) {
	for ; a.inFlight > 0; a.inFlight-- {
		<-results
	}
}

// wait is how long send waits for an answer before it looks at the source and the retries again.
func (a *applySender) wait() time.Duration {
	d := 100 * time.Millisecond
	if a.s.rate > 0 {
		d = min(d, time.Duration(float64(time.Second)/a.s.rate))
	}
	now := a.s.now()
	for _, it := range a.retry {
		d = min(d, max(it.due.Sub(now), time.Millisecond))
	}
	return max(d, time.Millisecond)
}

// take pulls records from the source into pending, within the rate budget and the window.
func (a *applySender) take(next func() (workload.Message, bool)) error {
	s := a.s
	budget := a.window - len(a.pending)
	if s.rate > 0 {
		budget = min(budget, s.rateBudget())
	}
	for ; budget > 0 && !a.exhausted; budget-- {
		m, ok := next()
		if !ok {
			a.exhausted = true
			break
		}
		s.taken++
		if recordSize(m) > maxRecordBytes {
			return fmt.Errorf("record for %s is %d bytes, above the Kinesis limit of %d", m.Table, recordSize(m), maxRecordBytes)
		}
		a.pending = append(a.pending, &applyItem{m: m, seq: s.taken, locks: a.locksOf(m)})
	}
	return nil
}

// batch assembles the next request: the failed records that are due, then the pending records
// (in source order) that nothing earlier blocks, with distinct partition keys, within the
// request limits. The records taken hold their locks.
func (a *applySender) batch() []*applyItem {
	var batch []*applyItem
	size := 0
	fits := func(it *applyItem) bool {
		return len(batch) < a.maxRecords && size+recordSize(it.m) <= maxBatchBytes
	}
	now := a.s.now()
	keep := a.retry[:0]
	for _, it := range a.retry {
		if !it.due.After(now) && fits(it) {
			batch = append(batch, it)
			size += recordSize(it.m)
			continue
		}
		keep = append(keep, it)
	}
	a.retry = keep
	// claimed are the locks of pending records left behind: a later record must not pass them.
	claimed := map[string]lockMode{}
	rest := a.pending[:0]
	for i, it := range a.pending {
		if len(batch) >= a.maxRecords || claimed["*"] == lockExclusive {
			rest = append(rest, a.pending[i:]...)
			break
		}
		if fits(it) && a.free(it, claimed) {
			a.acquire(it)
			batch = append(batch, it)
			size += recordSize(it.m)
			continue
		}
		for _, l := range it.locks {
			claimed[l.name] = max(claimed[l.name], l.mode)
		}
		rest = append(rest, it)
	}
	clear(a.pending[len(rest):])
	a.pending = rest
	return batch
}

// free reports whether it may be dispatched now: no lock of it is held or claimed against it.
func (a *applySender) free(it *applyItem, claimed map[string]lockMode) bool {
	for _, l := range it.locks {
		if c := claimed[l.name]; c == lockExclusive || (c == lockShared && l.mode == lockExclusive) {
			return false
		}
		if h := a.held[l.name]; h != nil && (h.exclusive || (l.mode == lockExclusive && h.shared > 0)) {
			return false
		}
	}
	return true
}

func (a *applySender) acquire(it *applyItem) {
	for _, l := range it.locks {
		h := a.held[l.name]
		if h == nil {
			h = &heldLock{}
			a.held[l.name] = h
		}
		if l.mode == lockExclusive {
			h.exclusive = true
		} else {
			h.shared++
		}
	}
}

func (a *applySender) release(it *applyItem) {
	for _, l := range it.locks {
		h := a.held[l.name]
		if l.mode == lockExclusive {
			h.exclusive = false
		} else {
			h.shared--
		}
		if !h.exclusive && h.shared == 0 {
			delete(a.held, l.name)
		}
	}
}

// settle takes one request's answer: stored records release their locks and are counted,
// failed ones wait to be sent again; a whole-request failure that may have written records
// ends the send (re-sending could duplicate them).
func (a *applySender) settle(res applyResult) error {
	s := a.s
	s.requests++
	if res.err != nil {
		if !nothingWritten(res.err) {
			return fmt.Errorf("PutRecords of %d records failed and it is unknown which were written (re-sending could duplicate them): %w", len(res.batch), res.err)
		}
		return a.failed(res.batch, true)
	}
	if len(res.out.Records) != len(res.batch) {
		return fmt.Errorf("PutRecords answered %d results for %d records", len(res.out.Records), len(res.batch))
	}
	var failed []*applyItem
	for i, r := range res.out.Records {
		it := res.batch[i]
		if r.ErrorCode != nil {
			failed = append(failed, it)
			continue
		}
		a.release(it)
		s.accept(it.m, r, res.sentAt, res.answeredAt)
	}
	if len(failed) == 0 {
		a.stalls, a.backoff = 0, a.firstBackoff
		return nil
	}
	return a.failed(failed, len(failed) == len(res.batch))
}

// failed puts records back to be sent again after the backoff, in source order. The backoff
// doubles while whole requests fail (up to 5 s) and starts again at 100 ms after a request that
// stored something: with several requests in flight, one throttled shard must not slow the
// others' records.
func (a *applySender) failed(items []*applyItem, all bool) error {
	s := a.s
	if all {
		if a.stalls++; a.stalls >= s.maxStalls {
			return fmt.Errorf("no record accepted in %d consecutive PutRecords requests; giving up with %d records sent", a.stalls, s.sent)
		}
	} else {
		a.stalls, a.backoff = 0, a.firstBackoff
	}
	s.retried += len(items)
	due := s.now().Add(a.backoff)
	if all {
		a.backoff = min(2*a.backoff, 5*time.Second)
	}
	for _, it := range items {
		it.due = due
	}
	a.retry = append(a.retry, items...)
	slices.SortFunc(a.retry, func(x, y *applyItem) int { return x.seq - y.seq })
	return nil
}
