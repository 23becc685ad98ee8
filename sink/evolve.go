package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Control records and the table's shape: opening and creating the table, schema changes from
// table-defs and from data, drop-table, and the primary key. Every change commits through
// commit.Run (flush.go's policy) and is adopted with use (state.go).

// throughProp adds to the properties of a control record's commit what the table is complete
// through: within a flush, the rows that arrived before the record were committed just before.
func (w *writer) throughProp(props iceberg.Properties) {
	if w.lim == nil {
		return
	}
	if v, ok := completeThroughProp(w.st.tbl.Properties(), w.lim.completeThrough()); ok {
		props[tableprop.CompleteThrough] = v
	}
}

// reloadedUse is the Op.Reloaded of a schema or property commit: adopt the table; done when
// holds says the reloaded table already has the change (nil: never).
func (w *writer) reloadedUse(holds func() bool) func(*table.Table) (bool, error) {
	return func(tbl *table.Table) (bool, error) {
		if err := w.use(tbl); err != nil {
			return false, err
		}
		return holds != nil && holds(), nil
	}
}

// open loads the target table, creating it (and its namespace) on first sight. A table that
// cannot be created as configured (a key column it would not have, a floating-point key, an
// invalid partition spec) pauses the writer instead of failing the service: its records are
// dead-lettered with the reason until a table-def or a restart with fixed configuration lets it
// be created.
//
// A failed catalog call (the load, the namespace or the table creation: a refused request, a
// reset connection, a create that the server carried out while its answer was lost) is tried
// again in process, like a failed commit, after the same waits and as often (commit_retries;
// while closing, until shutdown_timeout): a catalog blip must not stop the service. A create
// whose answer was lost finds its table on the next load.
func (w *writer) open(ctx context.Context, ev *change.Event) error {
	return w.retryCatalog(ctx, func() error { return w.openOnce(ctx, ev) })
}

// retryCatalog runs call until it returns no catalogCallError, at most commit_retries times
// more (until the context ends while closing), after the waits of a failed commit.
func (w *writer) retryCatalog(ctx context.Context, call func() error) error {
	for attempt := 0; ; attempt++ {
		err := call()
		var ce *catalogCallError
		if err == nil || !errors.As(err, &ce) || ctx.Err() != nil {
			return err
		}
		if attempt >= w.env.retries && !w.closing {
			return fmt.Errorf("%w (giving up after %d attempts)", err, attempt+1)
		}
		w.log.Warn("open table failed; trying again", zap.Int("attempt", attempt+1), zap.Error(err))
		if err := commit.Sleep(ctx, commit.RetryDelay(attempt, false, w.closing)); err != nil {
			return err
		}
	}
}

// catalogCallError is a failed catalog call of open: worth another attempt.
type catalogCallError struct{ err error }

func (e *catalogCallError) Error() string { return e.err.Error() }
func (e *catalogCallError) Unwrap() error { return e.err }

// catalogCall bounds one catalog call of open, load or create by sink.commit_timeout, as a commit
// attempt is bounded: neither iceberg-go's REST client nor the AWS SDK sets a request timeout,
// and a catalog that accepted the request and never answered held the writer for ever. The call
// past it fails like any other (a catalogCallError, tried again).
func (w *writer) catalogCall(ctx context.Context, call func(ctx context.Context) error) error {
	if w.env.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.env.attemptTimeout)
		defer cancel()
	}
	return call(ctx)
}

// loadTable loads the writer's table within sink.commit_timeout (catalogCall).
func (w *writer) loadTable(ctx context.Context) (tbl *table.Table, err error) {
	err = w.catalogCall(ctx, func(ctx context.Context) error {
		tbl, err = w.env.cat.LoadTable(ctx, w.ident)
		return err
	})
	return tbl, err
}

func (w *writer) openOnce(ctx context.Context, ev *change.Event) error {
	tbl, err := w.loadTable(ctx)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		var bad *schemaError
		tbl, err = w.create(ctx, ev)
		if errors.As(err, &bad) {
			w.pause(bad.Error())
			return nil
		}
	} else if err != nil {
		err = &catalogCallError{err}
	}
	if err != nil {
		return fmt.Errorf("open table %s: %w", w.name, err)
	}
	w.fsF = tbl.FS // a table from the catalog, for commit.Detach
	if err := w.use(tbl); err != nil {
		return err
	}
	return w.opened(ctx)
}

