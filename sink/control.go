package sink

import (
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The guards of control records (design.md §12): a record is applied once, in order, and never
// over a newer one. Its commit carries its shard watermark and its timestamp
// (tableprop.ControlTimestamp); applyControl skips a record the table's watermark covers or
// that is older than the last one applied, and every commit of a control record checks both
// again on each table reloaded after a failed attempt.

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
func (w *writer) controlWatermark(props iceberg.Properties, ev *change.Event) {
	if !ev.Replay && change.CompareSeq(ev.Pos.Seq, w.st.lay.watermark[ev.Pos.Shard]) > 0 && ev.Pos.Shard != "" {
		props[tableprop.Watermark(w.env.stream, ev.Pos.Shard)] = ev.Pos.Seq
	}
}

// controlSettled reports whether the control record ev no longer needs applying to the table
// as last loaded: the table's watermark of its shard covers it (the record, or a newer one of
// its shard, was applied; a replay from the dead-letter table is exempt as everywhere) or a
// newer control record was applied (staleControl; never for a truncate, ordered by position
// only). applyControl checks it before the first attempt; every commit of a control record
// checks it again on each table reloaded after a failed attempt (reloadedControl), since a
// zombie (a worker whose lease moved) may hold a record that the shard's new owner applied,
// followed by newer ones, while the zombie staged on its old view: re-planned against the newer
// schema, the old table-def would mark the newer columns dropped at the source.
func (w *writer) controlSettled(ev *change.Event) bool {
	if !ev.Replay && w.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		return true
	}
	return !dms.IsTruncate(ev.Control.Op) && staleControl(w.st.tbl.Properties(), ev.Meta.Timestamp)
}

// reloadedControl is the Op.Reloaded of a control record's commit: adopt the table; done when
// the record is settled on it (controlSettled). A commit whose outcome was unknown and that did
// land is settled too (its own watermark covers the record).
func (w *writer) reloadedControl(ev *change.Event) func(*table.Table) (bool, error) {
	return w.reloadedUse(func() bool { return w.controlSettled(ev) })
}

// settledOnReload handles a control record found settled on a reloaded table: nothing more of
// it is applied, as when applyControl finds it covered or stale before the first attempt, and
// the writer's dropped state follows the table's (another worker may have set or lifted the
// mark). stale reports that the record was superseded rather than applied.
func (w *writer) settledOnReload(ev *change.Event) (stale bool) {
	props := w.st.tbl.Properties()
	w.log.Info("control record already applied or superseded on the reloaded table: skipped", zap.String("operation", ev.Control.Op),
		zap.String("shard", ev.Pos.Shard), zap.String("seq", ev.Pos.Seq), zap.String("timestamp", ev.Meta.Timestamp),
		zap.String("last", props[tableprop.ControlTimestamp]))
	if !ev.Replay && w.st.covers(ev.Pos.Shard, ev.Pos.Seq) {
		w.env.metrics.Skipped(w.name, 1)
	} else {
		stale = true
		w.env.metrics.SchemaChanged(w.name, "stale_control", 1)
	}
	switch dropped := props[tableprop.Status] == tableprop.StatusDropped; {
	case dropped && w.env.dropMark && w.st.status == tableprop.StatusActive:
		w.setStatus(tableprop.StatusDropped, "marked dropped at "+props[tableprop.DroppedAt])
	case !dropped && w.st.status == tableprop.StatusDropped:
		w.setStatus(tableprop.StatusActive, "")
	}
	ack(ev)
	return stale
}

// takeDef makes def (of a control record at ts) the writer's table-def; restore puts back the
// one before it.
func (w *writer) takeDef(def *change.TableDef, ts string) (restore func()) {
	prev, prevTS, shared := w.def, w.defTS, w.env.defs.get(w.src)
	set := func(def, shared *change.TableDef, ts string) {
		w.def, w.defTS = def, ts
		w.env.defs.set(w.src, shared)
		if w.st.lay != nil {
			d := def
			if d == nil {
				d = shared
			}
			w.st.lay.setDomains(d)
		}
	}
	set(def, def, ts)
	return func() { set(prev, shared, prevTS) }
}
