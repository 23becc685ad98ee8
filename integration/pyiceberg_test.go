//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// EnvPyIcebergPython is the python of the venv that has pyiceberg, as `.ci/spark.sh env` prints it.
const EnvPyIcebergPython = "DMS2ICEBERG_IT_PYICEBERG_PYTHON"

const pyicebergHint = `the PyIceberg read check needs pyiceberg. From the repository root:
    .ci/spark.sh install && eval "$(.ci/spark.sh env)"
then run the tests again, or run everything with: make test`

// pyicebergRead runs integration/pyiceberg/read_tables.py: PyIceberg's SqlCatalog on the
// service's embedded SQLite catalog reads the given tables ("ns.table:col,col"), at the branch
// ref unless ref is "" (SnapshotID then says which snapshot it read). A table it cannot read
// comes back with Error set.
func pyicebergRead(t *testing.T, dataDir, ref string, tables []string) map[string]sparkTable {
	t.Helper()
	py := os.Getenv(EnvPyIcebergPython)
	if py == "" {
		t.Fatalf("%s is not set: %s", EnvPyIcebergPython, pyicebergHint)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%v: %s", err, pyicebergHint)
	}
	out := filepath.Join(t.TempDir(), "pyiceberg-rows.jsonl")
	args := []string{filepath.Join(RepoRoot(t), "integration", "pyiceberg", "read_tables.py"), "--name", "dms2iceberg",
		"--conf", "type=sql", "--conf", "uri=sqlite:///" + filepath.Join(dataDir, "catalog.db"),
		"--conf", "warehouse=file://" + filepath.Join(dataDir, "warehouse"), "--out", out}
	if ref != "" {
		args = append(args, "--ref", ref)
	}
	for _, tb := range tables {
		args = append(args, "--table", tb)
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), py, args...)
	cmd.WaitDelay = 10 * time.Second
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pyiceberg read: %v\n%s", err, log)
	}
	t.Logf("pyiceberg read %d tables in %s:\n%s", len(tables), time.Since(start).Round(time.Millisecond), log)
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	res := map[string]sparkTable{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var st sparkTable
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("pyiceberg output: %v", err)
		}
		res[st.Table] = st
	}
	return res
}