// load opens the table when it exists, never creating it; found reports whether it does. A
// failed load is tried again as in open.
func (w *writer) load(ctx context.Context) (found bool, err error) {
	err = w.retryCatalog(ctx, func() error {
		found, err = w.loadOnce(ctx)
		return err
	})
	return found, err
}

func (w *writer) loadOnce(ctx context.Context) (found bool, err error) {
	tbl, err := w.loadTable(ctx)
	switch {
	case errors.Is(err, catalog.ErrNoSuchTable):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("open table %s: %w", w.name, &catalogCallError{err})
	}
	if err := w.use(tbl); err != nil {
		return false, err
	}
	return true, w.opened(ctx)
}

// schemaError is a table that cannot be created as defined and configured.
type schemaError struct{ err error }

func (e *schemaError) Error() string { return e.err.Error() }

func (w *writer) create(ctx context.Context, ev *change.Event) (*table.Table, error) {
	cat := w.env.cat
	def := w.def
	if def == nil {
		def = w.env.defs.get(w.src)
	}
	schema, source, err := buildSchema(def, w.set, ev)
	if err != nil {
		return nil, &schemaError{fmt.Errorf("schema for %s: %w", w.src, err)}
	}
	props := maps.Clone(tableProperties)
	if v := w.set.tc.formatVersion(); v != 0 {
		props["format-version"] = strconv.Itoa(v)
	}
	var configured []change.ColumnDef
	for _, c := range w.set.tc.Columns {
		configured = append(configured, c.def())
	}
	maps.Copy(props, dictionaryProps(schema, uniqueText(def, configured)))
	props[tableprop.Source] = w.src
	if def != nil && w.defTS != "" {
		controlTSProp(props, nil, w.defTS)
	}
	for shard, seq := range w.truncWM {
		props[tableprop.Watermark(w.env.stream, shard)] = seq
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props)}
	spec, err := w.set.partitionSpec(schema)
	if err != nil {
		return nil, &schemaError{fmt.Errorf("table %s: %w", w.src, err)}
	}
	if spec != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec))
	}
	ns := w.ident[:len(w.ident)-1]
	if err := w.catalogCall(ctx, func(ctx context.Context) error { return cat.CreateNamespace(ctx, ns, nil) }); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, &catalogCallError{fmt.Errorf("create namespace %v: %w", ns, err)}
	}
	var tbl *table.Table
	err = w.catalogCall(ctx, func(ctx context.Context) (err error) {
		tbl, err = cat.CreateTable(ctx, w.ident, schema, opts...)
		return err
	})
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		// Another worker was first, or an earlier attempt whose answer was lost.
		tbl, err = w.loadTable(ctx)
		if err != nil {
			return nil, &catalogCallError{err}
		}
		return tbl, nil
	}
	if err != nil {
		return nil, &catalogCallError{err}
	}
	w.log.Info("created table", zap.String("schema_from", source), zap.Stringer("schema", tbl.Schema()))
	w.env.metrics.SchemaChanged(w.name, "create_table", 1)
	return tbl, nil
}

// opened runs after the table was loaded or created: it checks the table's owner (owner.go),
// picks up a dropped mark and applies a configured primary key to a table that has none.
func (w *writer) opened(ctx context.Context) error {
	if err := w.own(ctx); err != nil || w.refused != "" {
		return err
	}
	if w.st.published().Since.IsZero() {
		w.setStatus(tableprop.StatusActive, "")
	}
	if l := w.st.lay; l.keyed() {
		key := make([]string, len(l.keyIdx))
		for i, k := range l.keyIdx {
			key[i] = l.names[k]
		}
		if err := w.set.keyRule(key, "the table's identifier fields"); err != nil {
			w.pause(err.Error()) // its records are dead-lettered until the configuration is fixed
			return nil
		}
	}
	props := w.st.tbl.Properties()
	if props[tableprop.Status] == tableprop.StatusDropped && w.env.dropMark {
		w.setStatus(tableprop.StatusDropped, "marked dropped at "+props[tableprop.DroppedAt])
	}
	if len(w.set.tc.PrimaryKey) > 0 {
		_, err := w.ensureKey(ctx, w.set.tc.PrimaryKey, "sink.tables primary_key", nil)
		return err
	}
	return nil
}

