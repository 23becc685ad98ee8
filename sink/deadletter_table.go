package sink

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// AsyncDeadLetterer is a change.DeadLetterer that can also take a dead letter without waiting:
// done is called (on another goroutine) once the dead letter is durable, with nil, or with the
// error that made storing it fail. Table writers use it so that a run of bad records does not
// cost one commit each; they wait for every pending dead letter before their next commit, so a
// table's watermark never passes a record whose dead letter is not durable.
type AsyncDeadLetterer interface {
	change.DeadLetterer
	DeadLetterAsync(ctx context.Context, dl change.DeadLetter, done func(error)) error
}

// Dead-letter classes (change.DeadLetter.Class), also the error_class column and a metric label.
const (
	ClassDecode       = "decode"              // the record is not valid DMS JSON (consumer)
	ClassConvert      = "convert"             // a value does not convert to its column type
	ClassKeyless      = "keyless_change"      // update or delete of a table without primary key
	ClassIncompatible = "incompatible_schema" // a control record asks for a change Iceberg cannot make
	ClassPaused       = "table_paused"        // the table cannot be written (see its status)
	ClassDropped      = "table_dropped"       // the table was dropped at the source (drop_table: mark)
	ClassTargetTaken  = "target_taken"        // another source owns the target table (dms2iceberg.source)
	ClassUnsupported  = "unsupported_control" // a control record the sink does not apply (rename-table, a replayed truncate)
)

func classOf(dl change.DeadLetter) string {
	switch {
	case dl.Class != "":
		return dl.Class
	case dl.Table == "":
		return ClassDecode
	}
	return ClassConvert
}

// Field ids of the dead-letter table. The identifier fields (stream, shard, sequence_number,
// source_table) make every write an upsert: a record dead-lettered again (a replay after a
// crash, a failed dlq replay) replaces its row instead of duplicating it.
const (
	dlStream = iota + 1
	dlShard
	dlSeq
	dlSource
	dlOp
	dlClass
	dlError
	dlPayload
	dlPayloadBytes
	dlAt
	dlReplayedAt
)

// DeadLetterSchema is the schema of the dead-letter table.
func DeadLetterSchema() *iceberg.Schema {
	str, ts := iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.TimestampTz
	return iceberg.NewSchemaWithIdentifiers(0, []int{dlStream, dlShard, dlSeq, dlSource},
		iceberg.NestedField{ID: dlStream, Name: "stream", Type: str, Required: true, Doc: "Kinesis stream"},
		iceberg.NestedField{ID: dlShard, Name: "shard", Type: str, Required: true, Doc: "Kinesis shard id"},
		iceberg.NestedField{ID: dlSeq, Name: "sequence_number", Type: str, Required: true, Doc: "Kinesis sequence number of the record"},
		iceberg.NestedField{ID: dlSource, Name: "source_table", Type: str, Required: true, Doc: "DMS schema.table; empty when the record did not decode"},
		iceberg.NestedField{ID: dlOp, Name: "operation", Type: str, Doc: "DMS operation when known"},
		iceberg.NestedField{ID: dlClass, Name: "error_class", Type: str, Required: true, Doc: "decode, convert, keyless_change, incompatible_schema, table_paused, table_dropped"},
		iceberg.NestedField{ID: dlError, Name: "error", Type: str, Required: true, Doc: "why the record was not applied"},
		iceberg.NestedField{ID: dlPayload, Name: "payload", Type: str, Doc: "the Kinesis record data when it is valid UTF-8"},
		iceberg.NestedField{ID: dlPayloadBytes, Name: "payload_bytes", Type: iceberg.PrimitiveTypes.Binary, Doc: "the Kinesis record data when it is not valid UTF-8"},
		iceberg.NestedField{ID: dlAt, Name: "dead_lettered_at", Type: ts, Required: true},
		iceberg.NestedField{ID: dlReplayedAt, Name: "replayed_at", Type: ts, Doc: "set by dms2iceberg dlq replay once the record was applied"},
	)
}

