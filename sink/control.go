package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The guards of control records (design.md §7): a record is applied once, in order, and never
// over a newer one. Its commit carries its shard watermark and its timestamp
// (tableprop.ControlTimestamp); applyControl skips a record the table's watermark covers or
// that is older than the last one applied, and every commit of a control record checks both
// again on each table refreshed after a failed attempt.

// controlApplier applies a table writer's control records in order with its data
// (applyControl): schema changes from table-defs (reconcile), drop-table, truncate and
// rename-table, with the guards above, on every table refreshed after a failed attempt too.
// Opening and creating the table is the schema applier's; the state it changes is the
// targetTable's, so it holds nothing of its own but its collaborators.
type controlApplier struct {
	*tableScope
	st *targetTable
	pl *planner       // the limit of the flush in progress (throughProp)
	cm *committer     // commits the rows before a control record, and its policy
	sa *schemaApplier // loads or creates the table a control record applies to
	rt *reloadTracker // a create-table that starts a reload
	dq *deadLetters
}

// staleControl reports whether a control record was built before the last one applied to the
// table. Control records travel on their own partition key, so an old create-table (sent at
// task start) can be read after newer ALTERs; since every table-def is the full definition,
// applying the older one would undo the newer changes.
func staleControl(props iceberg.Properties, ts string) bool {
	last := props[tableprop.ControlTimestamp]
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
			props[tableprop.ControlTimestamp] = ts
		}
	}
}

// controlWatermark adds the watermark of a control record's shard to props when the record
// advances it (a replayed control record is then skipped like a replayed data record).
func (ca *controlApplier) controlWatermark(props iceberg.Properties, ev *change.Event) {
	if !ev.Replay && change.CompareSeq(ev.Pos.Seq, ca.st.lay.watermark[ev.Pos.Shard]) > 0 && ev.Pos.Shard != "" {
		props[tableprop.Watermark(ca.env.stream, ev.Pos.Shard)] = ev.Pos.Seq
	}
}

// controlSettled reports whether the control record ev no longer needs applying to the table
// as last loaded: the table's watermark of its shard covers it (the record, or a newer one of
// its shard, was applied; a replay from the dead-letter table is exempt as everywhere) or a
// newer control record was applied (staleControl; never for a truncate, ordered by position
// only). applyControl checks it before the first attempt; every commit of a control record
// checks it again on each table refreshed after a failed attempt (refreshedControl), since a
// zombie (a worker whose lease moved) may hold a record that the shard's new owner applied,
// followed by newer ones, while the zombie staged on its old view: re-planned against the newer
// schema, the old table-def would mark the newer columns dropped at the source.
func (ca *controlApplier) controlSettled(ev *change.Event) bool {
	if !ev.Replay && ca.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		return true
	}
	return !dms.IsTruncate(ev.Control.Op) && staleControl(ca.st.tbl.Properties(), ev.Meta.Timestamp)
}

// refreshedControl is the Op.Reloaded of a control record's commit: adopt the table; done when
// the record is settled on it (controlSettled). A commit whose outcome was unknown and that did
// land is settled too (its own watermark covers the record).
func (ca *controlApplier) refreshedControl(ev *change.Event) func(*table.Table) (bool, error) {
	return ca.st.refreshedUse(func() bool { return ca.controlSettled(ev) })
}

// settledOnRefresh handles a control record found settled on a refreshed table: nothing more of
// it is applied, as when applyControl finds it covered or stale before the first attempt, and
// the writer's dropped state follows the table's (another worker may have set or lifted the
// mark). stale reports that the record was superseded rather than applied.
func (ca *controlApplier) settledOnRefresh(ev *change.Event) (stale bool) {
	props := ca.st.tbl.Properties()
	ca.log.Info("control record already applied or superseded on the reloaded table: skipped", zap.String("operation", ev.Control.Op),
		zap.String("shard", ev.Pos.Shard), zap.String("seq", ev.Pos.Seq), zap.String("timestamp", ev.Meta.Timestamp),
		zap.String("last", props[tableprop.ControlTimestamp]))
	if !ev.Replay && ca.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		ca.env.metrics.Skipped(ca.name, 1)
	} else {
		stale = true
		ca.env.metrics.SchemaChanged(ca.name, "stale_control", 1)
	}
	switch dropped := props[tableprop.Status] == tableprop.StatusDropped; {
	case dropped && ca.env.dropMark && ca.st.status == tableprop.StatusActive:
		ca.st.setStatus(tableprop.StatusDropped, "marked dropped at "+props[tableprop.DroppedAt])
	case !dropped && ca.st.status == tableprop.StatusDropped:
		ca.st.setStatus(tableprop.StatusActive, "")
	}
	ack(ev)
	return stale
}