// addColumns evolves the schema for columns that appear in data but not in the table: they are
// added as optional columns with a type inferred from the value. The rows that may commit are
// committed first, because they were built for the old schema (the others are re-laid).
func (w *writer) addColumns(ctx context.Context, ev *change.Event, cols []change.Column) error {
	if err := w.commitRows(ctx); err != nil {
		return err
	}
	added := 0
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		txn := w.st.tbl.NewTransaction()
		us := txn.UpdateSchema(true, false)
		names := map[string]bool{}
		for _, c := range cols {
			if _, ok := w.st.lay.byName[c.Name]; ok || names[c.Name] {
				continue
			}
			names[c.Name] = true
			us.AddColumn([]string{c.Name}, w.set.inferType(c), "", false, nil)
		}
		tbl, err := w.commitSchema(ctx, txn, us)
		if tbl != nil { // committed (adopting it may still fail)
			added = len(names)
		}
		return tbl, err
	}
	res, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
		Name: "add columns to " + w.name, Stage: stage,
		// Another worker may have added them. The check resolves into a slice of its own: take's
		// scratch (w.cols) is in use under this call.
		Reloaded: w.reloadedUse(func() bool { return len(w.unknownColumns(ev, w.st.lay.columnIndexes(ev.Columns, nil))) == 0 }),
	})
	if err != nil || res.Table == nil {
		return err
	}
	w.log.Info("added columns seen in data", zap.Int("columns", len(cols)), zap.Stringer("schema", res.Table.Schema()))
	w.env.metrics.SchemaChanged(w.name, "add_column", added)
	return nil
}

// applyControl applies a control record in order with the table's data. The rules:
//
//   - create-table, add-column, drop-column, rename-column, column-type-change and
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
//   - truncate (dms.IsTruncate): one snapshot removes every row older than it (truncate.go).
//   - rename-table: not applied, dead-lettered with the manual step (truncate.go).
//   - anything else: logged and acknowledged.
//
// Before a schema change the rows that may commit before the record are committed (they were
// built for the old schema; with the ordering guard, the rows that arrived before it), and
// the change commits with the control record's shard watermark, so a replayed control record
// is skipped like a replayed data record.
func (w *writer) applyControl(ctx context.Context, ev *change.Event) error {
	op := ev.Control.Op
	if !w.st.loaded() && w.st.status != tableprop.StatusPaused {
		// Load an existing table (never create it here) so that its watermarks apply.
		if _, err := w.load(ctx); err != nil {
			return err
		}
	}
	if w.refused != "" {
		return w.deadLetter(ctx, ev, ClassTargetTaken, w.refused)
	}
	if !ev.Replay && w.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		w.env.metrics.Skipped(w.name, 1)
		ack(ev)
		return nil
	}
	if dms.IsTruncate(op) {
		return w.truncate(ctx, ev) // ordered by position, not by the table-def's timestamp
	}
	if w.st.loaded() && staleControl(w.st.tbl.Properties(), ev.Meta.Timestamp) {
		w.log.Info("control record older than the last one applied: skipped", zap.String("operation", op),
			zap.String("timestamp", ev.Meta.Timestamp), zap.String("last", w.st.tbl.Properties()[tableprop.ControlTimestamp]))
		w.env.metrics.SchemaChanged(w.name, "stale_control", 1)
		ack(ev)
		return nil
	}
	switch op {
	case "create-table", "add-column", "drop-column", "rename-column", "column-type-change", "change-columns":
	case "drop-table":
		return w.drop(ctx, ev)
	case "rename-table":
		return w.renameTable(ctx, ev)
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
	restore := w.takeDef(def, ev.Meta.Timestamp)
	if !w.st.loaded() {
		// The table does not exist yet: create it from this table-def.
		if w.st.status == tableprop.StatusPaused {
			w.setStatus(tableprop.StatusActive, "") // the table-def may make the table creatable
		}
		if err := w.open(ctx, nil); err != nil {
			return err
		}
		ack(ev) // created from this table-def (or paused again: its records are dead-lettered)
		return nil
	}
	superseded, err := w.reconcile(ctx, ev, def, op)
	if superseded {
		restore() // a newer table-def was applied instead of this one: keep the writer's
	}
	return err
}

