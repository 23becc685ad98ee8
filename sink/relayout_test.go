package sink

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Another worker evolves the schema (adds a column, widens a float) while this writer holds
// rows built for the old schema. Its commit conflicts and refreshes to the new schema; when the batch
// must be written again (here: trimmed by the other worker's watermark), the buffered rows are
// re-laid by field id (new columns null, widened values converted) instead of being written by
// position.
func TestBufferedRowsFollowAnotherWorkersSchemaChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mine := newHarness(t, dir, withMaintenance(nil), withOptions(WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))))
	mine.ctl("c", 1, "m", "create-table", "id*:INT4 r:REAL4 name:STRING")
	mine.data("d0", 1, "m", change.OpInsert, []change.Column{col("id", "1"), col("r", "1.5"), col("name", "'a'")}, nil)
	mine.flush()
	// Buffered, not committed: built for (id, r float, name).
	mine.data("d0", 2, "m", change.OpInsert, []change.Column{col("id", "2"), col("r", "2.25"), col("name", "'b'")}, nil)
	mine.data("d0", 3, "m", change.OpUpdate, []change.Column{col("id", "1"), col("r", "0.5"), col("name", "'a2'")}, nil)

	other := newHarness(t, dir, withMaintenance(nil))
	other.ctl("c", 1, "m", "create-table", "id*:INT4 r:REAL4 name:STRING")
	other.ctl("c", 2, "m", "column-type-change", "id*:INT4 r:REAL8 name:STRING")
	// The other worker also took over shard d0 and committed its record 2: this writer's batch
	// is trimmed after the refresh, so its files are written again, for the new schema.
	other.data("d0", 2, "m", change.OpInsert, []change.Column{col("id", "2"), col("r", "2.25"), col("name", "'b'")}, nil)
	other.data("d1", 1, "m", change.OpInsert, []change.Column{col("id", "3"), col("r", "3.125"), col("name", "'c'"), col("extra", "'x'")}, nil)
	other.flush()
	other.close()

	mine.flush() // conflict, refresh: (id, r double, name, extra)
	mine.close()
	rows, _ := scanRows(t, mine.cat, "m")
	eq(t, rows,
		"id=1,r=0.5,name=a2,extra=null",
		"id=2,r=2.25,name=b,extra=null",
		"id=3,r=3.125,name=c,extra=x")
}
