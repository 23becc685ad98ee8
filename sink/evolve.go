package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"errors"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// Table writer states (TableStatus.Status, and the dms2iceberg.status table property).
const (
	statusActive  = "active"
	statusPaused  = "paused"
	statusDropped = "dropped"
)

// Table properties this file maintains.
const (
	propStatus       = "dms2iceberg.status"
	propDroppedAt    = "dms2iceberg.dropped-at"
	propIncompatible = "dms2iceberg.incompatible-change"
	// propControlTS is the metadata.timestamp of the last control record applied to the table.
	propControlTS = "dms2iceberg.control-timestamp"
)

// staleControl reports whether a control record was built before the last one applied to the
// table. Control records travel on their own partition key, so an old create-table (sent at
// task start) can be read after newer ALTERs; since every table-def is the full definition,
// applying the older one would undo the newer changes.
func staleControl(props iceberg.Properties, ts string) bool {
	last := props[propControlTS]
	if ts == "" || last == "" {
		return false
	}
	a, err1 := time.Parse(time.RFC3339Nano, ts)
	b, err2 := time.Parse(time.RFC3339Nano, last)
	return err1 == nil && err2 == nil && a.Before(b)
}

// controlTSProp adds the control record's timestamp to props when it is newer than the table's.
func controlTSProp(props, cur iceberg.Properties, ts string) {
	if ts != "" && !staleControl(cur, ts) {
		if _, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			props[propControlTS] = ts
		}
	}
}

// StatusMetrics receives the schema, status and dead-letter measurements of the sink. It is
// separate from Metrics so that existing Metrics implementations keep compiling: a Metrics value
// passed to WithMetrics that also implements StatusMetrics receives these calls too. Same rules:
// safe for concurrent use, never blocking.
type StatusMetrics interface {
	// TableStatus reports a table writer's state: "active", "paused" (the table cannot be
	// written; reason says why, its records are dead-lettered) or "dropped" (drop-table with
	// sink.drop_table mark).
	TableStatus(table, status, reason string)
	// SchemaChanged counts applied schema changes of a table by kind: create_table, add_column,
	// rename_column, widen_column, drop_column (kept, no longer required), revive_column,
	// set_primary_key, incompatible (a change that was not applied).
	SchemaChanged(table, kind string, n int)
	// DeadLetterClass counts a table's dead letters by class (ClassConvert, ...), alongside
	// Metrics.DeadLettered.
	DeadLetterClass(table, class string)
	// Filtered counts records of source tables that are not replicated (include/exclude/enabled).
	Filtered(source string, n int)
	// DeadLettersCommitted is called after each commit of the dead-letter table.
	DeadLettersCommitted(rows int, took time.Duration)
}

type nopStatusMetrics struct{}

func (nopStatusMetrics) TableStatus(string, string, string)      {}
func (nopStatusMetrics) SchemaChanged(string, string, int)       {}
func (nopStatusMetrics) DeadLetterClass(string, string)          {}
func (nopStatusMetrics) Filtered(string, int)                    {}
func (nopStatusMetrics) DeadLettersCommitted(int, time.Duration) {}

func (s *Iceberg) status() StatusMetrics {
	if m, ok := s.metrics.(StatusMetrics); ok {
		return m
	}
	return nopStatusMetrics{}
}

// TableStatus is the state of one table writer, for status pages.
type TableStatus struct {
	// Source is the DMS "schema.table", Table the target "namespace.table".
	Source, Table string
	// Status is active, paused or dropped; Reason says why when not active; Since is when the
	// state was entered.
	Status, Reason string
	Since          time.Time
}