// reconcile brings the existing table in line with a table-def. When a table reloaded after a
// failed commit settles the record (controlSettled: applied, or a newer one was), it is
// acknowledged without applying more of it; superseded reports the second case (stale).
func (w *writer) reconcile(ctx context.Context, ev *change.Event, def *change.TableDef, op string) (superseded bool, err error) {
	desired := w.set.desired(def)
	clearDrop := op == "create-table" && w.st.status == tableprop.StatusDropped
	planFor := func() dms.SchemaPlan { return dms.PlanSchema(w.st.lay.sourceStates(), desired, op == "rename-column") }
	plan := planFor()
	// A newer create-table of a table with data starts a reload (reload.go): its commit
	// records the start with the record's watermark, even when the schema does not change.
	reload := w.reloadStarts(ev, op)
	nothing := func(p dms.SchemaPlan) bool { return p.Empty() && !clearDrop && len(p.Incompatible) == 0 && !reload }
	committed := false // the plan's commit advanced the record's watermark
	if !nothing(plan) {
		if err := w.commitRows(ctx); err != nil {
			return false, err
		}
		stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
			plan = planFor()
			reload = reload && w.reloadStarts(ev, op) // re-checked on a reloaded table
			if nothing(plan) {
				return nil, nil
			}
			tbl, err := w.commitPlan(ctx, ev, plan, clearDrop, reload)
			if err != nil {
				return nil, err
			}
			return tbl, w.adopt(tbl)
		}
		res, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
			Name: fmt.Sprintf("apply %s to %s", op, w.name), Stage: stage, Reloaded: w.reloadedControl(ev),
			Failed: func(attempt int, err, _ error) {
				w.log.Warn("schema change failed", zap.String("operation", op), zap.Int("attempt", attempt+1), zap.Error(err))
			},
		})
		if err != nil {
			return false, err
		}
		if res.Landed {
			return w.settledOnReload(ev), nil
		}
		if res.Table != nil {
			committed = true
			w.reportPlan(op, plan)
			if reload {
				w.reloadStarted(ev)
			}
		}
	}
	if clearDrop {
		w.setStatus(tableprop.StatusActive, "")
	}
	if op == "create-table" && !w.st.lay.keyed() && len(w.set.tc.PrimaryKey) == 0 && len(def.PrimaryKey) > 0 {
		// After a reload the key is re-checked like the plan, except that the record's
		// watermark is its own when the plan committed it.
		settledKey := func() bool {
			if committed {
				return staleControl(w.st.tbl.Properties(), ev.Meta.Timestamp)
			}
			return w.controlSettled(ev)
		}
		landed, err := w.ensureKey(ctx, def.PrimaryKey, "the create-table table-def", settledKey)
		if err != nil {
			return false, err
		}
		if landed && settledKey() {
			if !committed {
				return w.settledOnReload(ev), nil
			}
			w.log.Info("primary key of the create-table not applied: a newer control record was applied meanwhile")
		}
	}
	if len(plan.Incompatible) > 0 {
		var parts []string
		for _, c := range plan.Incompatible {
			parts = append(parts, fmt.Sprintf("%s %s→%s", c.Name, c.From, c.To))
		}
		return false, w.deadLetter(ctx, ev, ClassIncompatible, fmt.Sprintf("%s asks for type changes Iceberg cannot apply (%s): the table keeps its types; records whose values do not convert are dead-lettered",
			op, strings.Join(parts, ", ")))
	}
	ack(ev)
	return false, nil
}

