package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// fakeKinesis records PutRecords calls and fails records as told.
type fakeKinesis struct {
	calls   int
	sizes   []int
	bytes   []int
	written []workload.Message
	// fail decides whether record i of call c fails.
	fail func(c, i int, m workload.Message) bool
	// callErr, when set, may fail a whole call.
	callErr func(c int) error
}

func (f *fakeKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	c := f.calls
	f.calls++
	var o kinesis.Options
	for _, fn := range optFns {
		fn(&o)
	}
	if _, ok := o.Retryer.(aws.NopRetryer); !ok {
		return nil, errors.New("PutRecords must be called with SDK retries off")
	}
	if f.callErr != nil {
		if err := f.callErr(c); err != nil {
			return nil, err
		}
	}
	f.sizes = append(f.sizes, len(in.Records))
	n := 0
	out := &kinesis.PutRecordsOutput{}
	failed := int32(0)
	for i, r := range in.Records {
		n += len(r.Data) + len(aws.ToString(r.PartitionKey))
		m := workload.Message{PartitionKey: aws.ToString(r.PartitionKey), Data: r.Data}
		if f.fail != nil && f.fail(c, i, m) {
			failed++
			out.Records = append(out.Records, ktypes.PutRecordsResultEntry{
				ErrorCode: aws.String("ProvisionedThroughputExceededException"), ErrorMessage: aws.String("Rate exceeded for shard"),
			})
			continue
		}
		f.written = append(f.written, m)
		out.Records = append(out.Records, ktypes.PutRecordsResultEntry{SequenceNumber: aws.String(fmt.Sprint(len(f.written))), ShardId: aws.String("shardId-000000000000")})
	}
	f.bytes = append(f.bytes, n)
	out.FailedRecordCount = aws.Int32(failed)
	return out, nil
}

func testSender(f *fakeKinesis) (*sender, *bytes.Buffer) {
	var buf bytes.Buffer
	s := &sender{api: f, stream: "s", out: &buf, sleep: func(context.Context, time.Duration) error { return nil }}
	return s, &buf
}

func seqOf(msgs []workload.Message) func(func(workload.Message) bool) {
	return func(yield func(workload.Message) bool) {
		for _, m := range msgs {
			if !yield(m) {
				return
			}
		}
	}
}

func synthetic(n, keys, size int) []workload.Message {
	out := make([]workload.Message, n)
	for i := range out {
		data := []byte(fmt.Sprintf("{\"n\":%d}", i))
		if size > len(data) {
			data = append(data, bytes.Repeat([]byte(" "), size-len(data))...)
		}
		out[i] = workload.Message{PartitionKey: fmt.Sprintf("key-%d", i%keys), Data: data, Table: "shop.t", Op: "insert"}
	}
	return out
}

// checkWritten asserts that every message was written exactly once and that per partition key
// the write order is the source order.
func checkWritten(t *testing.T, src, written []workload.Message) {
	t.Helper()
	if len(written) != len(src) {
		t.Fatalf("%d records written, want %d", len(written), len(src))
	}
	perKey := func(ms []workload.Message) map[string][]string {
		out := map[string][]string{}
		for _, m := range ms {
			out[m.PartitionKey] = append(out[m.PartitionKey], string(m.Data))
		}
		return out
	}
	if !reflect.DeepEqual(perKey(src), perKey(written)) {
		t.Fatal("per-key order or content differs from the source")
	}
}

func TestSenderBatchesInOrder(t *testing.T) {
	src := synthetic(1234, 7, 0)
	f := &fakeKinesis{}
	s, _ := testSender(f)
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.sizes, []int{500, 500, 234}) {
		t.Fatalf("batch sizes %v", f.sizes)
	}
	if !reflect.DeepEqual(f.written, func() []workload.Message {
		var w []workload.Message
		for _, m := range src {
			w = append(w, workload.Message{PartitionKey: m.PartitionKey, Data: m.Data})
		}
		return w
	}()) {
		t.Fatal("records not written in source order")
	}
	if s.sent != 1234 || s.counts["shop.t"]["insert"] != 1234 {
		t.Fatalf("sent %d, counts %v", s.sent, s.counts)
	}
}

func TestSenderBatchBytes(t *testing.T) {
	src := synthetic(40, 3, 300<<10)
	f := &fakeKinesis{}
	s, _ := testSender(f)
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	for i, n := range f.bytes {
		if n > maxBatchBytes {
			t.Fatalf("request %d carries %d bytes", i, n)
		}
	}
	if f.sizes[0] != 17 {
		t.Fatalf("first request has %d records of 300 KiB, want 17", f.sizes[0])
	}
	checkWritten(t, src, f.written)

	big := synthetic(1, 1, maxRecordBytes+1)
	s, _ = testSender(&fakeKinesis{})
	if err := s.send(context.Background(), seqOf(big)); err == nil || !strings.Contains(err.Error(), "above the Kinesis limit") {
		t.Fatalf("oversized record: %v", err)
	}
}

