//go:build integration

package integration

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// Environment variables for the Spark read check, as `.ci/spark.sh env` prints them.
const (
	EnvSparkPython = "DMS2ICEBERG_IT_SPARK_PYTHON" // python of the venv that has pyspark
	EnvSparkJars   = "DMS2ICEBERG_IT_SPARK_JARS"   // comma-separated: Iceberg Spark runtime, JDBC drivers
)

const sparkHint = `the Spark read check needs pyspark and the Iceberg Spark runtime. From the repository root:
    .ci/spark.sh install && eval "$(.ci/spark.sh env)"
then run the tests again, or run everything with: make test`

// sparkTable is one table as integration/spark/read_tables.py dumps it.
type sparkTable struct {
	Table      string      `json:"table"`
	Error      string      `json:"error"`
	Columns    []string    `json:"columns"`
	SparkTypes []string    `json:"spark_types"`
	Rows       [][]*string `json:"rows"`
	SnapshotID int64       `json:"snapshot_id"` // PyIceberg at a ref: the snapshot it read
}

// sparkRead runs integration/spark/read_tables.py: a local Spark with the Iceberg runtime reads
// the given tables ("ns.table", or "ns.table:col,col") through one catalog configured with
// props (Iceberg catalog properties). It fails the test if Spark cannot start; a table Spark
// cannot read comes back with Error set.
func sparkRead(t *testing.T, catalogName string, props map[string]string, tables []string) map[string]sparkTable {
	t.Helper()
	py, jars := os.Getenv(EnvSparkPython), os.Getenv(EnvSparkJars)
	if py == "" || jars == "" {
		t.Fatalf("%s or %s is not set: %s", EnvSparkPython, EnvSparkJars, sparkHint)
	}
	for _, f := range append([]string{py}, strings.Split(jars, ",")...) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: %s", err, sparkHint)
		}
	}
	out := filepath.Join(t.TempDir(), "spark-rows.jsonl")
	args := []string{filepath.Join(RepoRoot(t), "integration", "spark", "read_tables.py"),
		"--jars", jars, "--catalog", catalogName, "--out", out}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--conf", k+"="+props[k])
	}
	for _, tb := range tables {
		args = append(args, "--table", tb)
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), py, args...)
	cmd.WaitDelay = 10 * time.Second
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("spark read: %v\n%s", err, log)
	}
	t.Logf("spark read %d tables in %s:\n%s", len(tables), time.Since(start).Round(time.Millisecond), sparkSummary(string(log)))
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("spark read: %v\n%s", err, log)
	}
	defer func() { _ = f.Close() }()
	res := map[string]sparkTable{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var st sparkTable
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("spark output: %v", err)
		}
		res[st.Table] = st
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("spark output: %v", err)
	}
	return res
}

// sparkSummary keeps the lines of the reader's log that it writes itself.
func sparkSummary(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "read ") || strings.HasPrefix(l, "spark ") {
			keep = append(keep, "  "+l)
		}
	}
	return strings.Join(keep, "\n")
}

