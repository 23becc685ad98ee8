package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

const genUsage = `usage: dms2iceberg gen --stream NAME --expected FILE [flags]

Writes a generated DMS workload (create-table control records, a full load, then CDC inserts,
updates, deletes and primary-key changes on the tables shop.customers, shop.order_items,
shop.events and shop.types) to a Kinesis stream, and the state the Iceberg tables must end in
to FILE. The stream is created if it does not exist. Endpoints come from the standard AWS
environment (AWS_ENDPOINT_URL_KINESIS, AWS_REGION, credentials).

flags:
`

// PutRecords limits.
const (
	maxBatchRecords = 500
	maxBatchBytes   = 5 << 20
	maxRecordBytes  = 1 << 20
)

type genOptions struct {
	stream       string
	shards       int
	changes      int
	loadRows     int
	seed         int64
	expected     string
	tablesConfig string
	rate         float64
	region       string
	timestampTZ  bool
	schema       bool
	bad          int
	partial      bool
	fullBefore   bool
	resends      int
	// sentLog is where gen writes one line per accepted record (see gensent.go); "": nowhere.
	sentLog string
	// applyThreads sends as DMS's ParallelApply threads do (genapply.go); 0: one request at a
	// time. applyBatch bounds the records of each of its requests.
	applyThreads, applyBatch int
	// DMS partitioning, a lagging shard and a mid-stream reload.
	layout        workload.Layout
	lagShard      int
	lag           time.Duration
	reloadTable   string
	reloadAt      int
	reloadDeletes int
	reloadUpdates int
}

func runGen(ctx context.Context, args []string) error {
	o, err := parseGenArgs(args)
	if err != nil {
		return err
	}
	gen := workload.New(o.workloadConfig())
	// The expected state is written first: it also proves that every generated value converts.
	exp, err := gen.Expected()
	if err != nil {
		return err
	}
	if err := writeExpected(o.expected, exp); err != nil {
		return err
	}
	if o.tablesConfig != "" {
		if err := writeTablesConfig(o.tablesConfig, o.timestampTZ); err != nil {
			return err
		}
	}

	client, err := kinesisClient(ctx, o.region)
	if err != nil {
		return err
	}
	if err := ensureStream(ctx, client, o.stream, int32(o.shards), os.Stderr); err != nil {
		return err
	}
	total := 5 + 4*o.loadRows + o.changes + o.bad
	if o.schema {
		total += 9 // the scenario's control records
	}
	if o.reloadTable != "" {
		total = countMessages(gen)
	}
	src, err := lagSource(ctx, client, o, gen.Messages(), os.Stderr)
	if err != nil {
		return err
	}
	s := &sender{api: client, stream: o.stream, rate: o.rate, out: os.Stderr, total: total}
	closeLog, err := s.openSentLog(o.sentLog)
	if err != nil {
		return err
	}
	if o.applyThreads > 0 {
		err = newApplySender(s, o.applyThreads, o.applyBatch).send(ctx, src)
	} else {
		err = s.send(ctx, src)
	}
	s.progress(true)
	s.summary()
	if cerr := closeLog(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", o.stream, err)
	}
	fmt.Fprintf(os.Stderr, "gen: expected state written to %s\n", o.expected)
	return nil
}