func TestSenderRetriesPartialFailuresWithoutDuplicates(t *testing.T) {
	msgs := slices.Collect(workload.New(workload.Config{Seed: 3, Changes: 3000, LoadRows: 200}).Messages())
	f := &fakeKinesis{}
	// A throttled shard: from some record on, every record of a throttled key fails for the rest
	// of the request (as Kinesis does once a shard is over its limit).
	f.fail = func(c, i int, m workload.Message) bool {
		if c%3 == 2 {
			return false
		}
		h := 0
		for _, b := range []byte(m.PartitionKey) {
			h = h*31 + int(b)
		}
		throttledKey := (h+c)%4 == 0
		return throttledKey && i >= (c*37)%200
	}
	// Record which calls failed a key so that "failed then later same key succeeded" never
	// happens by construction.
	s, out := testSender(f)
	if err := s.send(context.Background(), seqOf(msgs)); err != nil {
		t.Fatal(err)
	}
	if s.retried == 0 {
		t.Fatal("the test did not exercise any failure")
	}
	checkWritten(t, msgs, f.written)
	s.summary()
	if !strings.Contains(out.String(), "shop.customers") || !strings.Contains(out.String(), "pk-change=") {
		t.Fatalf("summary:\n%s", out)
	}
}

func TestSenderRefusesToReorderAKey(t *testing.T) {
	src := synthetic(10, 2, 0) // keys alternate: key-0, key-1, key-0, ...
	f := &fakeKinesis{fail: func(c, i int, m workload.Message) bool { return c == 0 && i == 2 }}
	s, _ := testSender(f)
	err := s.send(context.Background(), seqOf(src))
	if err == nil || !strings.Contains(err.Error(), "per-key order") || !strings.Contains(err.Error(), "key-0") {
		t.Fatalf("got %v, want a per-key order error for key-0", err)
	}
	// The failing record is the last of its key in the request: it is retried, not an error.
	f = &fakeKinesis{fail: func(c, i int, m workload.Message) bool { return c == 0 && i == 8 }}
	s, _ = testSender(f)
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	checkWritten(t, src, f.written)
	if f.sizes[1] != 1 {
		t.Fatalf("second request carries %d records, want the 1 retried", f.sizes[1])
	}
}

func TestSenderWholeRequestErrors(t *testing.T) {
	src := synthetic(20, 3, 0)
	throttle := &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "slow down"}
	f := &fakeKinesis{callErr: func(c int) error {
		if c < 2 {
			return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecords", Err: throttle}
		}
		return nil
	}}
	s, _ := testSender(f)
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	checkWritten(t, src, f.written)

	f = &fakeKinesis{callErr: func(int) error { return errors.New("read: connection reset by peer") }}
	s, _ = testSender(f)
	err := s.send(context.Background(), seqOf(src))
	if err == nil || !strings.Contains(err.Error(), "unknown which were written") {
		t.Fatalf("got %v, want an unknown-outcome error", err)
	}

	f = &fakeKinesis{fail: func(int, int, workload.Message) bool { return true }}
	s, _ = testSender(f)
	s.maxStalls = 5
	if err := s.send(context.Background(), seqOf(src)); err == nil || !strings.Contains(err.Error(), "no record accepted") {
		t.Fatalf("got %v, want a give-up error", err)
	}
	if f.calls != 5 {
		t.Fatalf("%d calls before giving up, want 5", f.calls)
	}
}

