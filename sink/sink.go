package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/apache/iceberg-go/catalog"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/membudget"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// ErrClosed is returned by Submit and Flush after Close.
var ErrClosed = errors.New("sink: closed")

// Option configures optional collaborators.
type Option func(*Iceberg)

// WithLogger sets the logger (default: no logging).
func WithLogger(l *zap.Logger) Option { return func(s *Iceberg) { s.log = l.Named("sink") } }

// WithMetrics sets the metrics receiver (default: NopMetrics); maintenance has its own
// (WithMaintenanceMetrics).
func WithMetrics(m Metrics) Option { return func(s *Iceberg) { s.metrics = m } }

// WithCommitListener sets a function told of every successful table commit, after the commit
// and before its records are acknowledged (the post-commit hook). It runs on the table writer's
// goroutine and must not block. Default: none.
func WithCommitListener(f func(CommitInfo)) Option { return func(s *Iceberg) { s.onCommit = f } }

// WithCommitBound sets the commit bound provider of the ordering guard (sink.ordering arrival):
// bound returns the time up to which every change of the stream has been handed to the sinks of
// every worker (the consumer's CommitBound); a zero time means nothing may commit yet. A table
// writer commits only the changes that arrived at or before it, applies control records in
// arrival order with the data, and records the bound as dms2iceberg.complete-through. It is
// called on the writers' goroutines and must be safe for concurrent use and cheap. Default:
// none, and then the bound is unlimited: everything buffered may commit and control records
// apply as they are taken in (unit tests, dlq replay, the decode command); rows are still
// ordered by arrival and source position. WithCommitBounds adds the cross-process gates.
func WithCommitBound(bound func() time.Time) Option {
	return WithCommitBounds(func() Bound { return Bound{At: bound()} })
}

// Bound is the ordering guard's commit bound with the cross-process gates (the consumer's
// CommitBounds, design.md §4).
type Bound struct {
	// At is the commit bound (zero: nothing may commit).
	At time.Time
	// Gates are, per source table, the oldest record of each kind another process holds
	// uncommitted (checkpoint.PendingTables.For; nil: none; read-only): a load row waits for
	// its table's older control records (a create-table goes before the data it defines), a
	// CDC change also for its table's older loads (a load is older than any CDC change of its
	// key) and key changes (a key change deletes its old key, which a later change may bring
	// back), and a key change also for its table's older CDC changes (the old key's older
	// changes go first).
	Gates checkpoint.PendingTables
}

// WithCommitBounds is WithCommitBound with the cross-process gates: bound returns one
// consistent snapshot of the bound and the gates.
func WithCommitBounds(bound func() Bound) Option { return func(s *Iceberg) { s.bound = bound } }

// WithBoundsChanged lets a table writer whose buffer waits for the bound or the gates flush as
// soon as they move instead of at its next flush interval: changed returns a channel that is
// closed after the next computation (the consumer's BoundsChanged). Default: none.
func WithBoundsChanged(changed func() <-chan struct{}) Option {
	return func(s *Iceberg) { s.boundChanged = changed }
}

// WithMemoryBudget makes the sink relieve the process-wide byte budget the shard readers admit
// their records against (membudget): when a reader has to wait, the writers with the biggest
// buffers flush at once instead of at their flush interval or size, until what they hold covers
// what the reader misses. Default: none.
func WithMemoryBudget(b *membudget.Budget) Option { return func(s *Iceberg) { s.budget = b } }

// WithAllocator sets the Arrow allocator the writers build their batches' Arrow data with
// (default memory.DefaultAllocator); tests pass a checked one to find unreleased memory.
func WithAllocator(mem memory.Allocator) Option { return func(s *Iceberg) { s.mem = mem } }

// WithMaintenanceMetrics sets the receiver of maintenance measurements (default: none).
func WithMaintenanceMetrics(m maintenance.Metrics) Option { return func(s *Iceberg) { s.mmetrics = m } }

