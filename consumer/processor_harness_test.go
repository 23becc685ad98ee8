package consumer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// The shard processor's test harness: a consumer wired to an in-memory lease table, a fake sink
// that holds events until the test (or a flush) acknowledges them, a fake dead-letter store, a
// fake stream and recording metrics. Nothing here depends on timing: tests wait on channels.

const me = "me" // this worker's id

// goodRecord is a DMS insert the decoder accepts; badRecord is one it refuses.
var (
	goodRecord = []byte(`{"data":{"id":1},"metadata":{"record-type":"data","operation":"insert","partition-key-type":"schema-table","schema-name":"public","table-name":"t"}}`)
	badRecord  = []byte(`{"data":`)
)

// fakeSink holds every submitted event until it is acknowledged by ack, by Flush, or at once
// (autoAck).
type fakeSink struct {
	mu       sync.Mutex
	held     []heldEvent
	autoAck  bool
	failAt   int   // the failAt-th Submit (1-based) fails; 0: none
	flushErr error // Flush fails with it
	onFlush  func()
	flushes  int
	// deadlines holds the deadline of every Flush's context (zero: none).
	deadlines []time.Time
	// submitted receives the sequence number of every event handed over.
	submitted chan string
	// keys are the key columns KeyColumns answers (nil: none known).
	keys map[string][]string
}

// KeyColumns makes the fake a KeyColumner.
func (s *fakeSink) KeyColumns(schema, table string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[schema+"."+table]
}

type heldEvent struct {
	seq   string
	ack   change.Acker
	acked bool
}

func newFakeSink() *fakeSink { return &fakeSink{submitted: make(chan string, 1024)} }

func (s *fakeSink) Submit(_ context.Context, ev *change.Event) error {
	s.mu.Lock()
	n := len(s.held) + 1
	if s.failAt != 0 && n >= s.failAt {
		s.mu.Unlock()
		return errors.New("sink is broken")
	}
	h := heldEvent{seq: ev.Pos.Seq, ack: ev.Ack, acked: s.autoAck}
	s.held = append(s.held, h)
	s.mu.Unlock()
	if h.acked {
		h.ack.Done(1)
	}
	s.submitted <- ev.Pos.Seq
	return nil
}

// ack acknowledges the held events of the given sequence numbers (a table commit).
func (s *fakeSink) ack(t *testing.T, seqs ...string) {
	t.Helper()
	for _, seq := range seqs {
		s.mu.Lock()
		var a change.Acker
		for i := range s.held {
			if h := &s.held[i]; h.seq == seq && !h.acked {
				h.acked, a = true, h.ack
				break
			}
		}
		s.mu.Unlock()
		if a == nil {
			t.Fatalf("no unacknowledged event %s in the sink", seq)
		}
		a.Done(1)
	}
}

// Flush commits (acknowledges) everything held, unless flushErr is set.
func (s *fakeSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	s.flushes++
	dl, _ := ctx.Deadline()
	s.deadlines = append(s.deadlines, dl)
	hook, err := s.onFlush, s.flushErr
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	var acks []change.Acker
	for i := range s.held {
		if !s.held[i].acked {
			s.held[i].acked = true
			acks = append(acks, s.held[i].ack)
		}
	}
	s.mu.Unlock()
	for _, a := range acks {
		a.Done(1)
	}
	return nil
}

func (s *fakeSink) seqs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.held))
	for _, h := range s.held {
		out = append(out, h.seq)
	}
	return out
}

type fakeDLQ struct {
	mu   sync.Mutex
	err  error
	dead []change.DeadLetter
}

func (d *fakeDLQ) DeadLetter(_ context.Context, dl change.DeadLetter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return d.err
	}
	d.dead = append(d.dead, dl)
	return nil
}

// fakeStream is the stream's shards (id -> parents) and records: every position at or after
// first is readable.
type fakeStream struct {
	mu     sync.Mutex
	shards map[string][]string
	first  string
	// closed lists the shards listed with an ending sequence number; every shard's range
	// starts at hashOf(id).
	closed map[string]bool
	// puts are the PutRecords calls; putErr fails them.
	puts   []*kinesis.PutRecordsInput
	putErr error
	// hold, when set, makes the next ListShards call wait until it is closed (or its context
	// ends); later calls answer at once.
	hold chan struct{}
}

func hashOf(shard string) string { return "hash-" + shard }

