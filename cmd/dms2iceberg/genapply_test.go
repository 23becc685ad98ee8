package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// parallelKinesis is a fake PutRecords endpoint for concurrent requests: it stores records in
// the order it answers them, fails entries as told, and notes every request that carried two
// records of one partition key or a key another request in flight carried.
type parallelKinesis struct {
	delay time.Duration
	// fail decides whether entry i of request c fails.
	fail func(c, i int) bool
	// callErr, when set, may fail request c as a whole.
	callErr func(c int) error

	mu          sync.Mutex
	calls       int
	inFlight    map[string]bool
	maxParallel int
	parallel    int
	sizes       []int
	written     []string // the records' data, in the order they were stored
	conflicts   []string
}

func (f *parallelKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.mu.Lock()
	c := f.calls
	f.calls++
	if f.inFlight == nil {
		f.inFlight = map[string]bool{}
	}
	keys := map[string]bool{}
	for _, r := range in.Records {
		k := aws.ToString(r.PartitionKey)
		if k == keylessKey {
			continue // a keyless table's records are not ordered among themselves
		}
		if keys[k] || f.inFlight[k] {
			f.conflicts = append(f.conflicts, fmt.Sprintf("request %d: key %s twice in flight", c, k))
		}
		keys[k] = true
	}
	for k := range keys {
		f.inFlight[k] = true
	}
	f.parallel++
	f.maxParallel = max(f.maxParallel, f.parallel)
	f.mu.Unlock()
	time.Sleep(f.delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parallel--
	for k := range keys {
		delete(f.inFlight, k)
	}
	if f.callErr != nil {
		if err := f.callErr(c); err != nil {
			return nil, err
		}
	}
	f.sizes = append(f.sizes, len(in.Records))
	out := &kinesis.PutRecordsOutput{}
	for i, r := range in.Records {
		if f.fail != nil && f.fail(c, i) {
			out.Records = append(out.Records, ktypes.PutRecordsResultEntry{
				ErrorCode: aws.String("ProvisionedThroughputExceededException"), ErrorMessage: aws.String("Rate exceeded for shard")})
			continue
		}
		f.written = append(f.written, string(r.Data))
		out.Records = append(out.Records, ktypes.PutRecordsResultEntry{SequenceNumber: aws.String(fmt.Sprint(len(f.written))), ShardId: aws.String("shardId-000000000000")})
	}
	return out, nil
}

// keylessKey is the partition key of the keyless table's records in every layout.
const keylessKey = workload.Schema + "." + workload.Events

// checkApplyOrder fails t unless written holds every record of src once and in an order that
// keeps what the apply sender promises: per partition key the source order; a key change after
// the old key's earlier records; a control record after every earlier record and before every
// later one; a table's first load or CDC record after a switch between them after every earlier
// record of the table.
func checkApplyOrder(t *testing.T, src []workload.Message, written []string) {
	t.Helper()
	at := map[string]int{}
	for i, d := range written {
		if _, dup := at[d]; dup {
			t.Fatalf("record written twice: %.80s", d)
		}
		at[d] = i
	}
	if len(written) != len(src) {
		t.Fatalf("%d records written, want %d", len(written), len(src))
	}
	lastOfKey, lastOfTable, class := map[string]int{}, map[string]int{}, map[string]string{}
	lastAny, lastControl := -1, -1
	for _, m := range src {
		i, ok := at[string(m.Data)]
		if !ok {
			t.Fatalf("record never written: %.80s", m.Data)
		}
		after := func(j int, what string) {
			if i <= j {
				t.Fatalf("%s record of %s (%s) written at %d, before %s at %d", m.Op, m.Table, m.PartitionKey, i, what, j)
			}
		}
		if j, ok := lastOfKey[m.PartitionKey]; ok && !m.Keyless {
			after(j, "its key's earlier record")
		}
		if j, ok := lastOfKey[m.OldPartitionKey]; ok && m.KeyChange {
			after(j, "the old key's earlier record")
		}
		after(lastControl, "the last control record")
		c := map[bool]string{true: "load", false: "cdc"}[m.Op == "load"]
		if !slices.Contains(dataOps, m.Op) {
			after(lastAny, "an earlier record")
			lastControl = i
		} else if prev, ok := class[m.Table]; ok && prev != c {
			after(lastOfTable[m.Table], "its table's earlier "+prev+" record")
		}
		if slices.Contains(dataOps, m.Op) {
			class[m.Table] = c
		}
		lastOfKey[m.PartitionKey] = i
		lastOfTable[m.Table] = max(lastOfTable[m.Table], i)
		lastAny = max(lastAny, i)
	}
}

// pkWorkload is the chaos run's workload: primary-key partitioning, full before-images, key
// changes and a reload of customers.
func pkWorkload(changes int) []workload.Message {
	return slices.Collect(workload.New(workload.Config{Seed: 11, Changes: changes, LoadRows: 100, Layout: workload.LayoutPrimaryKey,
		FullBeforeImages: true, Reload: workload.Reload{Table: workload.Customers, At: changes / 2, Deletes: 5, Updates: 5}}).Messages())
}

// testApply is an apply sender with millisecond backoffs.
func testApply(s *sender, threads int) *applySender {
	a := newApplySender(s, threads, maxBatchRecords)
	a.backoff, a.firstBackoff = time.Millisecond, time.Millisecond
	return a
}

func failSome(c, i int) bool {
	h := fnv.New32a()
	fmt.Fprint(h, c, "/", i)
	return h.Sum32()%5 == 0
}

func TestApplySenderKeepsOrderWithPartialFailures(t *testing.T) {
	src := pkWorkload(3000)
	f := &parallelKinesis{delay: time.Millisecond, fail: failSome}
	s, out := testSender(nil)
	s.api = f
	a := testApply(s, 4)
	if err := a.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	if len(f.conflicts) > 0 {
		t.Fatalf("%d conflicts, first: %s", len(f.conflicts), f.conflicts[0])
	}
	checkApplyOrder(t, src, f.written)
	if s.sent != len(src) || s.retried == 0 || len(a.held) != 0 {
		t.Fatalf("sent %d of %d, %d re-sent, %d locks still held", s.sent, len(src), s.retried, len(a.held))
	}
	if f.maxParallel < 2 || slices.Max(f.sizes) < 100 {
		t.Fatalf("at most %d requests at once, largest %d records: not sent in parallel batches", f.maxParallel, slices.Max(f.sizes))
	}
	s.summary()
	if !strings.Contains(out.String(), "pk-change=") {
		t.Fatalf("summary:\n%s", out)
	}
}

// The checks above fail the sender that puts a key's records into one request (the default
// sender, one request at a time): the test can tell.
func TestApplyOrderCheckCatchesSameKeyBatches(t *testing.T) {
	src := pkWorkload(500)
	f := &parallelKinesis{}
	s, _ := testSender(nil)
	s.api = f
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	if len(f.conflicts) == 0 {
		t.Fatal("the default sender put no key twice in a request: the check proves nothing")
	}
}

func TestApplySenderWholeRequestErrors(t *testing.T) {
	src := pkWorkload(300)
	throttle := &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "slow down"}
	f := &parallelKinesis{callErr: func(c int) error {
		if c%4 == 1 {
			return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecords", Err: throttle}
		}
		return nil
	}}
	s, _ := testSender(nil)
	s.api = f
	if err := testApply(s, 3).send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	checkApplyOrder(t, src, f.written)

	f = &parallelKinesis{callErr: func(c int) error {
		if c == 2 {
			return errors.New("read: connection reset by peer")
		}
		return nil
	}}
	s, _ = testSender(nil)
	s.api = f
	if err := testApply(s, 3).send(context.Background(), seqOf(src)); err == nil || !strings.Contains(err.Error(), "unknown which were written") {
		t.Fatalf("got %v, want an unknown-outcome error", err)
	}

	f = &parallelKinesis{fail: func(int, int) bool { return true }}
	s, _ = testSender(nil)
	s.api = f
	s.maxStalls = 5
	if err := testApply(s, 2).send(context.Background(), seqOf(src)); err == nil || !strings.Contains(err.Error(), "no record accepted") {
		t.Fatalf("got %v, want a give-up error", err)
	}
}

// TestApplySenderRate: at 2,000 records/s the apply sender takes about the rate's time, and the
// source is read no faster than the rate.
func TestApplySenderRate(t *testing.T) {
	src := pkWorkload(1000)
	f := &parallelKinesis{delay: 5 * time.Millisecond}
	s, _ := testSender(nil)
	s.api = f
	s.rate = 2000
	start := time.Now()
	if err := newApplySender(s, 4, 50).send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	if slices.Max(f.sizes) > 50 {
		t.Fatalf("a request of %d records with --apply-batch 50", slices.Max(f.sizes))
	}
	want := time.Duration(float64(len(src)) / s.rate * float64(time.Second))
	if el := time.Since(start); el < want*9/10 {
		t.Fatalf("%d records at %.0f/s in %s, want at least %s", len(src), s.rate, el, want*9/10)
	}
	checkApplyOrder(t, src, f.written)
}

func TestApplySenderStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &parallelKinesis{callErr: func(c int) error {
		if c == 3 {
			cancel()
		}
		return nil
	}}
	s, _ := testSender(nil)
	s.api = f
	err := testApply(s, 3).send(ctx, workload.New(workload.Config{Seed: 1, Layout: workload.LayoutPrimaryKey}).Stream(context.Background()))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