// setDeleteMode sets the delete mode in the service's configuration: sink.delete_mode, what a
// deployment without per-table configuration sets, or with perTable
// sink.tables.<every table>.delete_mode.
func (p *pipeline) setDeleteMode(mode string, perTable bool) {
	t := p.t
	t.Helper()
	b, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	snk := cfg["sink"].(map[string]any)
	if !perTable {
		snk["delete_mode"] = mode
	} else {
		tables, _ := snk["tables"].(map[string]any)
		if len(tables) == 0 {
			t.Fatal("the generator's config has no sink.tables")
		}
		for _, v := range tables {
			v.(map[string]any)["delete_mode"] = mode
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.config, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// deleteFiles counts the live equality- and position-delete files of every table of the
// expected state, through the service's catalog, and among the position deletes the deletion
// vectors (those of a format v3 table).
func (p *pipeline) deleteFiles(ctx context.Context) (eq, pos, dvs map[string]int) {
	t := p.t
	t.Helper()
	cat := p.serviceCatalog(ctx)
	eq, pos, dvs = map[string]int{}, map[string]int{}, map[string]int{}
	for _, et := range p.readExpected().Tables {
		name := et.Namespace + "." + et.Name
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		e, ps, d := countDeletes(t, tbl)
		eq[name], pos[name], dvs[name] = e, ps, d
	}
	return eq, pos, dvs
}

func countDeletes(t *testing.T, tbl *table.Table) (eq, pos, dvs int) {
	t.Helper()
	n, err := maintenance.CountDeletes(t.Context(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return n.Equality, n.Position, n.DVs
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestReadersByDeleteMode makes the README's reader table true: live CDC (two shards, updates,
// deletes, key changes, every DMS type family) into tables in each delete mode, maintenance on
// with compaction thresholds out of reach, so that deletes stay outstanding. The generator sends
// while the service runs, at a rate that spreads each table over many commits: were the whole
// stream written first, one flush could take a table's every change, and the equality deletes
// of a table's first commit apply to no older row, so there would be nothing to turn positional
// (CI once saw 0 equality and 0 position delete files that way). In position mode
// the maintainer converts every commit's equality deletes: once none is left (position deletes
// outstanding), PyIceberg and Spark read every table equal to the expected state. In dv mode
// the tables are format v3 and the position deletes deletion vectors, read the same way. In equality
// mode (deletes outstanding) Spark reads every table right, and PyIceberg cannot read the
// tables that have equality deletes. In position mode PyIceberg also reads each table's
// positional branch while the stream flows and main holds equality deletes (readBranchLive), and
// in position and dv mode at rest, where the branch is main's head, equal to the expected state.
// In dv mode the writers of every table (an integer key, a two-column key, a keyless table's
// record identity) commit deletion vectors, so PyIceberg reads main while the stream flows
// (readMainLive).
func TestReadersByDeleteMode(t *testing.T) {
	for _, mode := range []string{"position", "dv", "equality"} {
		t.Run(mode, func(t *testing.T) {
			rate := 400
			if mode != "equality" {
				rate = 150 // long enough for PyIceberg to read the positional branches during CDC
			}
			p, gen := newPipelineLive(t, 2, 2000, 21, rate)
			p.writeConfig(map[string]any{
				"flush_interval": "300ms", "maintenance": map[string]any{
					"max_delete_files": 1000000, "max_delete_rows": 1000000000, "max_small_files": 1000000,
					"interval": "24h", "check_interval": "1s", "position_delay": "500ms", "orphan_interval": "0s"}})
			p.setDeleteMode(mode, false) // sink-wide, as without per-table configuration
			svc := StartService(t, p.bin, p.config)
			exp := p.readExpected()
			if mode == "position" {
				// While the stream flows: PyIceberg reads the positional branch of every table
				// that has one, main holding equality deletes or not.
				WaitFor(t, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
					return p.branchWithEqualityDeletes(exp), nil
				}, "a table with a positional branch while main holds equality deletes")
				mainHadEq, branches := p.readBranchLive(exp)
				t.Logf("live: read the positional branch of %d tables, %d of them while main held equality deletes", branches, mainHadEq)
				if mainHadEq == 0 {
					t.Error("no table read at its positional branch while main held equality deletes: the live read showed nothing")
				}
			}
			if mode == "dv" {
				// Every table's writer commits deletion vectors (writer_vectors): main itself
				// holds no equality delete, and PyIceberg reads it while the stream flows.
				WaitFor(t, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
					return p.mainWithVectors(exp), nil
				}, "a table with deletion vectors on main")
				read := p.readMainLive(exp)
				t.Logf("live: PyIceberg read main of %d tables with deletion vectors outstanding", read)
				if read == 0 {
					t.Error("no table read at main with deletion vectors outstanding while the stream flowed")
				}
			}
			if mode != "equality" && gen.Exited() {
				t.Log("the generator had finished before the live read ended")
			}
			if err := gen.WaitTimeout(5 * time.Minute); err != nil {
				t.Fatalf("gen: %v\n%s", err, tailFile(gen.LogPath, 8<<10))
			}
			p.records = countRecords(t, p.stream)
			p.waitVerified(5*time.Minute, svc)
			if mode != "equality" {
				deadline := time.Now().Add(2 * time.Minute) // a hang bound, not a speed assertion
				for {
					eq, _, _ := p.deleteFiles(t.Context())
					behind := p.branchesBehindMain(exp)
					if sum(eq) == 0 && len(behind) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("equality deletes never all converted (%v), or positional branches never at main's head: %v", eq, behind)
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
			if err := svc.Stop(90 * time.Second); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			p.mustVerify()
			eq, pos, dvs := p.deleteFiles(t.Context())
			t.Logf("delete files outstanding: equality %v, position %v (deletion vectors %v)", eq, pos, dvs)
			switch mode {
			case "position":
				if sum(eq) != 0 || sum(pos) == 0 || sum(dvs) != 0 {
					t.Fatalf("position mode: %d equality, %d position delete files (%d deletion vectors) outstanding, want 0, some (0)", sum(eq), sum(pos), sum(dvs))
				}
			case "dv":
				if sum(eq) != 0 || sum(pos) == 0 || sum(dvs) != sum(pos) {
					t.Fatalf("dv mode: %d equality, %d position delete files (%d deletion vectors) outstanding, want 0, some (all)", sum(eq), sum(pos), sum(dvs))
				}
			case "equality":
				if sum(eq) == 0 || sum(pos) != 0 {
					t.Fatalf("equality mode: %d equality and %d position delete files outstanding, want some and 0", sum(eq), sum(pos))
				}
			}
			got := pyicebergRead(t, p.dataDir, "", tableSpecs(exp))
			var gotBranch map[string]sparkTable
			if mode != "equality" {
				gotBranch = pyicebergRead(t, p.dataDir, maintenance.DefaultConfig().PositionalBranch, tableSpecs(exp))
			}
			unreadable := 0
			for _, et := range exp.Tables {
				name := et.Namespace + "." + et.Name
				st, ok := got[name]
				switch {
				case ok && mode == "equality" && eq[name] > 0:
					// The table has equality deletes outstanding: PyIceberg must not read it right.
					if st.Error == "" && len(compareSpark(et, st, 1)) == 0 {
						t.Errorf("pyiceberg read %s (%d equality delete files) equal to the expected state: the README says it cannot", name, eq[name])
					} else {
						unreadable++
						t.Logf("pyiceberg: %s with %d equality delete files: %s", name, eq[name], st.Error)
					}
				default:
					if readAsExpected(t, "pyiceberg", name, et, st, ok) {
						t.Logf("pyiceberg: %s: %d rows equal the expected state (%d position delete files, %d deletion vectors)", name, len(st.Rows), pos[name], dvs[name])
					}
				}
			}
			if mode != "equality" {
				// At rest the positional branch is main's head: PyIceberg reads it equal to the
				// expected state.
				for _, et := range exp.Tables {
					name := et.Namespace + "." + et.Name
					st, ok := gotBranch[name]
					readAsExpected(t, "pyiceberg", "the positional branch of "+name, et, st, ok)
				}
			}
			if mode == "equality" && unreadable == 0 {
				t.Error("equality mode: no table with equality deletes outstanding to show PyIceberg's limit")
			}
			var extra []string
			var pairs [][2]string
			if mode != "equality" {
				extra, pairs = p.branchSnapshotSpecs(exp)
				if len(pairs) == 0 && mode == "position" {
					// In dv mode the writers commit vectors: a conversion follows only a reload.
					t.Error("no snapshot a conversion added to the positional branch is left for Spark to read")
				}
			}
			read := p.sparkCheckWith("dms2iceberg", map[string]string{
				"type":                "jdbc",
				"uri":                 "jdbc:sqlite:" + filepath.Join(p.dataDir, "catalog.db"),
				"warehouse":           "file://" + filepath.Join(p.dataDir, "warehouse"),
				"jdbc.schema-version": "V1",
			}, "", extra)
			// Spark reads a snapshot a conversion added to the branch exactly as the main
			// snapshot it shows, and the branch by name (at rest: main's head) as expected.
			for _, pr := range pairs {
				a, b := read[pr[0]], read[pr[1]]
				switch {
				case a.Error != "" || b.Error != "":
					t.Errorf("spark: %s: %s; %s: %s", pr[0], a.Error, pr[1], b.Error)
				case !slices.Equal(rowLines(a), rowLines(b)):
					t.Errorf("spark: %s (%d rows) differs from %s (%d rows), the main snapshot it shows", pr[0], len(a.Rows), pr[1], len(b.Rows))
				default:
					t.Logf("spark: %s reads as %s: %d rows", pr[0], pr[1], len(a.Rows))
				}
			}
			for _, et := range exp.Tables {
				if mode == "equality" {
					break
				}
				name := et.Namespace + "." + et.Name + "@" + maintenance.DefaultConfig().PositionalBranch
				st, ok := read[name]
				readAsExpected(t, "spark", name, et, st, ok)
			}
		})
	}
}

// readAsExpected reports whether a reader's result st for a table (ok: there is one) equals
// the expected state et, and fails the test when it is missing, an error, or different; who
// names the reader and what the read in messages.
func readAsExpected(t *testing.T, who, what string, et workload.ExpectedTable, st sparkTable, ok bool) bool {
	t.Helper()
	switch {
	case !ok:
		t.Errorf("%s: no result for %s", who, what)
	case st.Error != "":
		t.Errorf("%s: %s: %s", who, what, st.Error)
	default:
		diffs := compareSpark(et, st, 10)
		if len(diffs) == 0 {
			return true
		}
		t.Errorf("%s: %s differs from the expected state (%d rows read, %d expected):\n  %s", who, what, len(st.Rows), len(et.Rows), strings.Join(diffs, "\n  "))
	}
	return false
}

// branchWithEqualityDeletes reports whether a table of exp has a positional branch while main
// holds equality deletes (tables not created yet are skipped).
func (p *pipeline) branchWithEqualityDeletes(exp workload.Expected) bool {
	t := p.t
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	for _, et := range exp.Tables {
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil || tbl.Metadata().SnapshotByName(maintenance.DefaultConfig().PositionalBranch) == nil {
			continue
		}
		if eq, _, _ := countDeletes(t, tbl); eq > 0 {
			return true
		}
	}
	return false
}

// branchesBehindMain names the tables of exp whose positional branch is not at main's head.
func (p *pipeline) branchesBehindMain(exp workload.Expected) []string {
	t := p.t
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	var behind []string
	for _, et := range exp.Tables {
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil {
			t.Fatal(err)
		}
		at, head := tbl.Metadata().SnapshotByName(maintenance.DefaultConfig().PositionalBranch), tbl.CurrentSnapshot()
		if head != nil && (at == nil || at.SnapshotID != head.SnapshotID) {
			behind = append(behind, et.Namespace+"."+et.Name)
		}
	}
	return behind
}

// branchSnapshotSpecs returns, for Spark, every table at its positional branch, and for every
// table that still has one, the newest snapshot a conversion added to the branch and the main
// snapshot it shows ("ns.t@id:cols"; pairs holds both names).
func (p *pipeline) branchSnapshotSpecs(exp workload.Expected) (specs []string, pairs [][2]string) {
	t := p.t
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	all := tableSpecs(exp)
	for i, et := range exp.Tables {
		name, cols, _ := strings.Cut(all[i], ":")
		specs = append(specs, name+"@"+maintenance.DefaultConfig().PositionalBranch+":"+cols)
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil {
			t.Fatal(err)
		}
		meta := tbl.Metadata()
		var newest *table.Snapshot
		for _, s := range meta.Snapshots() {
			if src := maintenance.BranchSource(&s); src != s.SnapshotID && meta.SnapshotByID(src) != nil &&
				(newest == nil || s.SequenceNumber > newest.SequenceNumber) {
				newest = &s
			}
		}
		if newest == nil {
			continue
		}
		a := fmt.Sprintf("%s@%d", name, newest.SnapshotID)
		b := fmt.Sprintf("%s@%d", name, maintenance.BranchSource(newest))
		specs = append(specs, a+":"+cols, b+":"+cols)
		pairs = append(pairs, [2]string{a, b})
	}
	return specs, pairs
}

// rowLines renders a reader's rows as sorted lines, to compare two reads.
func rowLines(st sparkTable) []string {
	out := make([]string, 0, len(st.Rows))
	for _, r := range st.Rows {
		parts := make([]string, len(r))
		for i, v := range r {
			if v == nil {
				parts[i] = "\x00"
			} else {
				parts[i] = *v
			}
		}
		out = append(out, strings.Join(parts, "\x1f"))
	}
	sort.Strings(out)
	return out
}

// serviceCatalog opens the service's embedded catalog once (closed when the test ends).
func (p *pipeline) serviceCatalog(ctx context.Context) catalog.Catalog {
	p.t.Helper()
	if p.cat != nil {
		return p.cat
	}
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(p.dataDir))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() {
		if c, ok := cat.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	})
	p.cat = cat
	return cat
}

// tableSpecs names every table of the expected state with its columns, as pyicebergRead and
// sparkRead take them.
func tableSpecs(exp workload.Expected) []string {
	var specs []string
	for _, et := range exp.Tables {
		cols := make([]string, len(et.Columns))
		for i, c := range et.Columns {
			cols[i] = c.Name
		}
		specs = append(specs, et.Namespace+"."+et.Name+":"+strings.Join(cols, ","))
	}
	return specs
}

// renderedRows reads snapshot id of tbl through iceberg-go and renders each row as its values
// joined, sorted: two snapshots read the same rows exactly when these are equal.
func renderedRows(t *testing.T, tbl *table.Table, id int64) []string {
	t.Helper()
	_, it, err := tbl.Scan(table.WithSnapshotID(id)).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatalf("scan %v at %d: %v", tbl.Identifier(), id, err)
	}
	var out []string
	for rec, err := range it {
		if err != nil {
			t.Fatalf("scan %v at %d: %v", tbl.Identifier(), id, err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			vals := make([]string, rec.NumCols())
			for c := range vals {
				vals[c] = rec.Column(c).ValueStr(i)
			}
			out = append(out, strings.Join(vals, "\x1f"))
		}
		rec.Release()
	}
	sort.Strings(out)
	return out
}

// readMainLive reads main, while the service takes CDC, of every table (its writer commits
// deletion vectors, not equality deletes): main must hold no equality
// delete, and PyIceberg reads as many rows as iceberg-go reads in the snapshot PyIceberg read. It
// returns how many of them it read with deletion vectors outstanding.
func (p *pipeline) readMainLive(exp workload.Expected) int {
	t := p.t
	t.Helper()
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	var specs []string
	all := tableSpecs(exp)
	withDVs := map[string]bool{}
	for i, et := range exp.Tables {
		name := et.Namespace + "." + et.Name
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil || tbl.CurrentSnapshot() == nil {
			continue // not created yet
		}
		eq, _, dvs := countDeletes(t, tbl)
		if eq > 0 {
			t.Errorf("%s: main holds %d equality-delete files: its writer should have committed deletion vectors", name, eq)
			continue
		}
		specs = append(specs, all[i])
		withDVs[name] = dvs > 0
	}
	if len(specs) == 0 {
		return 0
	}
	read := 0
	for _, name := range p.pyicebergReadsLikeIcebergGo(table.MainBranch, "main", specs) {
		if withDVs[name] {
			read++
		}
	}
	return read
}

// pyicebergReadsLikeIcebergGo reads ref of the tables of specs with PyIceberg and checks that it
// reads as many rows as iceberg-go does in the snapshot PyIceberg read; it returns the tables
// that passed. what names ref in messages.
func (p *pipeline) pyicebergReadsLikeIcebergGo(ref, what string, specs []string) []string {
	t := p.t
	t.Helper()
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	var ok []string
	for name, st := range pyicebergRead(t, p.dataDir, ref, specs) {
		if st.Error != "" {
			t.Errorf("pyiceberg: %s of %s: %s", what, name, st.Error)
			continue
		}
		ns, tn, _ := strings.Cut(name, ".")
		tbl, err := cat.LoadTable(ctx, table.Identifier{ns, tn})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(renderedRows(t, tbl, st.SnapshotID)); n != len(st.Rows) {
			t.Errorf("pyiceberg read %d rows of %s at %s's snapshot %d, iceberg-go %d", len(st.Rows), name, what, st.SnapshotID, n)
			continue
		}
		ok = append(ok, name)
	}
	return ok
}

// mainWithVectors reports whether some table of exp has deletion vectors on main.
func (p *pipeline) mainWithVectors(exp workload.Expected) bool {
	t := p.t
	cat := p.serviceCatalog(t.Context())
	for _, et := range exp.Tables {
		tbl, err := cat.LoadTable(t.Context(), table.Identifier{et.Namespace, et.Name})
		if err != nil || tbl.CurrentSnapshot() == nil {
			continue
		}
		if _, _, dvs := countDeletes(t, tbl); dvs > 0 {
			return true
		}
	}
	return false
}

// readBranchLive reads, while the service takes CDC, every table's positional branch: iceberg-go
// finds no equality delete in the branch's snapshot and reads there exactly the rows of the main
// snapshot it shows (maintenance.BranchSource), and PyIceberg reads the branch, as many rows as
// iceberg-go reads in the snapshot PyIceberg read. It returns how many tables it read while
// main held equality deletes (which PyIceberg cannot read), and how many had a branch.
func (p *pipeline) readBranchLive(exp workload.Expected) (mainHadEq, branches int) {
	t := p.t
	t.Helper()
	ctx := t.Context()
	cat := p.serviceCatalog(ctx)
	var specs []string
	all := tableSpecs(exp)
	for i, et := range exp.Tables {
		name := et.Namespace + "." + et.Name
		tbl, err := cat.LoadTable(ctx, table.Identifier{et.Namespace, et.Name})
		if err != nil {
			continue // not created yet
		}
		at := tbl.Metadata().SnapshotByName(maintenance.DefaultConfig().PositionalBranch)
		if at == nil {
			continue // no conversion yet
		}
		branches++
		specs = append(specs, all[i])
		if eq, _, _ := countDeletes(t, tbl); eq > 0 {
			mainHadEq++
		}
		if n, err := maintenance.CountDeletesIn(ctx, tbl, at); err != nil {
			t.Fatal(err)
		} else if n.Equality > 0 {
			t.Errorf("%s: the positional branch's snapshot %d holds %d equality-delete files", name, at.SnapshotID, n.Equality)
		}
		src := maintenance.BranchSource(at)
		got, want := renderedRows(t, tbl, at.SnapshotID), renderedRows(t, tbl, src)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the positional branch (snapshot %d, %d rows) does not read as main's snapshot %d (%d rows) it shows",
				name, at.SnapshotID, len(got), src, len(want))
		}
	}
	if len(specs) == 0 {
		return 0, 0
	}
	p.pyicebergReadsLikeIcebergGo(maintenance.DefaultConfig().PositionalBranch, "the positional branch", specs)
	return mainHadEq, branches
}