// parseGenArgs parses and checks gen's flags: a *helpRequest after -h, a *usageError for flags
// it does not accept.
func parseGenArgs(args []string) (genOptions, error) {
	var o genOptions
	fs := newFlags("gen", genUsage)
	fs.StringVar(&o.stream, "stream", "", "Kinesis stream name (required)")
	fs.IntVar(&o.shards, "shards", 4, "shard count used when the stream has to be created")
	fs.IntVar(&o.changes, "changes", 20000, "number of CDC records after the full load")
	fs.IntVar(&o.loadRows, "load-rows", 1000, "rows of each table's full load")
	fs.Int64Var(&o.seed, "seed", 1, "workload seed (equal seeds give identical records)")
	fs.StringVar(&o.expected, "expected", "", "write the expected final state (JSON) to this file (required)")
	fs.StringVar(&o.tablesConfig, "tables-config", "", "write a service config fragment (YAML, sink.tables) with the tables' keys and column types to this file")
	fs.Float64Var(&o.rate, "rate", 0, "records per second; 0 sends as fast as the stream accepts")
	fs.StringVar(&o.region, "region", "", "AWS region (default: $AWS_REGION, else us-east-1)")
	fs.BoolVar(&o.timestampTZ, "timestamptz", false, "render DATETIME columns as timestamptz in the expected state (must match sink.timestamptz)")
	fs.BoolVar(&o.schema, "schema-changes", false, "run the schema-change scenario: add, rename, widen and drop columns, create tables and drop one, mid-stream")
	fs.IntVar(&o.bad, "bad-records", 0, "inject this many records the service must dead-letter (listed in the expected state)")
	fs.StringVar(&o.sentLog, "sent-log", "", "write one line per accepted record to this file: table, shard id, sequence number, send time and answer time (Unix µs), tab-separated (for freshness measurements)")
	fs.BoolVar(&o.fullBefore, "full-before-images", false, "write every update's before-image with all columns of the old row, as MySQL with BeforeImageSettings ColumnFilter all does (default: pk-only)")
	fs.BoolVar(&o.partial, "partial-updates", false, "write updates with only the key and the changed columns, as Oracle without ALL COLUMNS supplemental logging does (the expected state needs sink.absent_columns: keep)")
	fs.IntVar(&o.resends, "resends", 0, "send this many inserts of the keyless table twice, as a DMS PutRecords retry or task restart does (only inserts with transaction details; the expected state keeps one row, which needs sink.keyless_identity auto)")
	fs.IntVar(&o.applyThreads, "apply-threads", 0, "send as DMS's ParallelApplyThreads do: this many PutRecords requests in flight, each of distinct partition keys, a key's record sent once its earlier ones (and, for a key change, the old key's) are stored, control records alone (0: one request at a time, in order; at most 32)")
	fs.IntVar(&o.applyBatch, "apply-batch", 50, "with --apply-threads: at most this many records per PutRecords request (1 to 500)")
	addGenDMSFlags(fs.FlagSet, &o)
	if err := fs.parse(args); err != nil {
		return o, err
	}
	switch {
	case o.stream == "":
		return o, usageErrorf("--stream is required")
	case o.expected == "":
		return o, usageErrorf("--expected is required")
	case o.shards < 1:
		return o, usageErrorf("--shards must be at least 1, got %d", o.shards)
	case o.changes < 0:
		return o, usageErrorf("--changes must not be negative, got %d", o.changes)
	case o.loadRows < 0:
		return o, usageErrorf("--load-rows must not be negative, got %d", o.loadRows)
	case o.rate < 0:
		return o, usageErrorf("--rate must not be negative, got %g", o.rate)
	case o.bad < 0 || (o.bad > 0 && o.bad >= o.changes):
		return o, usageErrorf("--bad-records must be between 0 and --changes, got %d", o.bad)
	case o.applyThreads < 0 || o.applyThreads > 32:
		return o, usageErrorf("--apply-threads must be between 0 and 32, got %d", o.applyThreads)
	case o.applyBatch < 1 || o.applyBatch > maxBatchRecords:
		return o, usageErrorf("--apply-batch must be between 1 and %d, got %d", maxBatchRecords, o.applyBatch)
	case o.resends < 0 || (o.resends > 0 && o.schema):
		return o, usageErrorf("--resends must not be negative nor combined with --schema-changes, got %d", o.resends)
	}
	if err := checkGenDMSFlags(&o); err != nil {
		return o, err
	}
	return o, nil
}

// workloadConfig is the generator configuration of the options.
func (o genOptions) workloadConfig() workload.Config {
	c := workload.Config{Seed: o.seed, Changes: o.changes, LoadRows: o.loadRows, TimestampTZ: o.timestampTZ,
		SchemaChanges: o.schema, BadRecords: o.bad, PartialUpdates: o.partial, FullBeforeImages: o.fullBefore, Layout: o.layout, Resends: o.resends}
	if o.reloadTable != "" {
		c.Reload = workload.Reload{Table: o.reloadTable, At: o.reloadAt, Deletes: o.reloadDeletes, Updates: o.reloadUpdates}
	}
	return c
}

