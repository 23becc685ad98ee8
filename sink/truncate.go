package sink

import (
	"context"
	"fmt"
	"maps"
	"math"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Control records that act on the table's rows or name rather than its schema: truncate and
// rename-table (applyControl routes them here).

// truncate applies a truncate (dms.IsTruncate) at its place in the table's order: the rows that
// may commit before it are committed first (with the ordering guard: the rows that arrived
// before it; it is held like every control record), then one snapshot removes every data file
// of the table and commits the record's shard watermark and what the table is complete
// through, so a replay of the truncate is skipped by the watermark like any event and never
// removes rows that came after it. Rows after it stay buffered and commit on top. Keyed and
// keyless tables alike.
//
// A table that does not exist is left alone (nothing to remove, nothing created; its creation
// records the truncate, truncatedBefore); a paused or dropped table's truncate is dead-lettered
// like its data. A truncate replayed from the
// dead-letter table (ev.Replay) is not applied: it has lost its place in the order and would
// remove every row newer than it, so it is dead-lettered again (ClassUnsupported) for the
// operator (a reload of the table at the source, or a manual delete, is the remedy).
func (ca *controlApplier) truncate(ctx context.Context, ev *change.Event) error {
	if ev.Replay {
		return ca.dq.deadLetter(ctx, ev, ClassUnsupported, fmt.Sprintf("truncate of %s replayed from the dead-letter table is not applied: it would also remove every row written after it; delete the rows by hand or reload the table", ca.src))
	}
	if !ca.st.loaded() {
		// Every row the table will hold comes after this truncate: the table records that
		// when it is created (create), so a replay after a restart is skipped.
		ca.sa.truncatedBefore(ev)
	}
	switch ca.st.status {
	case tableprop.StatusPaused:
		return ca.dq.deadLetter(ctx, ev, ClassPaused, fmt.Sprintf("table %s is paused: %s", ca.name, ca.st.reason))
	case tableprop.StatusDropped:
		return ca.dq.deadLetter(ctx, ev, ClassDropped, fmt.Sprintf("table %s was dropped at the source (%s) and sink.drop_table is mark: records are not written until a create-table", ca.name, ca.st.reason))
	}
	if !ca.st.loaded() {
		ca.log.Info("truncate of a table that does not exist: nothing to remove")
		ack(ev)
		return nil
	}
	if err := ca.cm.commitRows(ctx); err != nil {
		return err
	}
	removed := 0
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		props := iceberg.Properties{}
		ca.controlWatermark(props, ev)
		ca.throughProp(props)
		// During a reload the truncate applies to the reload branch, where the table's rows go.
		txn := ca.rt.dataTxn()
		data, deletes, err := filesUpTo(ctx, ca.st.tbl, ca.rt.dataHead(), math.MaxInt64) // every live file
		if err != nil {
			return nil, fmt.Errorf("list the files of %s: %w", ca.name, err)
		}
		removed = len(data)
		if len(data)+len(deletes) > 0 {
			summary := maps.Clone(props)
			summary[tableprop.SummaryRows], summary[tableprop.SummaryDeletes] = "0", "0"
			// Data files and the delete files that applied to them go in the same snapshot.
			if err := txn.ReplaceFiles(ctx, data, nil, deletes, summary); err != nil {
				return nil, fmt.Errorf("stage truncate: %w", err)
			}
		}
		return ca.st.commitProps(ctx, txn, props)
	}
	res, err := commit.Run(ctx, ca.env.cat, ca.ident, ca.st.tbl, ca.cm.policy(), commit.Op{
		Name: "truncate " + ca.name, Stage: stage,
		// The watermark of the truncate's shard tells whether an attempt whose outcome was
		// unknown landed, or whether the shard's new owner applied it (a zombie, controlSettled).
		Reloaded: ca.refreshedControl(ev),
	})
	if err != nil {
		return err
	}
	if res.Table != nil {
		ca.log.Info("truncated table", zap.Int("data_files_removed", removed), zap.Int64("snapshot", snapshotID(ca.st.tbl)))
		ca.env.metrics.SchemaChanged(ca.name, "truncate", 1)
	}
	ack(ev)
	return nil
}

// truncatedBefore notes a truncate that came before the table existed: the table is created
// with the truncate's shard watermark (truncWM), so a replayed truncate is covered like one
// that was applied. Records of that shard before the truncate were taken in before it (a
// shard's order is kept), so the watermark trims nothing that is not in the table yet.
func (sa *schemaApplier) truncatedBefore(ev *change.Event) {
	if ev.Pos.Shard == "" {
		return
	}
	if sa.truncWM == nil {
		sa.truncWM = make(map[string]string)
	}
	if change.CompareSeq(ev.Pos.Seq, sa.truncWM[ev.Pos.Shard]) > 0 {
		sa.truncWM[ev.Pos.Shard] = ev.Pos.Seq
	}
}

// renameTable handles a rename-table: not applied. DMS documents neither whether its
// table-name is the old or the new name nor where the other name is (shared/dms-format.md §5),
// so neither a catalog rename nor a name mapping can be derived from it. It is dead-lettered
// (ClassUnsupported, counted by the dead-letter metrics) with the manual step, and the table is
// left as it is: data under the new source name goes to the target table of that name (created
// on first sight) until the operator maps it.
func (ca *controlApplier) renameTable(ctx context.Context, ev *change.Event) error {
	return ca.dq.deadLetter(ctx, ev, ClassUnsupported, fmt.Sprintf("rename-table of %s is not applied (DMS does not say which name the record carries): "+
		"to keep the data in the existing target table, map the new source name to it (sink.tables[\"<schema>.<new name>\"].name / namespace) "+
		"or rename the Iceberg table in the catalog to the new name's target, then restart", ca.src))
}