// Iceberg routes events to one writer per target table and runs those writers.
type Iceberg struct {
	cfg      Config
	cat      catalog.Catalog
	dlq      change.DeadLetterer
	log      *zap.Logger
	metrics  Metrics
	mmetrics maintenance.Metrics
	mem      memory.Allocator // WithAllocator; nil: memory.DefaultAllocator
	onCommit func(CommitInfo)
	bound    func() Bound
	// boundChanged is WithBoundsChanged (nil: none).
	boundChanged func() <-chan struct{}
	shards       shardSeen
	// budget is WithMemoryBudget (nil: none).
	budget *membudget.Budget
	// fileSlots bounds the writers writing files at once (fileWriters).
	fileSlots chan struct{}
	// maintSlots bounds the tables maintained at once (maintenance.Config.Concurrency).
	maintSlots *maintenance.Slots
	// keyCache keeps the key columns the tables' position conversions probe
	// (maintenance.Config.KeyCacheBytes), for every table.
	keyCache *maintenance.KeyCache

	mu      sync.Mutex
	writers map[string]*writer // by source "schema.table"
	// routes caches what Submit needs per source table: its name "schema.table" and whether the
	// configuration selects it, so that a record builds no string and matches no glob.
	routes  map[sourceKey]route
	defs    *tableDefs // create-table definitions seen, shared by the writers
	closed  bool
	stop    chan struct{}
	started chan struct{}
	// intake is held shared while a queue send is in progress and exclusively by Close, so no
	// send ever races with closing a queue.
	intake sync.RWMutex
	group  *errgroup.Group
	gctx   context.Context
	// tdl is the dead-letter table when the sink owns it (New with a nil DeadLetterer); wwg counts
	// running writers, which must finish before it closes.
	tdl *TableDeadLetters
	wwg sync.WaitGroup
}

// fileWriters is how many table writers write their data and delete files at once: two per
// CPU, so that file writing keeps every CPU busy while some writers wait for their catalog
// commit, and the memory of the flushes in progress (Arrow batches, Parquet pages, compressors)
// is bounded by that number instead of the number of tables.
func fileWriters() int { return 2 * runtime.GOMAXPROCS(0) }

// New returns a sink. Call Run before Submit.
func New(cfg Config, cat catalog.Catalog, dlq change.DeadLetterer, opts ...Option) (*Iceberg, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Maintenance.CommitTimeout = cfg.CommitTimeout // one deadline for every commit attempt
	s := &Iceberg{cfg: cfg, cat: cat, dlq: dlq, log: zap.NewNop(), metrics: NopMetrics{}, onCommit: func(CommitInfo) {},
		writers: make(map[string]*writer), routes: make(map[sourceKey]route), defs: newTableDefs(), started: make(chan struct{}),
		fileSlots: make(chan struct{}, fileWriters()), maintSlots: maintenance.NewSlots(cfg.Maintenance.Concurrency),
		keyCache: maintenance.NewKeyCache(cfg.Maintenance.KeyCacheBytes)}
	for _, o := range opts {
		o(s)
	}
	if s.metrics == nil {
		s.metrics = NopMetrics{}
	}
	if s.onCommit == nil {
		s.onCommit = func(CommitInfo) {}
	}
	if dlq == nil {
		if cfg.DeadLetters.Type != DeadLettersTable {
			return nil, fmt.Errorf("sink.dead_letters.type %s: pass the dead-letter file to sink.New", cfg.DeadLetters.Type)
		}
		s.tdl = NewTableDeadLetters(cat, cfg.DeadLetters, cfg.CommitRetries, s.log.Named("dead-letters"), s.metrics)
		s.tdl.attemptTimeout = cfg.CommitTimeout
		s.dlq = s.tdl
	}
	s.dlq = redacting(s.dlq, cfg)
	return s, nil
}

// DeadLetters returns where the sink puts dead letters: the DeadLetterer given to New, or the
// dead-letter table the sink runs (give it to the consumer too), wrapped so that every dead
// letter keeps the column rules (RedactDeadLetter). The table's DeadLetter waits
// for the commit, so a caller may acknowledge the record when it returns.
func (s *Iceberg) DeadLetters() change.DeadLetterer { return s.dlq }