// parseIcebergType parses a primitive type as iceberg.Type.String prints it (the expected
// state's column types).
func parseIcebergType(s string) (iceberg.Type, error) {
	switch s {
	case "boolean":
		return iceberg.PrimitiveTypes.Bool, nil
	case "int":
		return iceberg.PrimitiveTypes.Int32, nil
	case "long":
		return iceberg.PrimitiveTypes.Int64, nil
	case "float":
		return iceberg.PrimitiveTypes.Float32, nil
	case "double":
		return iceberg.PrimitiveTypes.Float64, nil
	case "date":
		return iceberg.PrimitiveTypes.Date, nil
	case "time":
		return iceberg.PrimitiveTypes.Time, nil
	case "timestamp":
		return iceberg.PrimitiveTypes.Timestamp, nil
	case "timestamptz":
		return iceberg.PrimitiveTypes.TimestampTz, nil
	case "string":
		return iceberg.PrimitiveTypes.String, nil
	case "binary":
		return iceberg.PrimitiveTypes.Binary, nil
	case "uuid":
		return iceberg.PrimitiveTypes.UUID, nil
	}
	var p, sc, n int
	if _, err := fmt.Sscanf(s, "decimal(%d, %d)", &p, &sc); err == nil {
		return iceberg.DecimalTypeOf(p, sc), nil
	}
	if _, err := fmt.Sscanf(s, "fixed[%d]", &n); err == nil {
		return iceberg.FixedTypeOf(n), nil
	}
	return nil, fmt.Errorf("unsupported type %q", s)
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

// sparkDatum turns one value of read_tables.py's encoding into the Datum that pkg/dms renders,
// so that Spark's values are rendered by the very code verify uses (dms.Render).
func sparkDatum(t iceberg.Type, v string) (dms.Datum, error) {
	switch tt := t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type, iceberg.DateType, iceberg.TimestampType, iceberg.TimestampTzType:
		i, err := strconv.ParseInt(v, 10, 64)
		return dms.Datum{I: i}, err
	case iceberg.BooleanType:
		switch v {
		case "true":
			return dms.Datum{I: 1}, nil
		case "false":
			return dms.Datum{}, nil
		}
		return dms.Datum{}, fmt.Errorf("boolean %q", v)
	case iceberg.Float32Type:
		f, err := strconv.ParseFloat(v, 64)
		f32 := float32(f)
		if err == nil && float64(f32) != f && !math.IsNaN(f) {
			err = fmt.Errorf("float %q is not a float32 value", v)
		}
		return dms.Datum{I: int64(math.Float32bits(f32))}, err
	case iceberg.Float64Type:
		f, err := strconv.ParseFloat(v, 64)
		return dms.Datum{I: int64(math.Float64bits(f))}, err
	case iceberg.DecimalType:
		intPart, frac, _ := strings.Cut(v, ".")
		if len(frac) != tt.Scale() {
			return dms.Datum{}, fmt.Errorf("decimal %q does not have scale %d", v, tt.Scale())
		}
		n, ok := new(big.Int).SetString(intPart+frac, 10)
		if !ok {
			return dms.Datum{}, fmt.Errorf("decimal %q", v)
		}
		if n.Sign() < 0 {
			n.Add(n, two128) // two's complement in 128 bits
		}
		lo := new(big.Int).And(n, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
		hi := new(big.Int).Rsh(n, 64).Uint64()
		return dms.Datum{I: int64(lo), Hi: int64(hi)}, nil
	case iceberg.StringType:
		return dms.Datum{S: v}, nil
	case iceberg.BinaryType, iceberg.FixedType:
		b, err := hex.DecodeString(v)
		return dms.Datum{S: string(b)}, err
	case iceberg.UUIDType:
		u, err := uuid.Parse(v)
		return dms.Datum{S: string(u[:])}, err
	}
	return dms.Datum{}, fmt.Errorf("no rendering for %s", t)
}

// compareSpark compares what Spark read of one table with its expected state, rendering every
// value with dms.Render. Rows compare as a multiset of whole rows: for a keyed table, whose
// expected rows have unique keys, that is the same check as verify's by-key comparison. It
// returns the differences (at most max).
func compareSpark(et workload.ExpectedTable, st sparkTable, max int) []string {
	if len(st.Columns) != len(et.Columns) {
		return []string{fmt.Sprintf("spark read columns %v, want %d columns", st.Columns, len(et.Columns))}
	}
	types := make([]iceberg.Type, len(et.Columns))
	for i, c := range et.Columns {
		if st.Columns[i] != c.Name {
			return []string{fmt.Sprintf("column %d is %s in spark, want %s", i, st.Columns[i], c.Name)}
		}
		typ, err := parseIcebergType(c.Type)
		if err != nil {
			return []string{fmt.Sprintf("column %s: %v", c.Name, err)}
		}
		types[i] = typ
	}
	line := func(row []*string) string {
		parts := make([]string, len(row))
		for i, v := range row {
			if v == nil {
				parts[i] = et.Columns[i].Name + "=null"
			} else {
				parts[i] = et.Columns[i].Name + "=" + strconv.Quote(*v)
			}
		}
		return strings.Join(parts, " ")
	}
	var diffs []string
	counts := map[string]int{}
	for _, row := range et.Rows {
		counts[line(row)]++
	}
	for ri, row := range st.Rows {
		rendered := make([]*string, len(row))
		for i, v := range row {
			if v == nil {
				continue
			}
			d, err := sparkDatum(types[i], *v)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("row %d column %s: %v", ri, et.Columns[i].Name, err))
				continue
			}
			s := dms.Render(types[i], d)
			rendered[i] = &s
		}
		counts[line(rendered)]--
	}
	keys := make([]string, 0, len(counts))
	for k, n := range counts {
		if n != 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		n := counts[k]
		if n > 0 {
			diffs = append(diffs, fmt.Sprintf("missing in spark (%dx): %s", n, k))
		} else {
			diffs = append(diffs, fmt.Sprintf("unexpected in spark (%dx): %s", -n, k))
		}
	}
	if len(diffs) > max {
		diffs = append(diffs[:max], fmt.Sprintf("... %d more", len(diffs)-max))
	}
	return diffs
}

// readExpected decodes the pipeline's expected-state file.
func (p *pipeline) readExpected() workload.Expected {
	p.t.Helper()
	f, err := os.Open(p.expected)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	exp, err := workload.DecodeExpected(f)
	if err != nil {
		p.t.Fatal(err)
	}
	return exp
}

// sparkCheck has Spark read every table of the expected state through the given catalog and
// compares the rows with the expected state: every table must equal its expected rows exactly.
// (Iceberg's Spark integration cannot load a table with an Iceberg `time` column at all, which is
// why the service stores DMS TIME as string unless sink.time_type is "time".)
func (p *pipeline) sparkCheck(catalogName string, props map[string]string, namespace string) {
	p.t.Helper()
	p.sparkCheckWith(catalogName, props, namespace, nil)
}