// sendAtRate sends n synthetic records at rate through a fake Kinesis whose every answer takes
// answer, on a fake clock that only sleeps and answers move, checks they were all written, and
// returns the fake time it took and the size of each request.
func sendAtRate(t *testing.T, n int, rate float64, answer time.Duration) (time.Duration, []int) {
	t.Helper()
	src := synthetic(n, 5, 0)
	clock := time.Unix(0, 0)
	f := &fakeKinesis{callErr: func(int) error { clock = clock.Add(answer); return nil }}
	s, _ := testSender(f)
	s.now = func() time.Time { return clock }
	s.sleep = func(_ context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	s.rate = rate
	if err := s.send(context.Background(), seqOf(src)); err != nil {
		t.Fatal(err)
	}
	checkWritten(t, src, f.written)
	return clock.Sub(time.Unix(0, 0)), f.sizes
}

func TestSenderRate(t *testing.T) {
	el, sizes := sendAtRate(t, 50, 100, 0)
	if el < 480*time.Millisecond || el > 600*time.Millisecond {
		t.Fatalf("50 records at 100/s took %s of fake time", el)
	}
	for _, n := range sizes {
		if n > 10 {
			t.Fatalf("request of %d records at 100/s", n)
		}
	}
}

// A slow endpoint must not slow the generator below its rate: it catches up with bigger
// requests (TestMaintenanceBesideSeveralWorkers once reached 38 records/s of 250 in CI,
// where every PutRecords took about 550 ms).
func TestSenderRateCatchesUpWithSlowAnswers(t *testing.T) {
	el, sizes := sendAtRate(t, 1000, 250, 550*time.Millisecond)
	// 1000 records at 250/s is 4 s; the last answer adds its 550 ms.
	if el > 5*time.Second {
		t.Fatalf("1000 records at 250/s with 550 ms answers took %s of fake time (%d requests)", el, len(sizes))
	}
	big := 0
	for _, n := range sizes {
		big = max(big, n)
	}
	if big <= 25 {
		t.Fatalf("largest request %d records: the sender never caught up", big)
	}
}

func TestSenderStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeKinesis{callErr: func(c int) error {
		if c == 1 {
			cancel()
		}
		return nil
	}}
	s, _ := testSender(f)
	err := s.send(ctx, workload.New(workload.Config{Seed: 1}).Stream(context.Background()))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestTablesConfigLoadsIntoServiceConfig(t *testing.T) {
	for _, tz := range []bool{false, true} {
		b, err := tablesConfigYAML(tz)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, append([]byte("stream: s\n"), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(path) // strict: unknown YAML keys are errors
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if err := cfg.Sink.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.Sink.TimestampTZ != tz {
			t.Fatalf("timestamptz %v, want %v", cfg.Sink.TimestampTZ, tz)
		}
		want := workload.TableConfigs()
		if len(cfg.Sink.Tables) != len(want) {
			t.Fatalf("%d tables, want %d", len(cfg.Sink.Tables), len(want))
		}
		for src, w := range want {
			got, ok := cfg.Sink.Tables[src]
			if !ok {
				t.Fatalf("table %s missing", src)
			}
			if !slices.Equal(got.PrimaryKey, w.PrimaryKey) || len(got.Columns) != len(w.Columns) {
				t.Fatalf("%s: %+v", src, got)
			}
			for i, c := range got.Columns {
				wc := w.Columns[i]
				if c.Name != wc.Name || c.Type != wc.Type || c.Length != wc.Length || c.Precision != wc.Precision ||
					c.Scale != wc.Scale || c.Nullable == nil || *c.Nullable != *wc.Nullable {
					t.Fatalf("%s column %d: %+v, want %+v", src, i, c, wc)
				}
			}
		}
	}
}

func TestGenFlags(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--expected", "x"}, "--stream is required"},
		{[]string{"--stream", "s"}, "--expected is required"},
		{[]string{"--stream", "s", "--expected", "x", "--shards", "0"}, "--shards"},
		{[]string{"--stream", "s", "--expected", "x", "--rate", "-1"}, "--rate"},
		{[]string{"--stream", "s", "--expected", "x", "extra"}, "unexpected arguments"},
		{[]string{"--stream", "s", "--expected", "x", "--apply-threads", "33"}, "--apply-threads"},
		{[]string{"--stream", "s", "--expected", "x", "--apply-threads", "4", "--apply-batch", "501"}, "--apply-batch"},
	} {
		err := runGen(ctx, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
	if lookupCommand("gen") == nil || lookupCommand("verify") == nil {
		t.Fatal("gen and verify are not registered")
	}
	// The workload flags reach the generator configuration.
	o, err := parseGenArgs([]string{"--stream", "s", "--expected", "x", "--changes", "50", "--seed", "3",
		"--schema-changes", "--bad-records", "2", "--partial-updates"})
	if err != nil {
		t.Fatal(err)
	}
	want := workload.Config{Seed: 3, Changes: 50, LoadRows: 1000, SchemaChanges: true, BadRecords: 2, PartialUpdates: true}
	if got := o.workloadConfig(); got != want {
		t.Fatalf("workload config %+v, want %+v", got, want)
	}
	o, err = parseGenArgs([]string{"--stream", "s", "--expected", "x", "--resends", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.workloadConfig(); got.Resends != 7 {
		t.Fatalf("--resends 7: workload config %+v", got)
	}
	if _, err := parseGenArgs([]string{"--stream", "s", "--expected", "x", "--resends", "1", "--schema-changes"}); err == nil {
		t.Fatal("--resends with --schema-changes accepted")
	}
	o, err = parseGenArgs([]string{"--stream", "s", "--expected", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.workloadConfig(); got.PartialUpdates || got.SchemaChanges || got.BadRecords != 0 || got.Resends != 0 {
		t.Fatalf("default workload config %+v", got)
	}
}

func TestWriteExpected(t *testing.T) {
	exp, err := workload.New(workload.Config{Seed: 2, Changes: 100, LoadRows: 10}).Expected()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "expected.json")
	if err := writeExpected(path, exp); err != nil {
		t.Fatal(err)
	}
	back, err := readExpected(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(exp, back) {
		t.Fatal("expected state changed on the way through the file")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}
}