func kinesisClient(ctx context.Context, region string) (*kinesis.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return kinesis.NewFromConfig(cfg), nil
}

// writeFileAtomic writes data to a temporary file next to path and renames it into place.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

func writeExpected(path string, exp workload.Expected) error {
	var b bytes.Buffer
	if err := exp.Encode(&b); err != nil {
		return fmt.Errorf("encode expected state: %w", err)
	}
	return writeFileAtomic(path, b.Bytes())
}

// tablesFragment is the part of the service configuration that gen writes: sink.tables (and
// sink.timestamptz when it is on), in the YAML shape loadConfig reads.
type tablesFragment struct {
	Sink struct {
		TimestampTZ bool                            `yaml:"timestamptz,omitempty"`
		Tables      map[string]workload.TableConfig `yaml:"tables"`
	} `yaml:"sink"`
}

func tablesConfigYAML(timestampTZ bool) ([]byte, error) {
	var f tablesFragment
	f.Sink.TimestampTZ = timestampTZ
	f.Sink.Tables = workload.TableConfigs()
	var b bytes.Buffer
	b.WriteString("# Written by 'dms2iceberg gen': keys and column types of the generated tables, equal to\n" +
		"# their DMS create-table records. Merge the sink section into the service configuration.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&f); err != nil {
		return nil, fmt.Errorf("encode tables config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode tables config: %w", err)
	}
	return b.Bytes(), nil
}

func writeTablesConfig(path string, timestampTZ bool) error {
	b, err := tablesConfigYAML(timestampTZ)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
}

// kinesisAPI is the part of the Kinesis client gen uses.
type kinesisAPI interface {
	putRecordsAPI
	kinesis.DescribeStreamAPIClient
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
}

type putRecordsAPI interface {
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// ensureStream creates the stream with shards shards unless it exists, and waits until it is
// ACTIVE.
func ensureStream(ctx context.Context, api kinesisAPI, name string, shards int32, out io.Writer) error {
	sum, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	var notFound *ktypes.ResourceNotFoundException
	switch {
	case err == nil:
		d := sum.StreamDescriptionSummary
		fmt.Fprintf(out, "gen: stream %s exists (%s, %d open shards)\n", name, d.StreamStatus, aws.ToInt32(d.OpenShardCount))
		if d.StreamStatus == ktypes.StreamStatusActive {
			return nil
		}
	case errors.As(err, &notFound):
		_, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
		var inUse *ktypes.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("create stream %s: %w", name, err)
		}
		fmt.Fprintf(out, "gen: created stream %s with %d shards\n", name, shards)
	default:
		return fmt.Errorf("describe stream %s: %w", name, err)
	}
	w := kinesis.NewStreamExistsWaiter(api, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 5*time.Minute); err != nil {
		return fmt.Errorf("wait for stream %s to become ACTIVE: %w", name, err)
	}
	return nil
}

// sender writes messages with PutRecords, one request at a time, in order.
//
// Records that fail inside a successful request are sent again at the head of the next request,
// in their original order, ahead of every record not yet sent; a record that succeeded is never
// sent again (a duplicate would be a duplicate row in a keyless table). If a record failed while
// a later record with the same partition key succeeded in the same request, re-sending it would
// put it behind its successor on the shard, so the sender stops with an error instead.
type sender struct {
	api    putRecordsAPI
	stream string
	// rate limits records per second taken from the source (0: unlimited).
	rate float64
	out  io.Writer
	// total is the number of records expected, for progress lines (0: unknown).
	total int
	// sleep waits for d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// now returns the current time; tests replace it.
	now func() time.Time
	// maxStalls bounds consecutive requests in which nothing succeeded. Default 40.
	maxStalls int
	// sentLog receives a line per accepted record when set (openSentLog).
	sentLog *bufio.Writer

	start    time.Time
	taken    int // records pulled from the source
	sent     int // records accepted by Kinesis
	requests int
	retried  int // records sent again after a failure
	counts   map[string]map[string]int
	lastLog  time.Time
}

func recordSize(m workload.Message) int { return len(m.Data) + len(m.PartitionKey) }

