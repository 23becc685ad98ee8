package sink

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Two source keys that differ only below the microsecond (SQL Server datetime2(7)) stay two
// rows: the key column is stored as the canonical text, and an update or delete of one of them
// touches only that one, also when it spells the value differently (a zone, a trailing zero).
func TestTimestampKeyBelowMicrosecond(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir)
	h.ctl("c", 1, "ev", "create-table", "at*:DATETIME(7) note:WSTRING")
	h.data("d", 1, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.1234567Z'"), col("note", "'a'")}, nil)
	h.data("d", 2, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.1234568Z'"), col("note", "'b'")}, nil)
	h.flush()
	rows, tbl := scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.1234567,note=a", "at=2024-01-02T03:04:05.1234568,note=b")
	f, _ := tbl.Schema().FindFieldByName("at")
	if _, ok := f.Type.(iceberg.StringType); !ok || !strings.Contains(f.Doc, "timestamp(7) key stored as text") {
		t.Fatalf("key column: %v %q", f.Type, f.Doc)
	}
	h.data("d", 3, "ev", change.OpUpdate, []change.Column{col("at", "'2024-01-02T03:04:05.12345680Z'"), col("note", "'b2'")}, []change.Column{})
	h.flush()
	rows, _ = scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.1234567,note=a", "at=2024-01-02T03:04:05.1234568,note=b2")
	h.data("d", 4, "ev", change.OpDelete, []change.Column{col("at", "'2024-01-02 03:04:05.1234567'")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.1234568,note=b2")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
	// A primary-key change moves only the row it names.
	h.data("d", 5, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.1234567Z'"), col("note", "'c'")}, nil)
	h.data("d", 6, "ev", change.OpUpdate, []change.Column{col("at", "'2024-01-02T03:04:05.1234569Z'"), col("note", "'c'")},
		[]change.Column{col("at", "'2024-01-02T03:04:05.1234567Z'")})
	h.flush()
	rows, _ = scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.1234568,note=b2", "at=2024-01-02T03:04:05.1234569,note=c")
	// After a restart, before any table-def, the key's form comes from the table itself.
	h.close()
	h = newHarness(t, dir)
	h.data("d", 7, "ev", change.OpDelete, []change.Column{col("at", "'2024-01-02T03:04:05.12345680Z'")}, nil)
	h.flush()
	rows, _ = scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.1234569,note=c")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}

// A timestamp key whose precision no table-def declares stays a timestamp; a value with a
// nonzero digit below the microsecond is dead-lettered with the reason instead of being
// truncated into another row's key. The same digits in a non-key column are truncated.
func TestTimestampKeyUnknownPrecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir())
	h.ctl("c", 1, "ev", "create-table", "at*:DATETIME seen:DATETIME note:WSTRING")
	h.data("d", 1, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.123456Z'"), col("seen", "'2024-01-02T03:04:05.1234569Z'"), col("note", "'a'")}, nil)
	h.data("d", 2, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.1234567Z'"), col("note", "'b'")}, nil)
	h.data("d", 3, "ev", change.OpDelete, []change.Column{col("at", "'2024-01-02T03:04:05.1234561Z'")}, nil)
	h.data("d", 4, "ev", change.OpUpdate, []change.Column{col("at", "'2024-01-02T03:04:05.1234560Z'"), col("seen", "'2024-01-02T03:04:05.9999999Z'"), col("note", "'a2'")}, []change.Column{})
	h.flush()
	rows, _ := scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.123456,seen=2024-01-02T03:04:05.999999,note=a2")
	if len(h.dlq.Letters()) != 2 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
	for _, dl := range h.dlq.Letters() {
		if dl.Class != ClassConvert || !strings.Contains(dl.Reason, "below a microsecond") || !strings.Contains(dl.Reason, "column at") {
			t.Errorf("reason: %s (%s)", dl.Reason, dl.Class)
		}
	}
}

// A configured column type declaring the digits (scale 9, timestamptz) makes the configured key
// a text key too: UTC with Z, nine digits.
func TestTimestampKeyConfigured(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), withTables(map[string]TableConfig{"shop.ev": {
		Columns:    []ColumnSpec{{Name: "at", Type: "TIMESTAMP", Scale: 9}, {Name: "note", Type: "STRING"}},
		PrimaryKey: []string{"at"}, TimestampTZColumns: []string{"at"},
	}}))
	h.data("d", 1, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T05:04:05.000000001+02:00'"), col("note", "'a'")}, nil)
	h.data("d", 2, "ev", change.OpInsert, []change.Column{col("at", "'2024-01-02T03:04:05.000000002Z'"), col("note", "'b'")}, nil)
	h.data("d", 3, "ev", change.OpDelete, []change.Column{col("at", "'2024-01-02 04:04:05.000000001+01:00'")}, nil)
	h.flush()
	rows, _ := scanRows(t, h.cat, "ev")
	eq(t, rows, "at=2024-01-02T03:04:05.000000002Z,note=b")
	if len(h.dlq.Letters()) != 0 {
		t.Fatalf("dead letters: %+v", h.dlq.Letters())
	}
}