// StoredDeadLetter is one row of the dead-letter table.
type StoredDeadLetter struct {
	change.DeadLetter
	At         time.Time
	ReplayedAt time.Time // zero: not replayed
}

type dlItem struct {
	row  StoredDeadLetter
	done func(error)
}

// TableDeadLetters stores dead letters in an Iceberg table (created on first use). Concurrent
// dead letters are group-committed: while one commit runs, the next ones queue and go into the
// following commit, so a lone dead letter costs one commit's latency and a burst costs few
// commits. DeadLetter returns only after the commit holding its row succeeded. Run must be
// running; Close drains the queue and makes Run return.
type TableDeadLetters struct {
	cat     catalog.Catalog
	ident   table.Identifier
	name    string
	retries int
	// attemptTimeout bounds each commit attempt and each open of the table (sink.commit_timeout;
	// 0: none). A timed-out attempt that landed anyway is harmless: the rows are upserted by
	// their key, so the next attempt writes the same rows again.
	attemptTimeout time.Duration
	log            *zap.Logger
	metrics        Metrics

	intake sync.RWMutex
	closed bool
	in     chan dlItem
	exited chan struct{}
	tbl    *table.Table
	fsF    table.FSysF // of the table as opened, for commit.Detach
	count  atomic.Int64
}

// NewTableDeadLetters returns the dead-letter table writer of cfg (cfg.Type must be "table").
// commitRetries bounds the attempts of one commit. The logger and metrics may be nil.
func NewTableDeadLetters(cat catalog.Catalog, cfg DeadLetterConfig, commitRetries int, log *zap.Logger, metrics Metrics) *TableDeadLetters {
	if log == nil {
		log = zap.NewNop()
	}
	if metrics == nil {
		metrics = NopMetrics{}
	}
	q := cfg.QueueLength
	if q <= 0 {
		q = 10000
	}
	return &TableDeadLetters{cat: cat, ident: table.Identifier{cfg.Namespace, cfg.Table}, name: cfg.Namespace + "." + cfg.Table,
		retries: commitRetries, log: log.With(zap.String("table", cfg.Namespace+"."+cfg.Table)), metrics: metrics,
		in: make(chan dlItem, q), exited: make(chan struct{})}
}

// Ident returns the dead-letter table's identifier.
func (d *TableDeadLetters) Ident() table.Identifier { return d.ident }

// Count returns how many dead letters this process committed.
func (d *TableDeadLetters) Count() int64 { return d.count.Load() }

// DeadLetter implements change.DeadLetterer: it returns once the dead letter is committed.
func (d *TableDeadLetters) DeadLetter(ctx context.Context, dl change.DeadLetter) error {
	res := make(chan error, 1)
	if err := d.enqueue(ctx, StoredDeadLetter{DeadLetter: dl, At: time.Now()}, func(err error) { res <- err }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-d.exited:
		select {
		case err := <-res:
			return err
		default:
		}
		return fmt.Errorf("dead-letter table %s: writer stopped", d.name)
	}
}

// DeadLetterAsync implements AsyncDeadLetterer.
func (d *TableDeadLetters) DeadLetterAsync(ctx context.Context, dl change.DeadLetter, done func(error)) error {
	return d.enqueue(ctx, StoredDeadLetter{DeadLetter: dl, At: time.Now()}, done)
}

// MarkReplayed sets replayed_at on rows (read with ReadDeadLetters) and waits for the commit.
func (d *TableDeadLetters) MarkReplayed(ctx context.Context, rows []StoredDeadLetter, at time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, r := range rows {
		r.ReplayedAt = at
		wg.Add(1)
		if err := d.enqueue(ctx, r, func(err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			wg.Done()
		}); err != nil {
			wg.Done()
			return err
		}
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return ctx.Err()
	case <-d.exited:
		<-waited
	}
	return first
}