// Run runs the table writers until Close has drained them (it then returns nil) or ctx is done
// (it then abandons the buffers: nothing unacknowledged was checkpointed, so nothing is lost).
// A writer that fails ends Run with its error.
func (s *Iceberg) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	stop := make(chan struct{})
	s.mu.Lock()
	s.group, s.gctx, s.stop = g, gctx, stop
	s.mu.Unlock()
	// The group keeps one member until Close or cancellation, so writers may join at any time.
	// After Close it waits for the writers and then closes the dead-letter table, which commits
	// what the writers' last flushes handed to it.
	g.Go(func() error {
		select {
		case <-gctx.Done():
		case <-stop:
			s.wwg.Wait()
			if s.tdl != nil {
				s.tdl.Close()
			}
		}
		return nil
	})
	if s.tdl != nil {
		// The dead-letter table is maintained like the others (its keyed upserts leave equality
		// deletes and a snapshot per commit), by a maintainer that commits on its own and stops
		// when the table's writer has finished.
		mctx, stopMaint := context.WithCancel(gctx)
		g.Go(func() error {
			defer stopMaint()
			return s.tdl.Run(gctx)
		})
		if s.cfg.Maintenance.Enabled {
			m := maintenance.New(s.cat, s.tdl.ident, s.tdl.name, s.cfg.Maintenance, s.tdl.log, s.mmetrics, 0)
			m.UseSlots(s.maintSlots)
			g.Go(func() error { return m.Run(mctx) })
		}
	}
	if s.budget != nil {
		s.budget.OnPressure(s.relieve)
	}
	close(s.started)
	return g.Wait()
}

// KeyColumns returns the key columns of source table schema.table as the sink's writers know
// them (its loaded table's, else its table-def's); empty for a loaded keyless table, nil when not
// known. The consumer uses it
// to tell, before it publishes a record as pending, whether an update changes its key; it takes
// no lock and allocates nothing.
func (s *Iceberg) KeyColumns(schema, table string) []string { return s.defs.keys.get(schema, table) }

// Submit hands an event to its table's writer, blocking while that writer's queue is full.
func (s *Iceberg) Submit(ctx context.Context, ev *change.Event) error {
	if ignored(ev) {
		if ev.Ack != nil {
			ev.Ack.Done(1)
		}
		return nil
	}
	rt := s.route(ev)
	if !rt.selected {
		s.metrics.Filtered(rt.src, 1)
		if ev.Ack != nil {
			ev.Ack.Done(1)
		}
		return nil
	}
	s.intake.RLock()
	defer s.intake.RUnlock()
	w, err := s.writer(ctx, rt.src)
	if err != nil {
		return err
	}
	// Most of the time the queue has room: a send alone is a fraction of the three-way select,
	// which locks both contexts' Done channels, shared by every submitting shard, on each call
	// (in BenchmarkPipeline's profile the select was 4 % of the process's CPU).
	select {
	case w.in <- item{ev: ev}:
		return nil
	default:
	}
	select {
	case w.in <- item{ev: ev}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.gctx.Done():
		return fmt.Errorf("submit to %s: %w", w.name, context.Cause(s.gctx))
	}
}

// sourceKey is a source table as a record names it.
type sourceKey struct{ schema, table string }

// route is what Submit knows of a source table: its name "schema.table" and whether the
// configuration selects it (Config.Selected).
type route struct {
	src      string
	selected bool
}

// route returns ev's source table's route, cached: the configuration does not change while the
// sink runs.
func (s *Iceberg) route(ev *change.Event) route {
	k := sourceKey{ev.Schema, ev.Table}
	s.mu.Lock()
	rt, ok := s.routes[k]
	s.mu.Unlock()
	if ok {
		return rt
	}
	src := ev.Schema + "." + ev.Table
	rt = route{src: src, selected: s.cfg.Selected(src)}
	// The key's strings may point into a decoded record's arena: keep copies, not the record.
	k = sourceKey{strings.Clone(ev.Schema), strings.Clone(ev.Table)}
	s.mu.Lock()
	s.routes[k] = rt
	s.mu.Unlock()
	return rt
}

// ignored reports events that belong to no table: DMS's own awsdms_* tables and task-level
// control records.
func ignored(ev *change.Event) bool {
	return ev.Table == "" || dmsOwnTable(ev.Table)
}