// sparkCheckWith is sparkCheck that also reads the extra specs in the same Spark session
// ("ns.table@<snapshot id or ref>:cols", read/tables.py's VERSION AS OF) and returns what Spark
// read of them, for the caller to check.
func (p *pipeline) sparkCheckWith(catalogName string, props map[string]string, namespace string, extra []string) map[string]sparkTable {
	t := p.t
	t.Helper()
	exp := p.readExpected()
	var tables, specs []string
	for _, et := range exp.Tables {
		ns := et.Namespace
		if namespace != "" {
			ns = namespace
		}
		tables = append(tables, ns+"."+et.Name)
		cols := make([]string, len(et.Columns))
		for i, c := range et.Columns {
			cols[i] = c.Name
		}
		specs = append(specs, ns+"."+et.Name+":"+strings.Join(cols, ","))
	}
	got := sparkRead(t, catalogName, props, append(specs, extra...))
	for i, et := range exp.Tables {
		st, ok := got[tables[i]]
		if !ok {
			t.Errorf("spark: no result for %s", tables[i])
			continue
		}
		switch {
		case st.Error != "":
			t.Errorf("spark: %s: %s", tables[i], st.Error)
		default:
			if diffs := compareSpark(et, st, 10); len(diffs) > 0 {
				t.Errorf("spark: %s differs from the expected state (%d rows read, %d expected):\n  %s", tables[i], len(st.Rows), len(et.Rows), strings.Join(diffs, "\n  "))
			} else {
				t.Logf("spark: %s: %d rows equal the expected state (spark types %s)", tables[i], len(st.Rows), strings.Join(st.SparkTypes, ","))
			}
		}
	}
	return got
}

// TestSparkReadsTables: pyspark with the Iceberg Spark runtime reads every table the service
// wrote through the embedded catalog (Iceberg's JdbcCatalog on the same SQLite file, the same
// local warehouse), and its rows, rendered in Go by the code verify uses, equal the expected
// state: equality deletes, primary-key changes, keyless tables (with DMS re-sends that their
// record identity absorbs) and every DMS type family. Two workloads: plain CDC, and the
// schema-change scenario (columns added, renamed, widened and dropped, tables created and
// dropped mid-stream), which Spark must read through the evolved
// schemas (field ids, not names); and plain CDC with in-process maintenance on aggressive
// thresholds followed by `dms2iceberg maintain` (compaction with dead equality deletes removed,
// snapshot expiry, manifest rewrite), which Spark must read with the rewritten files.
func TestSparkReadsTables(t *testing.T) {
	for _, tc := range []struct {
		name    string
		genArgs []string
		config  map[string]any // merged into sink
		// maintain runs `dms2iceberg maintain` after the service stopped.
		maintain bool
	}{
		// With DMS re-sends of keyless inserts: Spark must apply the identity's equality deletes.
		{name: "cdc", genArgs: []string{"--changes", "2000", "--seed", "11", "--resends", "40"}},
		{name: "schema_changes", genArgs: []string{"--changes", "3000", "--load-rows", "300", "--seed", "12", "--schema-changes"},
			config: map[string]any{"drop_table": "mark"}},
		{name: "after_maintenance", genArgs: []string{"--changes", "2000", "--seed", "13"},
			config: map[string]any{"flush_interval": "300ms", "maintenance": map[string]any{
				"max_delete_files": 2, "min_interval": "1s", "check_interval": "1s", "keep_last": 2, "snapshot_retention": "1s"}},
			maintain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sparkPipeline(t, 2, tc.genArgs, tc.config)
			svc := StartService(t, p.bin, p.config)
			p.waitVerified(5*time.Minute, svc)
			if err := svc.Stop(90 * time.Second); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			p.mustVerify()
			if tc.maintain {
				out, stderr, err := RunCLI(t, p.bin, "maintain", "--config", p.config, "--ignore-lease")
				if err != nil {
					t.Fatalf("maintain: %v\n%s%s", err, out, stderr)
				}
				t.Logf("maintain:\n%s", out)
				p.mustVerify()
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

// sparkPipeline is newPipeline with more gen flags (genArgs) and settings merged into the
// service's sink configuration.
func sparkPipeline(t *testing.T, shards int, genArgs []string, sinkCfg map[string]any) *pipeline {
	t.Helper()
	p := preparePipeline(t)
	start := time.Now()
	args := append([]string{"gen", "--stream", p.stream, "--shards", strconv.Itoa(shards),
		"--expected", p.expected, "--tables-config", p.tablesCfg}, genArgs...)
	if _, stderr, err := RunCLI(t, p.bin, args...); err != nil {
		t.Fatalf("gen: %v\n%s", err, stderr)
	}
	p.records = countRecords(t, p.stream)
	t.Logf("gen %s wrote %d records in %s", strings.Join(genArgs, " "), p.records, time.Since(start).Round(time.Millisecond))
	p.writeConfig(sinkCfg)
	return p
}