func (d *TableDeadLetters) enqueue(ctx context.Context, row StoredDeadLetter, done func(error)) error {
	d.intake.RLock()
	defer d.intake.RUnlock()
	if d.closed {
		return fmt.Errorf("dead-letter table %s: %w", d.name, ErrClosed)
	}
	select {
	case d.in <- dlItem{row: row, done: done}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.exited:
		return fmt.Errorf("dead-letter table %s: writer stopped", d.name)
	}
}

// Close stops intake; Run commits what is queued and returns.
func (d *TableDeadLetters) Close() {
	d.intake.Lock()
	defer d.intake.Unlock()
	if !d.closed {
		d.closed = true
		close(d.in)
	}
}

// Run commits queued dead letters until Close (then it drains the queue and returns nil) or ctx
// ends. A commit that still fails after the retries ends Run with its error: records must not be
// acknowledged without their dead letter, so the service stops.
func (d *TableDeadLetters) Run(ctx context.Context) error {
	defer close(d.exited)
	const maxBatch = 5000
	for {
		var first dlItem
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it, ok := <-d.in:
			if !ok {
				return nil
			}
			first = it
		}
		batch := []dlItem{first}
		closed := false
	drain:
		for len(batch) < maxBatch {
			select {
			case it, ok := <-d.in:
				if !ok {
					closed = true
					break drain
				}
				batch = append(batch, it)
			default:
				break drain
			}
		}
		err := d.commit(ctx, batch)
		for _, it := range batch {
			it.done(err)
		}
		if err != nil {
			return fmt.Errorf("dead-letter table %s: %w", d.name, err)
		}
		if closed {
			return nil
		}
	}
}

func (d *TableDeadLetters) open(ctx context.Context) error {
	if d.tbl != nil {
		return nil
	}
	tbl, err := d.cat.LoadTable(ctx, d.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		ns := d.ident[:len(d.ident)-1]
		if err := d.cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return fmt.Errorf("create namespace %v: %w", ns, err)
		}
		tbl, err = d.cat.CreateTable(ctx, d.ident, DeadLetterSchema(), catalog.WithProperties(tableProperties))
		if errors.Is(err, catalog.ErrTableAlreadyExists) {
			tbl, err = d.cat.LoadTable(ctx, d.ident)
		} else if err == nil {
			d.log.Info("created dead-letter table")
		}
	}
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if err := tableprop.CheckStateVersion(d.name, tbl.Properties()); err != nil {
		return commit.Permanent(err)
	}
	d.tbl, d.fsF = tbl, tbl.FS
	return nil
}

func (d *TableDeadLetters) commit(ctx context.Context, batch []dlItem) error {
	// One row per key, the last one winning.
	type key struct{ stream, shard, seq, src string }
	last := map[key]int{}
	var rows []StoredDeadLetter
	for _, it := range batch {
		r := it.row
		k := key{r.Stream, r.Shard, r.Seq, r.Table}
		if i, ok := last[k]; ok {
			rows[i] = r
			continue
		}
		last[k] = len(rows)
		rows = append(rows, r)
	}
	start := time.Now()
	// The table the first attempt is staged on is what a failure is compared with to recognise
	// a lost race; if opening fails here, the attempt opens it again and reports the error.
	octx, cancel := ctx, context.CancelFunc(func() {})
	if d.attemptTimeout > 0 {
		octx, cancel = context.WithTimeout(ctx, d.attemptTimeout)
	}
	_ = d.open(octx)
	cancel()
	_, err := commit.Run(ctx, d.cat, d.ident, d.tbl, commit.Policy{Retries: d.retries, AttemptTimeout: d.attemptTimeout}, commit.Op{
		Name: fmt.Sprintf("commit %d dead letters", len(rows)),
		Stage: func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
			if err := d.open(ctx); err != nil {
				return nil, err
			}
			return d.write(ctx, rows)
		},
		// A refresh that fails leaves the table to open again before the next attempt.
		Reload: func(ctx context.Context) (*table.Table, error) {
			d.tbl = nil
			if err := d.open(ctx); err != nil {
				return nil, err
			}
			return d.tbl, nil
		},
		Failed: func(attempt int, err, _ error) {
			d.log.Warn("dead-letter commit failed", zap.Int("attempt", attempt+1), zap.Error(err))
		},
	})
	if err != nil {
		return err
	}
	d.count.Add(int64(len(rows)))
	d.metrics.DeadLettersCommitted(len(rows), time.Since(start))
	d.log.Info("committed dead letters", zap.Int("rows", len(rows)), zap.Duration("took", time.Since(start)))
	return nil
}