// dmsOwnTable reports whether table starts with "awsdms_" in any case, as
// strings.HasPrefix(strings.ToLower(table), "awsdms_") does, without lowering the whole name
// for every record: no other rune lowers to one of the prefix's.
func dmsOwnTable(table string) bool {
	const prefix = "awsdms_"
	if len(table) < len(prefix) {
		return false
	}
	for i := range len(prefix) {
		c := table[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

func (s *Iceberg) writer(ctx context.Context, src string) (*writer, error) {
	// Once Run has started (the usual case) the receive alone decides, without the lock a
	// two-way select takes on both channels for every event (1 % of the pipeline's CPU).
	select {
	case <-s.started:
	default:
		select {
		case <-s.started:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if w, ok := s.writers[src]; ok {
		return w, nil
	}
	w := s.newWriter(src)
	s.writers[src] = w
	s.wwg.Add(1)
	if !s.cfg.Maintenance.Enabled {
		s.group.Go(func() error {
			defer s.wwg.Done()
			return w.run(s.gctx)
		})
		return w, nil
	}
	// The table's maintainer runs beside its writer and stops when the writer has finished.
	mcfg := s.cfg.Maintenance
	mcfg.DeleteMode = w.set.deleteMode // the table's, else the sink's (settingsFor)
	m := maintenance.New(s.cat, w.ident, w.name, mcfg, w.log, s.mmetrics,
		maintenance.HandoffWait(s.cfg.FlushInterval))
	m.UseSlots(s.maintSlots)
	m.UseKeyCache(s.keyCache)
	w.useMaintainer(m)
	mctx, stopMaint := context.WithCancel(s.gctx)
	s.group.Go(func() error {
		defer s.wwg.Done()
		defer stopMaint()
		return w.run(s.gctx)
	})
	s.group.Go(func() error { return m.Run(mctx) })
	return w, nil
}

// newWriter builds the writer of source table src with the sink's collaborators.
func (s *Iceberg) newWriter(src string) *writer {
	set := s.cfg.settingsFor(src)
	env := writerEnv{cat: s.cat, dlq: s.dlq, metrics: s.metrics, onCommit: s.onCommit, defs: s.defs,
		stream: s.cfg.Stream, retries: s.cfg.CommitRetries, attemptTimeout: s.cfg.CommitTimeout, dropMark: s.cfg.DropTable == DropTableMark,
		bound: s.bound, boundChanged: s.boundChanged, shards: &s.shards, fileSlots: s.fileSlots, mem: s.mem}
	return newWriter(env, src, s.cfg.Target(src), set, s.cfg.QueueLength, s.log)
}

func (s *Iceberg) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Iceberg) snapshotWriters() []*writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*writer, 0, len(s.writers))
	for _, w := range s.writers {
		out = append(out, w)
	}
	return out
}

// TableStatuses returns the state of every table writer started so far, sorted by table.
func (s *Iceberg) TableStatuses() []TableStatus {
	ws := s.snapshotWriters()
	out := make([]TableStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status())
	}
	slices.SortFunc(out, func(a, b TableStatus) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// Flush commits everything every writer has received so far and waits for those commits; with
// the ordering guard, only what arrived at or before the commit bound (the rest stays buffered
// and unacknowledged).
func (s *Iceberg) Flush(ctx context.Context) error {
	select {
	case <-s.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.intake.RLock()
	defer s.intake.RUnlock()
	if s.isClosed() {
		return ErrClosed
	}
	ws := s.snapshotWriters()
	replies := make([]chan error, len(ws))
	for i, w := range ws {
		replies[i] = make(chan error, 1)
		select {
		case w.in <- item{flush: replies[i]}:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gctx.Done():
			return context.Cause(s.gctx)
		}
	}
	var errs []error
	for i, ch := range replies {
		select {
		case err := <-ch:
			if err != nil {
				errs = append(errs, fmt.Errorf("flush %s: %w", ws[i].name, err))
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gctx.Done():
			return context.Cause(s.gctx)
		}
	}
	return errors.Join(errs...)
}

// Close stops intake, lets every writer commit what it holds (with the ordering guard: what
// arrived at or before the commit bound; the rest is never acknowledged and is read again after
// a restart), and waits for Run's writers to finish or ctx to end.
func (s *Iceberg) Close(ctx context.Context) error {
	select {
	case <-s.started:
	default:
		return nil
	}
	s.intake.Lock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.intake.Unlock()
		return nil
	}
	s.closed = true
	for _, w := range s.writers {
		close(w.in)
	}
	stop := s.stop
	s.mu.Unlock()
	s.intake.Unlock()
	close(stop)
	select {
	case <-s.gctx.Done():
	case <-ctx.Done():
	}
	return nil
}

// relieve asks the writers with the biggest buffers to flush now, biggest first, until what
// they hold covers need bytes (at least one writer with something buffered). It never blocks:
// it is called on a shard reader's goroutine while the reader waits for the budget.
func (s *Iceberg) relieve(need int64) {
	ws := s.snapshotWriters()
	slices.SortFunc(ws, func(a, b *writer) int {
		_, ab := a.buffered()
		_, bb := b.buffered()
		return cmp.Compare(bb, ab)
	})
	var got int64
	for _, w := range ws {
		_, n := w.buffered()
		if n <= 0 || got >= need {
			break
		}
		w.nudgeFlush()
		got += n
	}
}