func (f *fakeStream) PutRecords(_ context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.putErr != nil {
		return nil, f.putErr
	}
	f.puts = append(f.puts, in)
	return &kinesis.PutRecordsOutput{Records: make([]ktypes.PutRecordsResultEntry, len(in.Records))}, nil
}

func (f *fakeStream) ListShards(ctx context.Context, _ *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.mu.Lock()
	hold := f.hold
	f.hold = nil
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &kinesis.ListShardsOutput{}
	for id, parents := range f.shards {
		s := ktypes.Shard{ShardId: aws.String(id), HashKeyRange: &ktypes.HashKeyRange{StartingHashKey: aws.String(hashOf(id))}}
		if f.closed[id] {
			s.SequenceNumberRange = &ktypes.SequenceNumberRange{EndingSequenceNumber: aws.String("999")}
		}
		if len(parents) > 0 {
			s.ParentShardId = aws.String(parents[0])
		}
		if len(parents) > 1 {
			s.AdjacentParentShardId = aws.String(parents[1])
		}
		out.Shards = append(out.Shards, s)
	}
	return out, nil
}

func (f *fakeStream) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return &kinesis.GetShardIteratorOutput{ShardIterator: in.StartingSequenceNumber}, nil
}

func (f *fakeStream) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := aws.ToString(in.ShardIterator)
	if change.CompareSeq(seq, f.first) < 0 {
		seq = f.first
	}
	return &kinesis.GetRecordsOutput{Records: []ktypes.Record{{SequenceNumber: aws.String(seq)}}}, nil
}

func (f *fakeStream) remove(shard string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.shards, shard)
}

type fakeMetrics struct {
	mu                    sync.Mutex
	checkpointed          []string
	fenced, dead, trimmed int
	waiting               chan bool
	// WatermarkMetrics
	publishFailed, paused int
	watermark             time.Time
	holder                string
	heartbeats            map[string]int // "shard event" -> count
	records               int            // Records' counts, summed
	late                  int            // LateRecords' counts, summed
	margin                time.Duration  // the last ArrivalMargin
}

func (m *fakeMetrics) LateRecords(_ string, n int, _ time.Duration) {
	m.mu.Lock()
	m.late += n
	m.mu.Unlock()
}

func (m *fakeMetrics) ArrivalMargin(d time.Duration) { m.mu.Lock(); m.margin = d; m.mu.Unlock() }

func (m *fakeMetrics) marginNow() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.margin
}

func (m *fakeMetrics) lateCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.late
}

func (m *fakeMetrics) Heartbeats(shard, event string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.heartbeats == nil {
		m.heartbeats = make(map[string]int)
	}
	m.heartbeats[shard+" "+event] += n
}

func (m *fakeMetrics) heartbeatCount(shard, event string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heartbeats[shard+" "+event]
}

func (m *fakeMetrics) StreamWatermark(w time.Time, _ time.Duration, holder, _ string) {
	m.mu.Lock()
	m.watermark, m.holder = w, holder
	m.mu.Unlock()
}
func (m *fakeMetrics) HorizonPublishFailed(string) { m.mu.Lock(); m.publishFailed++; m.mu.Unlock() }
func (m *fakeMetrics) ReadAheadPaused(string, time.Duration) {
	m.mu.Lock()
	m.paused++
	m.mu.Unlock()
}

func (m *fakeMetrics) Records(_ string, n int, _ int64) { m.mu.Lock(); m.records += n; m.mu.Unlock() }
func (m *fakeMetrics) DeadLettered(string)              { m.mu.Lock(); m.dead++; m.mu.Unlock() }
func (m *fakeMetrics) Checkpointed(_, seq string) {
	m.mu.Lock()
	m.checkpointed = append(m.checkpointed, seq)
	m.mu.Unlock()
}
func (m *fakeMetrics) Fenced(string)            { m.mu.Lock(); m.fenced++; m.mu.Unlock() }
func (m *fakeMetrics) TrimmedPast(string)       { m.mu.Lock(); m.trimmed++; m.mu.Unlock() }
func (m *fakeMetrics) LeaseStateRefused(string) {}
func (m *fakeMetrics) WaitingForParents(_ string, waiting bool) {
	m.waiting <- waiting
}

func (m *fakeMetrics) counts() (checkpointed []string, fenced, dead, trimmed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.checkpointed...), m.fenced, m.dead, m.trimmed
}