// commitPlan commits the schema changes of plan together with the control record's watermark
// and status properties.
func (w *writer) commitPlan(ctx context.Context, ev *change.Event, plan dms.SchemaPlan, clearDrop, reload bool) (*table.Table, error) {
	txn := w.st.tbl.NewTransaction()
	if !plan.Empty() {
		if err := stageSchemaPlan(txn, plan); err != nil {
			return nil, err
		}
	}
	props := tableprop.Stamp(iceberg.Properties{}, w.st.tbl.Properties())
	w.controlWatermark(props, ev)
	if clearDrop {
		props[tableprop.Status] = tableprop.StatusActive
		props[tableprop.DroppedAt] = ""
	}
	controlTSProp(props, w.st.tbl.Properties(), ev.Meta.Timestamp)
	w.throughProp(props)
	if reload {
		w.markReload(props, ev)
		// An empty snapshot moves main: a writer that staged rows on main before the mark loses
		// its race, reloads and stages them on the reload branch instead.
		if err := txn.AddFiles(ctx, nil, iceberg.Properties{tableprop.SummaryReload: tableprop.SummaryReloadStart}, false); err != nil {
			return nil, fmt.Errorf("stage the start of %s's reload: %w", w.name, err)
		}
	}
	if len(plan.Incompatible) > 0 {
		c := plan.Incompatible[0]
		props[tableprop.IncompatibleChange] = fmt.Sprintf("%s: %s→%s not applied (%s, %s)", c.Name, c.From, c.To, ev.Control.Op, ev.Meta.Timestamp)
	}
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("stage properties: %w", err)
		}
	}
	return txn.Commit(ctx)
}

// stageSchemaPlan stages the schema update of a non-empty plan on txn.
func stageSchemaPlan(txn *table.Transaction, plan dms.SchemaPlan) error {
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
		return fmt.Errorf("stage schema update: %w", err)
	}
	return nil
}

func (w *writer) reportPlan(op string, plan dms.SchemaPlan) {
	for _, k := range []struct {
		kind string
		n    int
	}{
		{"rename_column", len(plan.Rename)}, {"add_column", len(plan.Add)}, {"widen_column", len(plan.Widen)},
		{"drop_column", len(plan.Drop)}, {"revive_column", len(plan.Revive)}, {"incompatible", len(plan.Incompatible)},
	} {
		if k.n > 0 {
			w.env.metrics.SchemaChanged(w.name, k.kind, k.n)
		}
	}
	if d := plan.Describe(); len(d) > 0 {
		w.log.Info("applied control record", zap.String("operation", op), zap.Strings("changes", d), zap.Stringer("schema", w.st.tbl.Schema()))
	}
}

// drop applies a drop-table control record.
func (w *writer) drop(ctx context.Context, ev *change.Event) error {
	if !w.env.dropMark {
		w.log.Info("table dropped at the source; keeping the target table (sink.drop_table ignore)")
		ack(ev)
		return nil
	}
	if w.st.status == tableprop.StatusDropped {
		ack(ev)
		return nil
	}
	at := ev.Meta.Timestamp
	if at == "" {
		at = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if !w.st.loaded() {
		tbl, err := w.env.cat.LoadTable(ctx, w.ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			w.setStatus(tableprop.StatusDropped, "dropped at the source at "+at+" before the target table existed")
			ack(ev)
			return nil
		}
		if err != nil {
			return fmt.Errorf("open table %s: %w", w.name, err)
		}
		if err := w.use(tbl); err != nil {
			return err
		}
		if err := w.own(ctx); err != nil {
			return err
		}
		if w.refused != "" {
			return w.deadLetter(ctx, ev, ClassTargetTaken, w.refused)
		}
	}
	if err := w.commitRows(ctx); err != nil {
		return err
	}
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		txn := w.st.tbl.NewTransaction()
		props := tableprop.Stamp(iceberg.Properties{tableprop.Status: tableprop.StatusDropped, tableprop.DroppedAt: at}, w.st.tbl.Properties())
		controlTSProp(props, w.st.tbl.Properties(), ev.Meta.Timestamp)
		w.controlWatermark(props, ev)
		w.throughProp(props)
		return w.commitProps(ctx, txn, props)
	}
	res, err := commit.Run(ctx, w.env.cat, w.ident, w.st.tbl, w.policy(), commit.Op{
		Name: "mark " + w.name + " dropped", Stage: stage, Reloaded: w.reloadedControl(ev),
	})
	if err != nil {
		return err
	}
	if res.Landed {
		// Applied (by this attempt or another worker: the writer takes the table's mark) or
		// superseded by a newer control record (a create-table that lifted it).
		w.settledOnReload(ev)
		return nil
	}
	w.setStatus(tableprop.StatusDropped, "dropped at the source at "+at)
	ack(ev)
	return nil
}