// takeDef makes def (of a control record at ts) the writer's table-def; restore puts back the
// one before it.
func (ca *controlApplier) takeDef(def *change.TableDef, ts string) (restore func()) {
	prev, prevTS, shared := ca.st.def, ca.st.defTS, ca.env.defs.get(ca.src)
	set := func(def, shared *change.TableDef, ts string) {
		ca.st.def, ca.st.defTS = def, ts
		ca.env.defs.set(ca.src, shared)
		if ca.st.lay != nil {
			d := def
			if d == nil {
				d = shared
			}
			ca.st.lay.setDomains(d)
		}
	}
	set(def, def, ts)
	return func() { set(prev, shared, prevTS) }
}

// throughProp adds to the properties of a control record's commit what the table is complete
// through: within a flush, the rows that arrived before the record were committed just before.
func (ca *controlApplier) throughProp(props iceberg.Properties) {
	if ca.pl.lim == nil {
		return
	}
	if v, ok := completeThroughProp(ca.st.tbl.Properties(), ca.pl.lim.completeThrough()); ok {
		props[tableprop.CompleteThrough] = v
	}
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
func (ca *controlApplier) applyControl(ctx context.Context, ev *change.Event) error {
	op := ev.Control.Op
	if !ca.st.loaded() && ca.st.status != tableprop.StatusPaused {
		// Load an existing table (never create it here) so that its watermarks apply.
		if _, err := ca.sa.load(ctx); err != nil {
			return err
		}
	}
	if ca.st.refused != "" {
		return ca.dq.deadLetter(ctx, ev, ClassTargetTaken, ca.st.refused)
	}
	if !ev.Replay && ca.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		ca.env.metrics.Skipped(ca.name, 1)
		ack(ev)
		return nil
	}
	if dms.IsTruncate(op) {
		return ca.truncate(ctx, ev) // ordered by position, not by the table-def's timestamp
	}
	if ca.st.loaded() && staleControl(ca.st.tbl.Properties(), ev.Meta.Timestamp) {
		ca.log.Info("control record older than the last one applied: skipped", zap.String("operation", op),
			zap.String("timestamp", ev.Meta.Timestamp), zap.String("last", ca.st.tbl.Properties()[tableprop.ControlTimestamp]))
		ca.env.metrics.SchemaChanged(ca.name, "stale_control", 1)
		ack(ev)
		return nil
	}
	switch op {
	case "create-table", "add-column", "drop-column", "rename-column", "column-type-change", "change-columns":
	case "drop-table":
		return ca.drop(ctx, ev)
	case "rename-table":
		return ca.renameTable(ctx, ev)
	default:
		ca.log.Info("control record not applied: unknown operation", zap.String("operation", op))
		ack(ev)
		return nil
	}
	def := ev.Control.TableDef
	if def == nil || len(def.Columns) == 0 {
		ca.log.Info("control record without a table-def: nothing to apply", zap.String("operation", op))
		ack(ev)
		return nil
	}
	restore := ca.takeDef(def, ev.Meta.Timestamp)
	if !ca.st.loaded() {
		// The table does not exist yet: create it from this table-def.
		if ca.st.status == tableprop.StatusPaused {
			ca.st.setStatus(tableprop.StatusActive, "") // the table-def may make the table creatable
		}
		if err := ca.sa.open(ctx, nil); err != nil {
			return err
		}
		ack(ev) // created from this table-def (or paused again: its records are dead-lettered)
		return nil
	}
	superseded, err := ca.reconcile(ctx, ev, def, op)
	if superseded {
		restore() // a newer table-def was applied instead of this one: keep the writer's
	}
	return err
}