func (d *TableDeadLetters) write(ctx context.Context, rows []StoredDeadLetter) (*table.Table, error) {
	schema := d.tbl.Schema()
	as, err := dms.ArrowSchema(schema)
	if err != nil {
		return nil, err
	}
	mem := memory.DefaultAllocator
	rb := array.NewRecordBuilder(mem, as)
	defer rb.Release()
	str, bin, tstz := iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.Binary, iceberg.PrimitiveTypes.TimestampTz
	for _, r := range rows {
		payload, payloadBytes := dms.Datum{Null: true}, dms.Datum{Null: true}
		if utf8.Valid(r.Raw) {
			payload = dms.Datum{S: string(r.Raw)}
		} else {
			payloadBytes = dms.Datum{S: string(r.Raw)}
		}
		op := dms.Datum{Null: r.Op == "", S: r.Op}
		replayed := dms.Datum{Null: r.ReplayedAt.IsZero(), I: r.ReplayedAt.UnixMicro()}
		vals := map[int]struct {
			t iceberg.Type
			d dms.Datum
		}{
			dlStream: {str, dms.Datum{S: r.Stream}}, dlShard: {str, dms.Datum{S: r.Shard}}, dlSeq: {str, dms.Datum{S: r.Seq}},
			dlSource: {str, dms.Datum{S: r.Table}}, dlOp: {str, op}, dlClass: {str, dms.Datum{S: classOf(r.DeadLetter)}},
			dlError: {str, dms.Datum{S: r.Reason}}, dlPayload: {str, payload}, dlPayloadBytes: {bin, payloadBytes},
			dlAt: {tstz, dms.Datum{I: r.At.UnixMicro()}}, dlReplayedAt: {tstz, replayed},
		}
		for i, f := range schema.Fields() {
			v, ok := vals[f.ID]
			if !ok {
				v.t, v.d = f.Type, dms.Datum{Null: true} // a column added by an operator
			}
			dms.AppendDatum(rb.Field(i), v.t, v.d)
		}
	}
	rec := rb.NewRecordBatch()
	var data []iceberg.DataFile
	for df, err := range table.WriteRecords(ctx, d.tbl, as, single(rec)) {
		if err != nil {
			rec.Release()
			return nil, fmt.Errorf("write data file: %w", err)
		}
		data = append(data, df)
	}
	rec.Release()

	keyIDs := []int{dlStream, dlShard, dlSeq, dlSource}
	var keyFields []arrow.Field
	var keyIdx []int
	for i, f := range schema.Fields() {
		for _, id := range keyIDs {
			if f.ID == id {
				keyFields = append(keyFields, as.Field(i))
				keyIdx = append(keyIdx, i)
			}
		}
	}
	kb := array.NewRecordBuilder(mem, arrow.NewSchema(keyFields, nil))
	defer kb.Release()
	for _, r := range rows {
		for ki, i := range keyIdx {
			var s string
			switch schema.Fields()[i].ID {
			case dlStream:
				s = r.Stream
			case dlShard:
				s = r.Shard
			case dlSeq:
				s = r.Seq
			case dlSource:
				s = r.Table
			}
			dms.AppendDatum(kb.Field(ki), str, dms.Datum{S: s})
		}
	}
	krec := kb.NewRecordBatch()
	txn := d.tbl.NewTransaction()
	deletes, err := txn.WriteEqualityDeletes(ctx, keyIDs, single(krec))
	krec.Release()
	if err != nil {
		return nil, fmt.Errorf("write equality deletes: %w", err)
	}
	if err := stamp(txn, d.tbl); err != nil {
		return nil, err
	}
	rd := txn.NewRowDelta(iceberg.Properties{tableprop.SummaryDeadLetters: fmt.Sprint(len(rows))})
	rd.AddRows(data...)
	rd.AddDeletes(deletes...)
	if err := rd.Commit(ctx); err != nil {
		return nil, fmt.Errorf("stage row delta: %w", err)
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return nil, err
	}
	d.tbl = commit.Detach(tbl, d.cat, d.fsF)
	return d.tbl, nil
}