// init sets the defaults and starts the clock of a send.
func (s *sender) init() {
	if s.sleep == nil {
		s.sleep = commit.Sleep
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxStalls == 0 {
		s.maxStalls = 40
	}
	s.counts = map[string]map[string]int{}
	s.start = s.now()
	s.lastLog = s.start
}

// send writes every message of src to the stream.
func (s *sender) send(ctx context.Context, src iter.Seq[workload.Message]) error {
	s.init()
	next, stop := iter.Pull(src)
	defer stop()

	var pending []workload.Message // failed records, in order, to go first
	var peeked *workload.Message   // taken from the source but not fitting the last batch
	exhausted := false
	stalls := 0
	backoff := 100 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Assemble a batch: failed records first, then new ones within the rate budget.
		batch := make([]workload.Message, 0, maxBatchRecords)
		size := 0
		for len(pending) > 0 && len(batch) < maxBatchRecords && size+recordSize(pending[0]) <= maxBatchBytes {
			size += recordSize(pending[0])
			batch = append(batch, pending[0])
			pending = pending[1:]
		}
		budget := maxBatchRecords
		if s.rate > 0 && len(pending) == 0 {
			budget = s.rateBudget()
			if budget == 0 && len(batch) == 0 && (peeked != nil || !exhausted) {
				wait := time.Duration(float64(time.Second) / s.rate)
				if err := s.sleep(ctx, min(wait, time.Second)); err != nil {
					return err
				}
				continue
			}
		}
		for added := 0; len(pending) == 0 && len(batch) < maxBatchRecords && added < budget; added++ {
			var m workload.Message
			if peeked != nil {
				m, peeked = *peeked, nil
			} else {
				if exhausted {
					break
				}
				var ok bool
				if m, ok = next(); !ok {
					exhausted = true
					break
				}
				s.taken++
				if recordSize(m) > maxRecordBytes {
					return fmt.Errorf("record for %s is %d bytes, above the Kinesis limit of %d", m.Table, recordSize(m), maxRecordBytes)
				}
			}
			if size+recordSize(m) > maxBatchBytes {
				peeked = &m
				break
			}
			size += recordSize(m)
			batch = append(batch, m)
		}
		if len(batch) == 0 {
			if exhausted && peeked == nil && len(pending) == 0 {
				return nil
			}
			continue
		}

		failed, err := s.put(ctx, batch)
		if err != nil {
			return err
		}
		s.progress(false)
		if len(failed) == 0 {
			stalls, backoff = 0, 100*time.Millisecond
			continue
		}
		if len(failed) == len(batch) {
			if stalls++; stalls >= s.maxStalls {
				return fmt.Errorf("no record accepted in %d consecutive PutRecords requests; giving up with %d records sent", stalls, s.sent)
			}
		} else {
			stalls = 0
		}
		s.retried += len(failed)
		pending = append(failed, pending...)
		if err := s.sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// rateBudget returns how many new records may be taken now to stay at s.rate on average.
func (s *sender) rateBudget() int {
	allowed := int(s.rate*s.now().Sub(s.start).Seconds()) + 1 - s.taken
	if allowed < 0 {
		return 0
	}
	// Smooth the flow: at most a tenth of a second's worth (at least one record) per request,
	// unless the sender is further behind than that (slow PutRecords answers): then it catches
	// up with everything owed, which the caller bounds by a request's size. Requests are sent
	// one at a time, so without catching up a slow endpoint would cap the rate at
	// rate/10 records per answer (CI saw 38 records/s of 250 at 550 ms per answer).
	smooth := max(1, int(s.rate/10))
	if allowed > 2*smooth {
		return allowed
	}
	return min(allowed, smooth)
}

// put sends one PutRecords request and returns the records that must be sent again. Whole-request
// failures are retried (all records returned) only when the request certainly wrote nothing;
// otherwise it is unknown which records were written and the error is returned.
func (s *sender) put(ctx context.Context, batch []workload.Message) ([]workload.Message, error) {
	s.requests++
	sentAt := s.now()
	out, err := s.request(ctx, batch)
	answeredAt := s.now()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if nothingWritten(err) {
			return batch, nil
		}
		return nil, fmt.Errorf("PutRecords of %d records failed and it is unknown which were written (re-sending could duplicate them): %w", len(batch), err)
	}
	if len(out.Records) != len(batch) {
		return nil, fmt.Errorf("PutRecords answered %d results for %d records", len(out.Records), len(batch))
	}
	// A failed record must not be re-sent behind a later record with the same key that
	// succeeded.
	lastOK := map[string]int{}
	for i, r := range out.Records {
		if r.ErrorCode == nil {
			lastOK[batch[i].PartitionKey] = i
		}
	}
	var failed []workload.Message
	for i, r := range out.Records {
		m := batch[i]
		if r.ErrorCode != nil {
			if j, ok := lastOK[m.PartitionKey]; ok && j > i {
				return nil, fmt.Errorf("record %d of a PutRecords request (partition key %s) failed with %s (%s) while record %d with the same partition key succeeded; "+
					"re-sending it would place it after its successor on the shard and break per-key order, so generation stops",
					i, m.PartitionKey, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage), j)
			}
			failed = append(failed, m)
			continue
		}
		s.accept(m, r, sentAt, answeredAt)
	}
	return failed, nil
}

