//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// EnvPyIcebergPython is the python of the venv that has pyiceberg, as `.ci/spark.sh env` prints it.
const EnvPyIcebergPython = "DMS2ICEBERG_IT_PYICEBERG_PYTHON"

const pyicebergHint = `the PyIceberg read check needs pyiceberg. From the repository root:
    .ci/spark.sh install && eval "$(.ci/spark.sh env)"
then run the tests again, or run everything with: make test`

// pyicebergRead runs integration/pyiceberg/read_tables.py: PyIceberg's SqlCatalog on the
// service's embedded SQLite catalog reads the given tables ("ns.table:col,col"). A table it
// cannot read comes back with Error set.
func pyicebergRead(t *testing.T, dataDir string, tables []string) map[string]sparkTable {
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
	cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(p.dataDir))
	if err != nil {
		t.Fatal(err)
	}
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
	if c, ok := cat.(interface{ Close() error }); ok {
		_ = c.Close()
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
// tables that have equality deletes.
func TestReadersByDeleteMode(t *testing.T) {
	for _, mode := range []string{"position", "dv", "equality"} {
		t.Run(mode, func(t *testing.T) {
			p, gen := newPipelineLive(t, 2, 2000, 21, 400)
			p.writeConfig(map[string]any{
				"flush_interval": "300ms", "maintenance": map[string]any{
					"max_delete_files": 1000000, "max_delete_rows": 1000000000, "max_small_files": 1000000,
					"interval": "24h", "check_interval": "1s", "position_delay": "500ms", "orphan_interval": "0s"}})
			p.setDeleteMode(mode, false) // sink-wide, as without per-table configuration
			svc := StartService(t, p.bin, p.config)
			if err := gen.WaitTimeout(5 * time.Minute); err != nil {
				t.Fatalf("gen: %v\n%s", err, tailFile(gen.LogPath, 8<<10))
			}
			p.records = countRecords(t, p.stream)
			p.waitVerified(5*time.Minute, svc)
			if mode != "equality" {
				deadline := time.Now().Add(2 * time.Minute) // a hang bound, not a speed assertion
				for {
					eq, _, _ := p.deleteFiles(t.Context())
					if sum(eq) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("equality deletes never all converted: %v", eq)
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
			exp := p.readExpected()
			var specs []string
			for _, et := range exp.Tables {
				cols := make([]string, len(et.Columns))
				for i, c := range et.Columns {
					cols[i] = c.Name
				}
				specs = append(specs, et.Namespace+"."+et.Name+":"+strings.Join(cols, ","))
			}
			got := pyicebergRead(t, p.dataDir, specs)
			unreadable := 0
			for _, et := range exp.Tables {
				name := et.Namespace + "." + et.Name
				st, ok := got[name]
				switch {
				case !ok:
					t.Errorf("pyiceberg: no result for %s", name)
				case mode == "equality" && eq[name] > 0:
					// The table has equality deletes outstanding: PyIceberg must not read it right.
					if st.Error == "" && len(compareSpark(et, st, 1)) == 0 {
						t.Errorf("pyiceberg read %s (%d equality delete files) equal to the expected state: the README says it cannot", name, eq[name])
					} else {
						unreadable++
						t.Logf("pyiceberg: %s with %d equality delete files: %s", name, eq[name], st.Error)
					}
				case st.Error != "":
					t.Errorf("pyiceberg: %s: %s", name, st.Error)
				default:
					if diffs := compareSpark(et, st, 10); len(diffs) > 0 {
						t.Errorf("pyiceberg: %s differs from the expected state (%d rows read, %d expected):\n  %s", name, len(st.Rows), len(et.Rows), strings.Join(diffs, "\n  "))
					} else {
						t.Logf("pyiceberg: %s: %d rows equal the expected state (%d position delete files, %d deletion vectors)", name, len(st.Rows), pos[name], dvs[name])
					}
				}
			}
			if mode == "equality" && unreadable == 0 {
				t.Error("equality mode: no table with equality deletes outstanding to show PyIceberg's limit")
			}
			p.sparkCheck("dms2iceberg", map[string]string{
				"type":                "jdbc",
				"uri":                 "jdbc:sqlite:" + filepath.Join(p.dataDir, "catalog.db"),
				"warehouse":           "file://" + filepath.Join(p.dataDir, "warehouse"),
				"jdbc.schema-version": "V1",
			}, "")
		})
	}
}