// reconcile brings the existing table in line with a table-def. When a table refreshed after a
// failed commit settles the record (controlSettled: applied, or a newer one was), it is
// acknowledged without applying more of it; superseded reports the second case (stale).
func (ca *controlApplier) reconcile(ctx context.Context, ev *change.Event, def *change.TableDef, op string) (superseded bool, err error) {
	desired := ca.set.desired(def)
	clearDrop := op == "create-table" && ca.st.status == tableprop.StatusDropped
	planFor := func() dms.SchemaPlan { return dms.PlanSchema(ca.st.lay.sourceStates(), desired, op == "rename-column") }
	plan := planFor()
	// A newer create-table of a table with data starts a reload (reload.go): its commit
	// records the start with the record's watermark, even when the schema does not change.
	reload := ca.rt.reloadStarts(ev, op)
	nothing := func(p dms.SchemaPlan) bool { return p.Empty() && !clearDrop && len(p.Incompatible) == 0 && !reload }
	committed := false // the plan's commit advanced the record's watermark
	if !nothing(plan) {
		if err := ca.cm.commitRows(ctx); err != nil {
			return false, err
		}
		stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
			plan = planFor()
			reload = reload && ca.rt.reloadStarts(ev, op) // re-checked on a refreshed table
			if nothing(plan) {
				return nil, nil
			}
			tbl, err := ca.commitPlan(ctx, ev, plan, clearDrop, reload)
			if err != nil {
				return nil, err
			}
			return tbl, ca.st.adopt(tbl)
		}
		res, err := commit.Run(ctx, ca.env.cat, ca.ident, ca.st.tbl, ca.cm.policy(), commit.Op{
			Name: fmt.Sprintf("apply %s to %s", op, ca.name), Stage: stage, Reloaded: ca.refreshedControl(ev),
			Failed: func(attempt int, err, _ error) {
				ca.log.Warn("schema change failed", zap.String("operation", op), zap.Int("attempt", attempt+1), zap.Error(err))
			},
		})
		if err != nil {
			return false, err
		}
		if res.Landed {
			return ca.settledOnRefresh(ev), nil
		}
		if res.Table != nil {
			committed = true
			ca.reportPlan(op, plan)
			if reload {
				ca.rt.reloadStarted(ev)
			}
		}
	}
	if clearDrop {
		ca.st.setStatus(tableprop.StatusActive, "")
	}
	if op == "create-table" && !ca.st.lay.keyed() && len(ca.set.primaryKey) == 0 && len(def.PrimaryKey) > 0 {
		// After a refresh the key is re-checked like the plan, except that the record's
		// watermark is its own when the plan committed it.
		settledKey := func() bool {
			if committed {
				return staleControl(ca.st.tbl.Properties(), ev.Meta.Timestamp)
			}
			return ca.controlSettled(ev)
		}
		landed, err := ca.sa.ensureKey(ctx, def.PrimaryKey, "the create-table table-def", settledKey)
		if err != nil {
			return false, err
		}
		if landed && settledKey() {
			if !committed {
				return ca.settledOnRefresh(ev), nil
			}
			ca.log.Info("primary key of the create-table not applied: a newer control record was applied meanwhile")
		}
	}
	if len(plan.Incompatible) > 0 {
		var parts []string
		for _, c := range plan.Incompatible {
			parts = append(parts, fmt.Sprintf("%s %s→%s", c.Name, c.From, c.To))
		}
		return false, ca.dq.deadLetter(ctx, ev, ClassIncompatible, fmt.Sprintf("%s asks for type changes Iceberg cannot apply (%s): the table keeps its types; records whose values do not convert are dead-lettered",
			op, strings.Join(parts, ", ")))
	}
	ack(ev)
	return false, nil
}

