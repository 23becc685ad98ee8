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
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
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
// layout (schema and watermarks), its latest table-def and the writer's state. It adopts every
// table loaded or committed (use, adopt). Only the writer's goroutine touches it, except the
// published status (pub), which TableStatuses reads under pubMu.
type targetTable struct {
	*tableScope
	tbl *table.Table
	lay *layout // nil until the table was loaded or created
	// fsF is the file system of the table as opened from the catalog, for the tables the writer
	// keeps after its commits (commit.Detach).
	fsF table.FSysF
	// def is the latest table-def seen in a control record of this table, defTS that record's
	// metadata.timestamp: every layout built takes its domains.
	def   *change.TableDef
	defTS string
	// status is tableprop.StatusActive, StatusPaused or StatusDropped, with the reason when not
	// active.
	status, reason string
	// refused is why the writer dead-letters every record of its source: another source owns the
	// target table (owner.go); "" when it does not.
	refused string
	pubMu   sync.Mutex
	pub     TableStatus
	// buf is the planner's buffer, whose rows are re-laid when the schema changes; rt reports
	// the reload in progress of every table adopted.
	buf *buffer
	rt  *reloadTracker
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
func (t *targetTable) use(tbl *table.Table) error {
	if err := tableprop.CheckStateVersion(t.name, tbl.Properties()); err != nil {
		t.log.Error("refusing the table: upgrade dms2iceberg", zap.Error(err))
		return commit.Permanent(err)
	}
	lay, err := newLayout(tbl, t.env.stream)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.name, err)
	}
	def := t.def
	if def == nil {
		def = t.env.defs.get(t.src)
	}
	lay.setDomains(def)
	if t.lay != nil && t.buf.rows.len() > 0 {
		// A refresh picked up another worker's schema change while rows are buffered.
		relayRows(&t.buf.rows, t.lay, lay)
	}
	t.tbl, t.lay = tbl, lay
	if t.env.defs != nil {
		t.env.defs.keys.set(t.src, lay.keyNames, true) // keyNames is nil for a keyless table
	}
	t.rt.reportReload()
	return nil
}

// refreshedUse is the Op.Reloaded of a schema or property commit: adopt the table; done when
// holds says the refreshed table already has the change (nil: never).
func (t *targetTable) refreshedUse(holds func() bool) func(*table.Table) (bool, error) {
	return func(tbl *table.Table) (bool, error) {
		if err := t.use(tbl); err != nil {
			return false, err
		}
		return holds != nil && holds(), nil
	}
}

// adopt uses a table the writer just committed (detached from the commit's transaction, which
// it would otherwise keep alive with every earlier version: commit.Detach). Its failure is not
// retried: the commit landed, and a layout that cannot be built from the table will not be built
// on another attempt.
func (t *targetTable) adopt(tbl *table.Table) error {
	return commit.Permanent(t.use(commit.Detach(tbl, t.env.cat, t.fsF)))
}

// setStatus changes the writer's state and publishes it.
func (t *targetTable) setStatus(status, reason string) {
	if t.status == status && t.reason == reason && !t.published().Since.IsZero() {
		return
	}
	t.status, t.reason = status, reason
	t.pubMu.Lock()
	t.pub = TableStatus{Source: t.src, Table: t.name, Status: status, Reason: reason, Since: time.Now()}
	t.pubMu.Unlock()
	t.env.metrics.TableStatus(t.name, status, reason)
	if status == tableprop.StatusActive {
		t.log.Info("table active")
	} else {
		t.log.Warn("table not taking records; they are dead-lettered", zap.String("status", status), zap.String("reason", reason))
	}
}

func (t *targetTable) pause(reason string) { t.setStatus(tableprop.StatusPaused, reason) }

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
func (t *targetTable) commitSchema(ctx context.Context, txn *table.Transaction, us *table.UpdateSchema) (*table.Table, error) {
	if err := us.Commit(); err != nil {
		return nil, err
	}
	if err := stamp(txn, t.tbl); err != nil {
		return nil, err
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return nil, err
	}
	return tbl, t.adopt(tbl)
}

// commitProps commits txn (a transaction on the writer's table) with the properties props, if
// any, and adopts the committed table: the tail of every control commit.
func (t *targetTable) commitProps(ctx context.Context, txn *table.Transaction, props iceberg.Properties) (*table.Table, error) {
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("stage properties: %w", err)
		}
	}
	tbl, err := txn.Commit(ctx)
	if err != nil {
		return nil, err
	}
	return tbl, t.adopt(tbl)
}

// snapshotID is the id of the table's current snapshot, 0 when it has none.
func snapshotID(t *table.Table) int64 {
	if s := t.CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return 0
}