// TableStatuses returns the state of every table writer started so far, sorted by table.
func (s *Iceberg) TableStatuses() []TableStatus {
	ws := s.snapshotWriters()
	out := make([]TableStatus, 0, len(ws))
	for _, w := range ws {
		w.pubMu.Lock()
		out = append(out, w.pub)
		w.pubMu.Unlock()
	}
	slices.SortFunc(out, func(a, b TableStatus) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// setStatus changes the writer's state and publishes it.
func (w *writer) setStatus(status, reason string) {
	if w.status == status && w.reason == reason && !w.pub.Since.IsZero() {
		return
	}
	w.status, w.reason = status, reason
	w.pubMu.Lock()
	w.pub = TableStatus{Source: w.src, Table: w.name, Status: status, Reason: reason, Since: time.Now()}
	w.pubMu.Unlock()
	w.s.status().TableStatus(w.name, status, reason)
	if status == statusActive {
		w.log.Info("table active")
	} else {
		w.log.Warn("table not taking records; they are dead-lettered", zap.String("status", status), zap.String("reason", reason))
	}
}

func (w *writer) pause(reason string) { w.setStatus(statusPaused, reason) }

// dlWait counts a writer's pending asynchronous dead letters.
type dlWait struct {
	mu  *sync.Mutex
	n   *int
	err *error
	ch  chan struct{}
}

func newDLWait() dlWait {
	return dlWait{mu: new(sync.Mutex), n: new(int), err: new(error), ch: make(chan struct{}, 1)}
}

func (d dlWait) add() {
	d.mu.Lock()
	*d.n++
	d.mu.Unlock()
}

func (d dlWait) done(err error) {
	d.mu.Lock()
	*d.n--
	if err != nil && *d.err == nil {
		*d.err = err
	}
	d.mu.Unlock()
	select {
	case d.ch <- struct{}{}:
	default:
	}
}

func (d dlWait) pending() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return *d.n, *d.err
}

// awaitDeadLetters waits until every dead letter this writer handed over is durable, so that
// the next commit cannot move a watermark past a record whose dead letter might still be lost.
func (w *writer) awaitDeadLetters(ctx context.Context) error {
	for {
		n, err := w.dl.pending()
		if err != nil {
			return fmt.Errorf("dead letters of %s: %w", w.src, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-w.dl.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// opened runs after the table was loaded or created: it picks up a dropped mark and applies a
// configured primary key to a table that has none.
func (w *writer) opened(ctx context.Context) error {
	if w.pub.Since.IsZero() {
		w.setStatus(statusActive, "")
	}
	props := w.tbl.Properties()
	if props[propStatus] == statusDropped && w.s.cfg.DropTable == DropTableMark {
		w.setStatus(statusDropped, "marked dropped at "+props[propDroppedAt])
	}
	if len(w.tc.PrimaryKey) > 0 {
		return w.ensureKey(ctx, w.tc.PrimaryKey, "sink.tables primary_key")
	}
	return nil
}

// applyControl applies a control record in order with the table's data. The rules:
//
//   - create-table, rename-table, add-column, drop-column, rename-column, column-type-change and
//     change-columns with a table-def: create the table from it if it does not exist, else
//     reconcile the table with it (dms.PlanSchema: add optional columns, widen, rename on
//     rename-column, keep dropped columns and stop requiring them). A create-table also lifts a
//     dropped mark, and gives a keyless table the table-def's primary key (when none is
//     configured). Incompatible type changes are not applied: the control record is
//     dead-lettered (class incompatible_schema) and the table keeps going with its type, records
//     whose values do not convert being dead-lettered one by one.
//   - without a table-def: nothing to apply (columns are added when they appear in data).
//   - drop-table: sink.drop_table ignore logs it; mark commits dms2iceberg.status=dropped and the
//     writer dead-letters the table's records until a create-table.
//   - anything else: logged and acknowledged.
//
// Before a schema change the buffer is committed (its rows were built for the old schema), and
// the change commits with the control record's shard watermark, so a replayed control record
// is skipped like a replayed data record.
func (w *writer) applyControl(ctx context.Context, ev *change.Event) error {
	op := ev.Control.Op
	if w.lay == nil && w.status != statusPaused {
		// Load an existing table (never create it here) so that its watermarks apply.
		tbl, err := w.s.cat.LoadTable(ctx, w.ident)
		switch {
		case errors.Is(err, catalog.ErrNoSuchTable):
		case err != nil:
			return fmt.Errorf("open table %s: %w", w.name, err)
		default:
			if err := w.use(tbl); err != nil {
				return err
			}
			if err := w.opened(ctx); err != nil {
				return err
			}
		}
	}
	if w.lay != nil && !ev.Replay && checkpoint.Covered(w.lay.watermark[ev.Pos.Shard], ev.Pos.Seq) {
		w.s.metrics.Skipped(w.name, 1)
		ack(ev)
		return nil
	}
	if w.lay != nil && staleControl(w.tbl.Properties(), ev.Meta.Timestamp) {
		w.log.Info("control record older than the last one applied: skipped", zap.String("operation", op),
			zap.String("timestamp", ev.Meta.Timestamp), zap.String("last", w.tbl.Properties()[propControlTS]))
		w.s.status().SchemaChanged(w.name, "stale_control", 1)
		ack(ev)
		return nil
	}
	switch op {
	case "create-table", "rename-table", "add-column", "drop-column", "rename-column", "column-type-change", "change-columns":
	case "drop-table":
		return w.drop(ctx, ev)
	default:
		w.log.Info("control record not applied: unknown operation", zap.String("operation", op))
		ack(ev)
		return nil
	}
	def := ev.Control.TableDef
	if def == nil || len(def.Columns) == 0 {
		w.log.Info("control record without a table-def: nothing to apply", zap.String("operation", op))
		ack(ev)
		return nil
	}
	w.def, w.defTS = def, ev.Meta.Timestamp
	w.s.setDef(w.src, def)
	if w.lay == nil {
		// The table does not exist yet: create it from this table-def.
		if w.status == statusPaused {
			w.setStatus(statusActive, "") // the table-def may make the table creatable
		}
		if err := w.open(ctx, nil); err != nil {
			return err
		}
		ack(ev) // created from this table-def (or paused again: its records are dead-lettered)
		return nil
	}
	return w.reconcile(ctx, ev, def, op)
}

// reconcile brings the existing table in line with a table-def.
func (w *writer) reconcile(ctx context.Context, ev *change.Event, def *change.TableDef, op string) error {
	desired := w.set.desired(def)
	clearDrop := op == "create-table" && w.status == statusDropped
	flushed := false
	var plan dms.SchemaPlan
	for attempt := 0; ; attempt++ {
		plan = dms.PlanSchema(w.lay.columnStates(), desired, op == "rename-column")
		if plan.Empty() && !clearDrop && len(plan.Incompatible) == 0 {
			break
		}
		if !flushed {
			if err := w.flush(ctx); err != nil {
				return err
			}
			flushed = true
		}
		tbl, err := w.commitPlan(ctx, ev, plan, clearDrop)
		if err == nil {
			if err := w.use(tbl); err != nil {
				return err
			}
			w.reportPlan(op, plan)
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("apply %s to %s: %w", op, w.name, err)
		}
		w.log.Warn("schema change failed; reloading", zap.String("operation", op), zap.Int("attempt", attempt+1), zap.Error(err))
		moved, rerr := w.reload(ctx)
		if rerr != nil {
			return rerr
		}
		if err := w.retryWait(ctx, attempt, err, moved); err != nil {
			return err
		}
	}
	if clearDrop {
		w.setStatus(statusActive, "")
	}
	if op == "create-table" && !w.lay.keyed() && len(w.tc.PrimaryKey) == 0 && len(def.PrimaryKey) > 0 {
		if err := w.ensureKey(ctx, def.PrimaryKey, "the create-table table-def"); err != nil {
			return err
		}
	}
	if len(plan.Incompatible) > 0 {
		var parts []string
		for _, c := range plan.Incompatible {
			parts = append(parts, fmt.Sprintf("%s %s→%s", c.Name, c.From, c.To))
		}
		return w.deadLetter(ctx, ev, ClassIncompatible, fmt.Sprintf("%s asks for type changes Iceberg cannot apply (%s): the table keeps its types; records whose values do not convert are dead-lettered",
			op, strings.Join(parts, ", ")))
	}
	ack(ev)
	return nil
}

// commitPlan commits the schema changes of plan together with the control record's watermark
// and status properties.
func (w *writer) commitPlan(ctx context.Context, ev *change.Event, plan dms.SchemaPlan, clearDrop bool) (*table.Table, error) {
	txn := w.tbl.NewTransaction()
	if !plan.Empty() {
		us := txn.UpdateSchema(true, false)
		orig := map[string]string{}
		for _, r := range plan.Rename {
			us.RenameColumn([]string{r.From}, r.To)
			orig[r.To] = r.From
		}
		path := func(name string) []string {
			if o, ok := orig[name]; ok {
				return []string{o}
			}
			return []string{name}
		}
		for _, c := range plan.Widen {
			us.UpdateColumn(path(c.Name), table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: c.To}})
		}
		doc := droppedDoc + " (" + time.Now().UTC().Format(time.RFC3339) + ")"
		for _, n := range plan.Drop {
			u := table.ColumnUpdate{Doc: iceberg.Optional[string]{Valid: true, Val: doc}}
			if slices.Contains(plan.MakeOptional, n) {
				u.Required = iceberg.Optional[bool]{Valid: true, Val: false}
			}
			us.UpdateColumn([]string{n}, u)
		}
		for _, n := range plan.Revive {
			us.UpdateColumn(path(n), table.ColumnUpdate{Doc: iceberg.Optional[string]{Valid: true, Val: ""}})
		}
		for _, c := range plan.Add {
			us.AddColumn([]string{c.Name}, c.Type, "", false, nil)
		}
		if err := us.Commit(); err != nil {
			return nil, fmt.Errorf("stage schema update: %w", err)
		}
	}
	props := iceberg.Properties{}
	if !ev.Replay && change.CompareSeq(ev.Pos.Seq, w.lay.watermark[ev.Pos.Shard]) > 0 && ev.Pos.Shard != "" {
		props[checkpoint.WatermarkKey(w.s.cfg.Stream, ev.Pos.Shard)] = ev.Pos.Seq
	}
	if clearDrop {
		props[propStatus] = statusActive
		props[propDroppedAt] = ""
	}
	controlTSProp(props, w.tbl.Properties(), ev.Meta.Timestamp)
	if len(plan.Incompatible) > 0 {
		c := plan.Incompatible[0]
		props[propIncompatible] = fmt.Sprintf("%s: %s→%s not applied (%s, %s)", c.Name, c.From, c.To, ev.Control.Op, ev.Meta.Timestamp)
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("stage properties: %w", err)
		}
	}
	return txn.Commit(ctx)
}

func (w *writer) reportPlan(op string, plan dms.SchemaPlan) {
	sm := w.s.status()
	for _, k := range []struct {
		kind string
		n    int
	}{
		{"rename_column", len(plan.Rename)}, {"add_column", len(plan.Add)}, {"widen_column", len(plan.Widen)},
		{"drop_column", len(plan.Drop)}, {"revive_column", len(plan.Revive)}, {"incompatible", len(plan.Incompatible)},
	} {
		if k.n > 0 {
			sm.SchemaChanged(w.name, k.kind, k.n)
		}
	}
	if d := plan.Describe(); len(d) > 0 {
		w.log.Info("applied control record", zap.String("operation", op), zap.Strings("changes", d), zap.Stringer("schema", w.tbl.Schema()))
	}
}

// drop applies a drop-table control record.
func (w *writer) drop(ctx context.Context, ev *change.Event) error {
	if w.s.cfg.DropTable != DropTableMark {
		w.log.Info("table dropped at the source; keeping the target table (sink.drop_table ignore)")
		ack(ev)
		return nil
	}
	if w.status == statusDropped {
		ack(ev)
		return nil
	}
	at := ev.Meta.Timestamp
	if at == "" {
		at = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if w.lay == nil {
		tbl, err := w.s.cat.LoadTable(ctx, w.ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			w.setStatus(statusDropped, "dropped at the source at "+at+" before the target table existed")
			ack(ev)
			return nil
		}
		if err != nil {
			return fmt.Errorf("open table %s: %w", w.name, err)
		}
		if err := w.use(tbl); err != nil {
			return err
		}
	}
	if err := w.flush(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		txn := w.tbl.NewTransaction()
		props := iceberg.Properties{propStatus: statusDropped, propDroppedAt: at}
		controlTSProp(props, w.tbl.Properties(), ev.Meta.Timestamp)
		if !ev.Replay && change.CompareSeq(ev.Pos.Seq, w.lay.watermark[ev.Pos.Shard]) > 0 && ev.Pos.Shard != "" {
			props[checkpoint.WatermarkKey(w.s.cfg.Stream, ev.Pos.Shard)] = ev.Pos.Seq
		}
		err := txn.SetProperties(props)
		var tbl *table.Table
		if err == nil {
			tbl, err = txn.Commit(ctx)
		}
		if err == nil {
			if err := w.use(tbl); err != nil {
				return err
			}
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("mark %s dropped: %w", w.name, err)
		}
		moved, rerr := w.reload(ctx)
		if rerr != nil {
			return rerr
		}
		if err := w.retryWait(ctx, attempt, err, moved); err != nil {
			return err
		}
	}
	w.setStatus(statusDropped, "dropped at the source at "+at)
	ack(ev)
	return nil
}

// ensureKey gives a table without identifier fields the primary key keys (from configuration
// or a create-table table-def): its columns become required identifier fields, so updates and
// deletes apply from then on (earlier ones were dead-lettered and can be replayed). A table that
// already has a key keeps it; a key naming missing, dropped or floating-point columns is not
// applied (logged).
func (w *writer) ensureKey(ctx context.Context, keys []string, from string) error {
	l := w.lay
	if l.keyed() {
		have := make([]string, len(l.keyIdx))
		for i, k := range l.keyIdx {
			have[i] = l.names[k]
		}
		if !slices.Equal(have, keys) {
			w.log.Warn("primary key differs from the table's identifier fields; keeping the table's", zap.Strings("table", have), zap.Strings("from", keys), zap.String("source", from))
		}
		return nil
	}
	states := l.columnStates()
	for _, k := range keys {
		i, ok := l.byName[k]
		if !ok || states[i].Dropped {
			w.log.Warn("primary key not applied: the table has no such column", zap.String("column", k), zap.String("source", from))
			return nil
		}
		if err := keyType(l.schema.Fields()[i]); err != nil {
			w.log.Warn("primary key not applied", zap.Error(err), zap.String("source", from))
			return nil
		}
	}
	if err := w.flush(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		txn := w.tbl.NewTransaction()
		us := txn.UpdateSchema(true, true)
		paths := make([][]string, len(keys))
		for i, k := range keys {
			us.UpdateColumn([]string{k}, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true, Val: true}})
			paths[i] = []string{k}
		}
		us.SetIdentifierField(paths)
		err := us.Commit()
		var tbl *table.Table
		if err == nil {
			tbl, err = txn.Commit(ctx)
		}
		if err == nil {
			if err := w.use(tbl); err != nil {
				return err
			}
			w.log.Info("table now has a primary key", zap.Strings("key", keys), zap.String("source", from))
			w.s.status().SchemaChanged(w.name, "set_primary_key", 1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt >= w.s.cfg.CommitRetries {
			return fmt.Errorf("set primary key of %s: %w", w.name, err)
		}
		moved, rerr := w.reload(ctx)
		if rerr != nil {
			return rerr
		}
		if w.lay.keyed() {
			return nil
		}
		if err := w.retryWait(ctx, attempt, err, moved); err != nil {
			return err
		}
	}
}