// ReadDeadLetters reads every row of the dead-letter table ident (none when it does not exist),
// ordered by stream, shard and sequence number.
func ReadDeadLetters(ctx context.Context, cat catalog.Catalog, ident table.Identifier) ([]StoredDeadLetter, error) {
	tbl, err := cat.LoadTable(ctx, ident)
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load dead-letter table: %w", err)
	}
	if tbl.CurrentSnapshot() == nil {
		return nil, nil
	}
	_, recs, err := tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan dead-letter table: %w", err)
	}
	var out []StoredDeadLetter
	for rec, err := range recs {
		if err != nil {
			return nil, fmt.Errorf("scan dead-letter table: %w", err)
		}
		col := func(name string) arrow.Array {
			if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
				return rec.Column(idx[0])
			}
			return nil
		}
		stream, shard, seq, src := col("stream"), col("shard"), col("sequence_number"), col("source_table")
		op, class, reason, payload, payloadBytes := col("operation"), col("error_class"), col("error"), col("payload"), col("payload_bytes")
		at, replayed := col("dead_lettered_at"), col("replayed_at")
		for i := 0; i < int(rec.NumRows()); i++ {
			var r StoredDeadLetter
			r.Stream, r.Shard, r.Seq, r.Table = text(stream, i), text(shard, i), text(seq, i), text(src, i)
			r.Op, r.Class, r.Reason = text(op, i), text(class, i), text(reason, i)
			if p := text(payload, i); p != "" {
				r.Raw = []byte(p)
			} else {
				r.Raw = []byte(text(payloadBytes, i))
			}
			r.At, r.ReplayedAt = micros(at, i), micros(replayed, i)
			out = append(out, r)
		}
		rec.Release()
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		if a.Shard != b.Shard {
			return a.Shard < b.Shard
		}
		if c := change.CompareSeq(a.Seq, b.Seq); c != 0 {
			return c < 0
		}
		return a.Table < b.Table
	})
	return out, nil
}

func text(a arrow.Array, i int) string {
	if a == nil || a.IsNull(i) {
		return ""
	}
	switch v := a.(type) {
	case *array.String:
		return v.Value(i)
	case *array.LargeString:
		return v.Value(i)
	case *array.StringView:
		return v.Value(i)
	case *array.Binary:
		return string(v.Value(i))
	case *array.LargeBinary:
		return string(v.Value(i))
	case *array.BinaryView:
		return string(v.Value(i))
	}
	return fmt.Sprint(a.GetOneForMarshal(i))
}

func micros(a arrow.Array, i int) time.Time {
	if a == nil || a.IsNull(i) {
		return time.Time{}
	}
	if ts, ok := a.(*array.Timestamp); ok {
		v := int64(ts.Value(i))
		switch ts.DataType().(*arrow.TimestampType).Unit {
		case arrow.Second:
			return time.Unix(v, 0).UTC()
		case arrow.Millisecond:
			return time.UnixMilli(v).UTC()
		case arrow.Nanosecond:
			return time.Unix(0, v).UTC()
		}
		return time.UnixMicro(v).UTC()
	}
	return time.Time{}
}