// request sends one PutRecords request of batch. The SDK's own retries are off: a retried
// request whose first attempt was in fact written would duplicate records. Safe for concurrent
// use (it reads only api and stream).
func (s *sender) request(ctx context.Context, batch []workload.Message) (*kinesis.PutRecordsOutput, error) {
	entries := make([]ktypes.PutRecordsRequestEntry, len(batch))
	for i, m := range batch {
		entries[i] = ktypes.PutRecordsRequestEntry{Data: m.Data, PartitionKey: aws.String(m.PartitionKey)}
	}
	return s.api.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(s.stream), Records: entries},
		func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} })
}

// accept counts a record Kinesis stored (answer r, at answeredAt, to a request sent at sentAt).
func (s *sender) accept(m workload.Message, r ktypes.PutRecordsResultEntry, sentAt, answeredAt time.Time) {
	s.sent++
	s.logSent(m.Table, r, sentAt, answeredAt)
	op := m.Op
	if m.KeyChange {
		op = "pk-change"
	}
	if s.counts[m.Table] == nil {
		s.counts[m.Table] = map[string]int{}
	}
	s.counts[m.Table][op]++
}

// nothingWritten reports whether a failed PutRecords request certainly wrote no record: the
// service rejected it as a whole (throttling, limits, validation), or it was never sent.
func nothingWritten(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException",
			"KMSThrottlingException", "RequestLimitExceeded", "SlowDown":
			return true
		}
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}

func (s *sender) progress(force bool) {
	now := s.now()
	if !force && now.Sub(s.lastLog) < 2*time.Second {
		return
	}
	s.lastLog = now
	el := now.Sub(s.start).Seconds()
	of := ""
	if s.total > 0 {
		of = fmt.Sprintf("/%d", s.total)
	}
	fmt.Fprintf(s.out, "gen: %d%s records sent, %.0f records/s, %d requests, %d records re-sent\n",
		s.sent, of, float64(s.sent)/max(el, 1e-9), s.requests, s.retried)
}

func (s *sender) summary() {
	if s.counts == nil {
		return
	}
	el := s.now().Sub(s.start)
	fmt.Fprintf(s.out, "gen: stream %s: %d records in %s (%.0f records/s), %d PutRecords requests, %d records re-sent after a failure\n",
		s.stream, s.sent, el.Round(time.Millisecond), float64(s.sent)/max(el.Seconds(), 1e-9), s.requests, s.retried)
	tables := make([]string, 0, len(s.counts))
	for t := range s.counts {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	order := []string{"create-table", "load", "insert", "update", "pk-change", "delete"}
	for _, t := range tables {
		var b strings.Builder
		n := 0
		for _, op := range order {
			if c := s.counts[t][op]; c > 0 {
				fmt.Fprintf(&b, " %s=%d", op, c)
				n += c
			}
		}
		name := t
		if strings.HasPrefix(t, ".") {
			name = t[1:] + " (DMS control table)"
		}
		fmt.Fprintf(s.out, "  %-45s total=%d%s\n", name, n, b.String())
	}
}
