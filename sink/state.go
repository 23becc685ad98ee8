package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// TableStatus is the state of one table writer, for status pages.
type TableStatus struct {
	// Source is the DMS "schema.table", Table the target "namespace.table".
	Source, Table string
	// Status is active, paused or dropped (tableprop.StatusActive, ...); Reason says why when
	// not active; Since is when the state was entered.
	Status, Reason string
	Since          time.Time
}

// StatusRefused is the TableStatus.Status of a writer whose target table another source owns
// (tableprop.Source): its records are dead-lettered (class target_taken). It is never persisted:
// the table itself stays active under its owner.
const StatusRefused = "refused"

// targetTable is what a writer knows of its table: the table as last loaded or committed, its
// layout (schema and watermarks) and the writer's state. Only the writer's goroutine touches it,
// except the published status (pub), which TableStatuses reads under pubMu.
type targetTable struct {
	tbl *table.Table
	lay *layout // nil until the table was loaded or created
	// status is tableprop.StatusActive, StatusPaused or StatusDropped, with the reason when not
	// active.
	status, reason string
	pubMu          sync.Mutex
	pub            TableStatus
}

// loaded reports whether the table was loaded or created.
func (t *targetTable) loaded() bool { return t.lay != nil }

// covers reports whether the table already holds the change of shard at seq.
func (t *targetTable) covers(shard, seq string) bool {
	return t.lay != nil && checkpoint.Covered(t.lay.watermark[shard], seq)
}

// published returns the status as last published.
func (t *targetTable) published() TableStatus {
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	return t.pub
}

// use adopts tbl, the newest table loaded or committed: the layout follows its schema and
// watermarks, and buffered rows are re-laid when another worker changed the schema. A table
// whose state a newer state version of dms2iceberg wrote is refused (a permanent
// *stateversion.Error): the writer stops without committing to it or acknowledging anything.
func (w *writer) use(tbl *table.Table) error {
	if err := tableprop.CheckStateVersion(w.name, tbl.Properties()); err != nil {
		w.log.Error("refusing the table: upgrade dms2iceberg", zap.Error(err))
		return commit.Permanent(err)
	}
	lay, err := newLayout(tbl, w.env.stream)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.name, err)
	}
	def := w.def
	if def == nil {
		def = w.env.defs.get(w.src)
	}
	lay.setDomains(def)
	if w.st.lay != nil && w.buf.rows.len() > 0 {
		// A reload picked up another worker's schema change while rows are buffered.
		relayRows(&w.buf.rows, w.st.lay, lay)
	}
	w.st.tbl, w.st.lay = tbl, lay
	w.reportReload()
	return nil
}

// setStatus changes the writer's state and publishes it.
func (w *writer) setStatus(status, reason string) {
	t := &w.st
	if t.status == status && t.reason == reason && !t.published().Since.IsZero() {
		return
	}
	t.status, t.reason = status, reason
	t.pubMu.Lock()
	t.pub = TableStatus{Source: w.src, Table: w.name, Status: status, Reason: reason, Since: time.Now()}
	t.pubMu.Unlock()
	w.env.metrics.TableStatus(w.name, status, reason)
	if status == tableprop.StatusActive {
		w.log.Info("table active")
	} else {
		w.log.Warn("table not taking records; they are dead-lettered", zap.String("status", status), zap.String("reason", reason))
	}
}

func (w *writer) pause(reason string) { w.setStatus(tableprop.StatusPaused, reason) }

// stamp stages the state version on txn, a transaction on base, unless base has it
// (tableprop.Stamp).
func stamp(txn *table.Transaction, base *table.Table) error {
	props := tableprop.Stamp(map[string]string{}, base.Properties())
	if len(props) == 0 {
		return nil
	}
	return txn.SetProperties(props)
}

// commitSchema commits us, a schema update on txn (a transaction on the writer's table), with
// the state version stamp, and adopts the committed table.
func (w *writer) commitSchema(ctx context.Context, txn *table.Transaction, us *table.UpdateSchema) (*table.Table, error) {
	if err := us.Commit(); err != nil {
		return nil, err
	}
	if err := stamp(txn, w.st.tbl); err != nil {
		return nil, err
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return nil, err
	}
	return tbl, w.adopt(tbl)
}

// commitProps commits txn (a transaction on the writer's table) with the properties props, if
// any, and adopts the committed table: the tail of every control commit.
func (w *writer) commitProps(ctx context.Context, txn *table.Transaction, props iceberg.Properties) (*table.Table, error) {
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("stage properties: %w", err)
		}
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return nil, err
	}
	return tbl, w.adopt(tbl)
}

// snapshotID is the id of the table's current snapshot, 0 when it has none.
func snapshotID(t *table.Table) int64 {
	if s := t.CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return 0
}
