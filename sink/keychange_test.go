package sink

import (
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// With full before-images (MySQL's ColumnFilter all) the before-image of every update holds every
// column, so the consumer, which does not know the key, cannot tell a key change from an update
// that changed another column. The writer compares the key columns: only a real key change waits
// for the older CDC changes another process holds (the change gate); an update that keeps its
// key commits at once.
func TestFullBeforeImageUpdateIsNoKeyChange(t *testing.T) {
	t.Parallel()
	gb := &gateBound{}
	gb.set(Bound{At: time.UnixMilli(5000)})
	h := newHarness(t, t.TempDir(), withMaintenance(nil), withConfig(func(c *Config) { c.Ordering = OrderingArrival }),
		withOptions(WithCommitBounds(gb.get)))
	h.arriveCtl("c", 1, 1000, "items", "create-table", "id*:INT4,name:STRING")
	h.arrive("a", 1, 1050, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "x")}, nil)
	h.arrive("b", 1, 1060, "items", change.OpInsert, []change.Column{col("id", "2"), col("name", "y")}, nil)
	h.flush()
	var g checkpoint.TableGates
	g[checkpoint.KindChange] = checkpoint.Gate{At: time.UnixMilli(1100)} // another process's older change
	gb.set(Bound{At: time.UnixMilli(5000), Gates: checkpoint.PendingTables{"shop.items": g}})
	// An update of key 1 with a full before-image that changes name only: no key change.
	h.arrive("a", 2, 1200, "items", change.OpUpdate, []change.Column{col("id", "1"), col("name", "x2")},
		[]change.Column{col("id", "1"), col("name", "x")})
	// A key change 2 -> 3 with a full before-image: waits for the older change elsewhere.
	h.arrive("b", 2, 1210, "items", change.OpUpdate, []change.Column{col("id", "3"), col("name", "y")},
		[]change.Column{col("id", "2"), col("name", "y")})
	h.flush()
	rows, _ := scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x2", "id=2,name=y")
	gb.set(Bound{At: time.UnixMilli(5000)})
	h.flush()
	rows, _ = scanRows(t, h.cat, "items")
	eq(t, rows, "id=1,name=x2", "id=3,name=y")
}