// commitPlan commits the schema changes of plan together with the control record's watermark
// and status properties.
func (ca *controlApplier) commitPlan(ctx context.Context, ev *change.Event, plan dms.SchemaPlan, clearDrop, reload bool) (*table.Table, error) {
	txn := ca.st.tbl.NewTransaction()
	if !plan.Empty() {
		if err := stageSchemaPlan(txn, plan); err != nil {
			return nil, err
		}
	}
	props := tableprop.Stamp(iceberg.Properties{}, ca.st.tbl.Properties())
	ca.controlWatermark(props, ev)
	if clearDrop {
		props[tableprop.Status] = tableprop.StatusActive
		props[tableprop.DroppedAt] = ""
	}
	controlTSProp(props, ca.st.tbl.Properties(), ev.Meta.Timestamp)
	ca.throughProp(props)
	if reload {
		ca.rt.markReload(props, ev)
		// An empty snapshot moves main: a writer that staged rows on main before the mark loses
		// its race, refreshes and stages them on the reload branch instead.
		if err := txn.AddFiles(ctx, nil, iceberg.Properties{tableprop.SummaryReload: tableprop.SummaryReloadStart}, false); err != nil {
			return nil, fmt.Errorf("stage the start of %s's reload: %w", ca.name, err)
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

func (ca *controlApplier) reportPlan(op string, plan dms.SchemaPlan) {
	for _, k := range []struct {
		kind string
		n    int
	}{
		{"rename_column", len(plan.Rename)}, {"add_column", len(plan.Add)}, {"widen_column", len(plan.Widen)},
		{"drop_column", len(plan.Drop)}, {"revive_column", len(plan.Revive)}, {"incompatible", len(plan.Incompatible)},
	} {
		if k.n > 0 {
			ca.env.metrics.SchemaChanged(ca.name, k.kind, k.n)
		}
	}
	if d := plan.Describe(); len(d) > 0 {
		ca.log.Info("applied control record", zap.String("operation", op), zap.Strings("changes", d), zap.Stringer("schema", ca.st.tbl.Schema()))
	}
}

// drop applies a drop-table control record.
func (ca *controlApplier) drop(ctx context.Context, ev *change.Event) error {
	if !ca.env.dropMark {
		ca.log.Info("table dropped at the source; keeping the target table (sink.drop_table ignore)")
		ack(ev)
		return nil
	}
	if ca.st.status == tableprop.StatusDropped {
		ack(ev)
		return nil
	}
	at := ev.Meta.Timestamp
	if at == "" {
		at = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if !ca.st.loaded() {
		tbl, err := ca.env.cat.LoadTable(ctx, ca.ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			ca.st.setStatus(tableprop.StatusDropped, "dropped at the source at "+at+" before the target table existed")
			ack(ev)
			return nil
		}
		if err != nil {
			return fmt.Errorf("open table %s: %w", ca.name, err)
		}
		if err := ca.st.use(tbl); err != nil {
			return err
		}
		if err := ca.sa.own(ctx); err != nil {
			return err
		}
		if ca.st.refused != "" {
			return ca.dq.deadLetter(ctx, ev, ClassTargetTaken, ca.st.refused)
		}
	}
	if err := ca.cm.commitRows(ctx); err != nil {
		return err
	}
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		txn := ca.st.tbl.NewTransaction()
		props := tableprop.Stamp(iceberg.Properties{tableprop.Status: tableprop.StatusDropped, tableprop.DroppedAt: at}, ca.st.tbl.Properties())
		controlTSProp(props, ca.st.tbl.Properties(), ev.Meta.Timestamp)
		ca.controlWatermark(props, ev)
		ca.throughProp(props)
		return ca.st.commitProps(ctx, txn, props)
	}
	res, err := commit.Run(ctx, ca.env.cat, ca.ident, ca.st.tbl, ca.cm.policy(), commit.Op{
		Name: "mark " + ca.name + " dropped", Stage: stage, Reloaded: ca.refreshedControl(ev),
	})
	if err != nil {
		return err
	}
	if res.Landed {
		// Applied (by this attempt or another worker: the writer takes the table's mark) or
		// superseded by a newer control record (a create-table that lifted it).
		ca.settledOnRefresh(ev)
		return nil
	}
	ca.st.setStatus(tableprop.StatusDropped, "dropped at the source at "+at)
	ack(ev)
	return nil
}
