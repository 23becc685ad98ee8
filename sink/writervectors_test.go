package sink

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Writer vectors planned from the keys in memory for every kind of key (design.md §10.1): a text
// UUID key, a composite key (int and text), one of a date, a timestamp and a negative decimal,
// the int and text key partitioned by a key column, and a keyless table's record identity. Every batch's deletes are committed as deletion vectors planned from
// memory (no equality-delete file on main, none planned from files), and the table read back
// through the iceberg-go scanner is the model's.

// keyModel is a table of rows keyed by an int k, rendered into the table's key columns by cols
// and into its expected row by row.
type keyModel struct {
	h    *harness
	seq  int
	cols func(k int) []change.Column
	row  func(k int, name string) string
	rows map[int]string
}

func (m *keyModel) upsert(shard string, k int, name string) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpUpdate, "users", append(m.cols(k), col("name", "'"+name+"'")), nil)
	m.rows[k] = m.row(k, name)
}

func (m *keyModel) del(shard string, k int) {
	m.seq++
	m.h.submit(shard, m.seq, change.OpDelete, "users", m.cols(k), nil)
	delete(m.rows, k)
}

func (m *keyModel) want() []string {
	out := make([]string, 0, len(m.rows))
	for _, r := range m.rows {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// batch b updates every 7th key, deletes every 11th and re-inserts some, as batchOn does.
func (m *keyModel) batch(b, n int) {
	shard := fmt.Sprintf("s%d", b%4)
	for k := max(b%7, 1); k <= n; k += 7 {
		m.upsert(shard, k, fmt.Sprintf("v%d", b))
	}
	for k := 1 + b%11; k <= n; k += 11 {
		m.del(shard, k)
	}
	for k := 2 + b%13; k <= n; k += 29 {
		m.upsert(shard, k, fmt.Sprintf("r%d", b))
	}
	m.h.flush()
}

// uuidOf is key k as a UUID in canonical text form.
func uuidOf(k int) string { return fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", k*2654435761%(1<<32), k) }

// vectorHarness is a dv sink with writer vectors on and conversions held off, its writer of
// shop.users spied on.
func vectorHarness(t *testing.T, opts ...harnessOption) (*harness, func() *vectorSpy) {
	t.Helper()
	opts = append([]harnessOption{
		withMaintenance(func(c *maintenance.Config) {
			c.Enabled = true
			c.CheckInterval = 20 * time.Millisecond
			c.PositionDelay = time.Hour
			c.WriterVectors = true
		}),
		withConfig(func(c *Config) { c.DeleteMode = maintenance.DeleteModeDV }),
		withOptions(WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))),
	}, opts...)
	h := newHarness(t, t.TempDir(), opts...)
	return h, func() *vectorSpy {
		// The writer is idle between flushes; the next event reaches it through its queue.
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		w := h.s.writers["shop.users"]
		spy := &vectorSpy{maintainer: w.cm.maint}
		w.cm.maint = spy
		return spy
	}
}

// checkVectorsOnly fails unless name's last commit wrote deletion vectors, planned from memory
// (spy), with no equality delete live, and the table reads want (nil: not compared).
func checkVectorsOnly(t *testing.T, h *harness, name string, spy *vectorSpy, want []string) {
	t.Helper()
	if spy.ofKeys.Load() == 0 || spy.ofFiles.Load() != 0 {
		t.Fatalf("%d plans from keys in memory, %d from equality-delete files; want every plan from memory",
			spy.ofKeys.Load(), spy.ofFiles.Load())
	}
	rows, tbl := scanRows(t, h.cat, name)
	if want != nil {
		eq(t, rows, want...)
	}
	if _, ok := tbl.CurrentSnapshot().Summary.Properties[tableprop.SummaryVectors]; !ok {
		t.Fatalf("committed without deletion vectors: summary %v", tbl.CurrentSnapshot().Summary.Properties)
	}
	n, err := maintenance.CountDeletes(t.Context(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	if n.Equality != 0 || n.DVs == 0 || n.Position != n.DVs {
		t.Fatalf("%+v, want deletion vectors only", n)
	}
}

func TestWriterVectorsOfEveryKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		def  string
		opts []harnessOption
		cols func(k int) []change.Column
		row  func(k int, name string) string
	}{
		{name: "uuid text", def: "id*:WSTRING name:WSTRING",
			cols: func(k int) []change.Column { return []change.Column{col("id", "'"+uuidOf(k)+"'")} },
			row:  func(k int, name string) string { return fmt.Sprintf("id=%s,name=%s", uuidOf(k), name) }},
		{name: "int and text", def: "id*:INT4 code*:WSTRING name:WSTRING",
			cols: func(k int) []change.Column {
				return []change.Column{col("id", fmt.Sprint(k%10)), col("code", fmt.Sprintf("'c%d'", k))}
			},
			row: func(k int, name string) string { return fmt.Sprintf("id=%d,code=c%d,name=%s", k%10, k, name) }},
		{name: "date, timestamp and decimal", def: "day*:DATE at*:DATETIME amt*:NUMERIC name:WSTRING",
			cols: func(k int) []change.Column {
				return []change.Column{col("day", fmt.Sprintf("'2025-03-%02d'", 1+k%28)),
					col("at", fmt.Sprintf("'2025-03-04 05:%02d:%02d.%06d'", k/60%60, k%60, k)), col("amt", fmt.Sprintf("-%d.25", k))}
			},
			row: func(k int, name string) string {
				return fmt.Sprintf("day=2025-03-%02d,at=2025-03-04T05:%02d:%02d.%06d,amt=-%d.2500000000,name=%s", 1+k%28, k/60%60, k%60, k, k, name)
			}},
		{name: "partitioned by a key column", def: "id*:INT4 code*:WSTRING name:WSTRING",
			opts: []harnessOption{withTables(map[string]TableConfig{"shop.users": {PrimaryKey: []string{"id", "code"},
				Partition: []PartitionField{{Column: "id", Transform: "bucket", N: 3}}}})},
			cols: func(k int) []change.Column {
				return []change.Column{col("id", fmt.Sprint(k%10)), col("code", fmt.Sprintf("'c%d'", k))}
			},
			row: func(k int, name string) string { return fmt.Sprintf("id=%d,code=c%d,name=%s", k%10, k, name) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, spyOn := vectorHarness(t, tc.opts...)
			h.ctl("c", 1, "users", "create-table", tc.def)
			m := &keyModel{h: h, cols: tc.cols, row: tc.row, rows: map[int]string{}}
			for k := 1; k <= 150; k++ {
				m.upsert(fmt.Sprintf("s%d", k%4), k, "v0")
			}
			h.flush()
			spy := spyOn()
			for b := 1; b <= 3; b++ {
				m.batch(b, 150)
				checkVectorsOnly(t, h, "users", spy, m.want())
			}
			_, tbl := scanRows(t, h.cat, "users")
			if spec := tbl.Spec(); spec.IsUnpartitioned() == (tc.opts != nil) {
				t.Fatalf("partition spec %v", spec)
			}
			if tc.opts == nil {
				// The partitioned table's first commit may lose a race to the maintainer and
				// leave that attempt's data files (not delete files) to orphan cleanup.
				checkAllReferenced(t, tbl)
			}
			h.close()
		})
	}
}

// A keyless table's re-sent records replace their earlier copies by deletion vectors of their
// record identity, planned from memory.
func TestWriterVectorsOfKeylessIdentity(t *testing.T) {
	t.Parallel()
	usersDef := map[string]TableConfig{"shop.users": {Columns: []ColumnSpec{{Name: "msg", Type: "WSTRING"}}}}
	h, spyOn := vectorHarness(t, withTables(usersDef))
	insert := func(seq int, msg string, tx, rec int) {
		ev := cdcInsert("s0", seq, msg, tx, rec, true)
		ev.Table = "users"
		h.event(ev)
	}
	var want []string
	for i := 1; i <= 60; i++ {
		insert(i, fmt.Sprintf("m%d", i), 7, i)
		want = append(want, fmt.Sprintf("msg=m%d", i))
	}
	h.flush()
	spy := spyOn()
	seq := 100
	for b := 1; b <= 3; b++ {
		for i := b; i <= 60; i += 5 { // re-sends of earlier records
			seq++
			insert(seq, fmt.Sprintf("m%d", i), 7, i)
		}
		seq++
		insert(seq, fmt.Sprintf("n%d", b), 8, b) // a new record
		want = append(want, fmt.Sprintf("msg=n%d", b))
		h.flush()
		sort.Strings(want)
		checkVectorsOnly(t, h, "users", spy, nil)
		eq(t, msgsOf(t, h, "users"), want...)
	}
	h.close()
}

// msgsOf lists the msg values of a keyless table's rows, sorted (msgs for any table).
func msgsOf(t *testing.T, h *harness, name string) []string {
	t.Helper()
	rows, _ := scanRows(t, h.cat, name)
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		for _, f := range strings.Split(r, ",") {
			if strings.HasPrefix(f, "msg=") {
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out
}

// commitInfos keeps the CommitInfo of every commit.
type commitInfos struct {
	NopMetrics
	mu    sync.Mutex
	infos []CommitInfo
}

func (r *commitInfos) Committed(c CommitInfo) {
	r.mu.Lock()
	r.infos = append(r.infos, c)
	r.mu.Unlock()
}

func (r *commitInfos) last() CommitInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infos[len(r.infos)-1]
}

// refusingPlanner is a maintainer whose plans of keys in memory fail.
type refusingPlanner struct{ maintainer }

func (refusingPlanner) VectorsOfKeys(context.Context, *table.Table, []int, []deletes.Keys) (*maintenance.WriterVectors, error) {
	return nil, errors.New("refused")
}

// When the planner declines a batch of a writer-vectors table, the batch commits its equality
// deletes (the rows are right), and the commit says it declined (Metrics: VectorsDeclined); the
// next batch planned again commits vectors and does not.
func TestWriterVectorsDeclinedAreCounted(t *testing.T) {
	t.Parallel()
	rec := &commitInfos{}
	h, spyOn := vectorHarness(t, withOptions(WithMetrics(rec)))
	h.ctl("c", 1, "users", "create-table", "id*:WSTRING name:WSTRING")
	m := &keyModel{h: h, rows: map[int]string{},
		cols: func(k int) []change.Column { return []change.Column{col("id", "'"+uuidOf(k)+"'")} },
		row:  func(k int, name string) string { return fmt.Sprintf("id=%s,name=%s", uuidOf(k), name) }}
	for k := 1; k <= 50; k++ {
		m.upsert("s0", k, "v0")
	}
	h.flush()
	spy := spyOn()
	h.s.mu.Lock()
	w := h.s.writers["shop.users"]
	w.cm.maint = refusingPlanner{spy}
	h.s.mu.Unlock()
	m.batch(1, 50)
	rows, tbl := scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	if c := rec.last(); !c.VectorsDeclined || c.Vectors || c.Deletes == 0 {
		t.Fatalf("declined batch: %+v, want VectorsDeclined without Vectors", c)
	}
	if n, err := maintenance.CountDeletes(t.Context(), tbl); err != nil || n.Equality == 0 {
		t.Fatalf("declined batch: %+v %v, want its equality deletes", n, err)
	}
	h.s.mu.Lock()
	w.cm.maint = spy
	h.s.mu.Unlock()
	m.batch(2, 50)
	rows, _ = scanRows(t, h.cat, "users")
	eq(t, rows, m.want()...)
	if c := rec.last(); c.VectorsDeclined || !c.Vectors {
		t.Fatalf("planned batch: %+v, want Vectors without VectorsDeclined", c)
	}
	h.close()
}
