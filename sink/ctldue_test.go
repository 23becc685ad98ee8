package sink

import (
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// A control record that the bound already passes applies when it is taken in, not at the next
// flush interval (an hour in the harness): the create-table makes its table at once, and the
// records after it are converted as they come. One the bound does not pass yet waits for it.
func TestDueControlRecordAppliesAtOnce(t *testing.T) {
	t.Parallel()
	fb := &fakeBound{}
	fb.ms.Store(5000)
	h := guardHarness(t, OrderingArrival, fb)
	h.arriveCtl("a", 1, 1000, "items", "create-table", "id*:INT4 name:STRING")
	waitFor(t, "the due create-table made its table", func() bool { return tableExists(t, h.cat, "items") })
	h.arrive("a", 2, 1001, "items", change.OpInsert, []change.Column{col("id", "1"), col("name", "one")}, nil)

	// Past the bound: the create-table of another table waits, and so do the records after it.
	h.arriveCtl("b", 1, 9000, "later", "create-table", "id*:INT4")
	h.arrive("b", 2, 9001, "later", change.OpInsert, []change.Column{col("id", "7")}, nil)
	waitFor(t, "the writer of later took in both records", func() bool { return bufferOf(t, h.s, "shop.later").Rows == 2 })
	if tableExists(t, h.cat, "later") {
		t.Fatal("a create-table past the bound made its table before a flush")
	}

	h.flush()
	got, _ := scanRows(t, h.cat, "items")
	eq(t, got, "id=1,name=one")
	fb.ms.Store(10000)
	h.flush()
	got, _ = scanRows(t, h.cat, "later")
	eq(t, got, "id=7")
}