// procEnv is one consumer (worker "me") over an in-memory lease table.
type procEnv struct {
	t       *testing.T
	table   *checkpoint.MemLeaseTable
	leases  *checkpoint.MemLeases
	sink    *fakeSink
	dlq     *fakeDLQ
	stream  *fakeStream
	metrics *fakeMetrics
	c       *Consumer
	ctx     context.Context
	cancel  context.CancelFunc
	// waits are the read spacing's waits (Consumer.sleep), which return at once here.
	waitMu sync.Mutex
	waits  []time.Duration
}

func (e *procEnv) slept() []time.Duration {
	e.waitMu.Lock()
	defer e.waitMu.Unlock()
	return append([]time.Duration(nil), e.waits...)
}

func newProcEnv(t *testing.T) *procEnv {
	t.Helper()
	table := checkpoint.NewMemLeaseTable()
	e := &procEnv{t: t, table: table, leases: table.Worker(me, time.Hour), sink: newFakeSink(), dlq: &fakeDLQ{},
		stream:  &fakeStream{shards: map[string][]string{}},
		metrics: &fakeMetrics{waiting: make(chan bool, 64)}}
	e.ctx, e.cancel = context.WithCancel(t.Context())
	t.Cleanup(e.cancel)
	e.c = &Consumer{cfg: Config{Stream: "stream", WorkerID: me, ShutdownTimeout: time.Minute, Decoder: dms.DefaultConfig()},
		sink: e.sink, dlq: e.dlq, log: zap.NewNop(), metrics: e.metrics, leases: e.leases,
		kc: e.stream, shards: newShardMap(e.stream, "stream"), gen: make(map[string]*processor)}
	e.c.sleeper = func(_ context.Context, d time.Duration) {
		e.waitMu.Lock()
		e.waits = append(e.waits, d)
		e.waitMu.Unlock()
	}
	return e
}

// take makes worker take the shard's lease in the table (for "me": this consumer's store).
func (e *procEnv) take(store *checkpoint.MemLeases, shard, worker string) {
	e.t.Helper()
	if err := store.GetLease(&par.ShardStatus{ID: shard, Mux: &sync.RWMutex{}}, worker); err != nil {
		e.t.Fatalf("%s takes %s: %v", worker, shard, err)
	}
}

// start adds the shard (with parents) to the stream, takes its lease and starts a processor
// from the checkpoint from ("" for none), as the KCL would.
func (e *procEnv) start(shard, from string, parents ...string) *processor {
	e.t.Helper()
	e.stream.mu.Lock()
	e.stream.shards[shard] = parents
	e.stream.mu.Unlock()
	if e.leases.Epoch(shard) == 0 {
		e.take(e.leases, shard, me)
	}
	return e.initialize(shard, from)
}

// initialize starts one more processor of the shard (the KCL's factory, then Initialize).
func (e *procEnv) initialize(shard, from string) *processor {
	e.t.Helper()
	p := (&factory{c: e.c, ctx: e.ctx}).CreateProcessor().(*processor)
	in := &kcl.InitializationInput{ShardId: shard}
	if from != "" {
		in.ExtendedSequenceNumber = &kcl.ExtendedSequenceNumber{SequenceNumber: aws.String(from)}
	}
	p.Initialize(in)
	return p
}

// deliver hands the processor one delivery of good records with the given sequence numbers.
func deliver(p *processor, seqs ...string) {
	recs := make([]ktypes.Record, 0, len(seqs))
	for _, s := range seqs {
		recs = append(recs, ktypes.Record{SequenceNumber: aws.String(s), Data: goodRecord})
	}
	p.ProcessRecords(&kcl.ProcessRecordsInput{Records: recs})
}

func (e *procEnv) row(shard string) checkpoint.LeaseRow {
	e.t.Helper()
	r, err := e.leases.Get(e.t.Context(), shard)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// wantCheckpoint fails unless the shard's stored checkpoint is want.
func (e *procEnv) wantCheckpoint(shard, want, when string) {
	e.t.Helper()
	if got := e.row(shard).Checkpoint; got != want {
		e.t.Fatalf("%s: stored checkpoint %q, want %q", when, got, want)
	}
}

func (e *procEnv) fatal() error {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	return e.c.fatal
}

func seqs(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(from + i)
	}
	return out
}
