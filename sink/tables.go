package sink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// Values of Config.DropTable.
const (
	DropTableIgnore = "ignore"
	DropTableMark   = "mark"
)

// Values of DeadLetterConfig.Type.
const (
	DeadLettersTable = "table"
	DeadLettersFile  = "file"
)

// Values of Config.AbsentColumns and TableConfig.AbsentColumns ("" means the default: the sink's
// value, null for the sink).
const (
	AbsentNull = "null"
	AbsentKeep = "keep"
)

// Values of Config.Ordering and TableConfig.Ordering ("" means the default: the sink's value,
// arrival for the sink).
const (
	OrderingArrival = "arrival"
	OrderingShard   = "shard"
)

func validOrdering(v string) error {
	switch v {
	case "", OrderingArrival, OrderingShard:
		return nil
	}
	return fmt.Errorf("%q is not arrival or shard", v)
}

func validAbsent(v string) error {
	switch v {
	case "", AbsentNull, AbsentKeep:
		return nil
	}
	return fmt.Errorf("%q is not null or keep", v)
}

// maskText replaces the values of masked columns.
const maskText = "****"

// validateTables checks include/exclude, drop_table, dead_letters and every sink.tables entry.
func (c Config) validateTables() error {
	for i, p := range c.Include {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("sink.include[%d]: %q is not a valid glob", i, p)
		}
	}
	for i, p := range c.Exclude {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("sink.exclude[%d]: %q is not a valid glob", i, p)
		}
	}
	switch c.DropTable {
	case DropTableIgnore, DropTableMark:
	default:
		return fmt.Errorf("sink.drop_table: %q is not ignore or mark", c.DropTable)
	}
	switch c.DeadLetters.Type {
	case DeadLettersTable:
		if c.DeadLetters.Namespace == "" || c.DeadLetters.Table == "" {
			return fmt.Errorf("sink.dead_letters: namespace and table are required with type table")
		}
		if c.DeadLetters.QueueLength <= 0 {
			return fmt.Errorf("sink.dead_letters.queue_length: must be positive, got %d", c.DeadLetters.QueueLength)
		}
	case DeadLettersFile:
	default:
		return fmt.Errorf("sink.dead_letters.type: %q is not table or file", c.DeadLetters.Type)
	}
	names := make([]string, 0, len(c.Tables))
	for name := range c.Tables {
		names = append(names, name)
	}
	sort.Strings(names) // report the first error deterministically
	for _, name := range names {
		if err := c.Tables[name].validate(name, c.HashKey); err != nil {
			return err
		}
	}
	return c.validateTargets()
}

// validDeletes checks a delete mode and format version, of the sink or of one table (field
// names the setting in errors).
func validDeletes(mode string, version int, field func(string) string) error {
	switch {
	case !maintenance.ValidDeleteMode(mode):
		return fmt.Errorf("%s: must be %q, %q or %q, got %q", field("delete_mode"), maintenance.DeleteModeEquality,
			maintenance.DeleteModePosition, maintenance.DeleteModeDV, mode)
	case version != 0 && version != 2 && version != 3:
		return fmt.Errorf("%s: must be 2 or 3, got %d", field("format_version"), version)
	case mode == maintenance.DeleteModeDV && version == 2:
		return fmt.Errorf("%s: dv needs format_version 3 (deletion vectors are a format v3 feature)", field("delete_mode"))
	}
	return nil
}

// formatVersion is the format version the sink creates the table with: format_version, else 3 for
// delete_mode dv; 0 leaves tableProperties' (2).
func (t TableConfig) formatVersion() int {
	if t.FormatVersion == 0 && t.DeleteMode == maintenance.DeleteModeDV {
		return 3
	}
	return t.FormatVersion
}

func (t TableConfig) validate(name string, hashKey []byte) error {
	field := func(f string) string { return fmt.Sprintf("sink.tables[%s].%s", name, f) }
	if name == "" || !strings.Contains(name, ".") {
		return fmt.Errorf("sink.tables[%s]: the key must be \"schema.table\" or a glob of such names", name)
	}
	if _, err := path.Match(name, ""); err != nil {
		return fmt.Errorf("sink.tables[%s]: not a valid glob: %v", name, err)
	}
	cols, err := t.validColumns(field)
	if err != nil {
		return err
	}
	key, err := t.validKey(field, cols)
	if err != nil {
		return err
	}
	part, err := t.validPartition(field, key)
	if err != nil {
		return err
	}
	if err := t.validColumnLists(field, key, part, hashKey); err != nil {
		return err
	}
	return t.validModes(field)
}

// validColumns checks the configured columns and returns their names.
func (t TableConfig) validColumns(field func(string) string) (map[string]bool, error) {
	cols := map[string]bool{}
	var defs []change.ColumnDef
	for i, col := range t.Columns {
		if col.Name == "" || col.Type == "" {
			return nil, fmt.Errorf("%s[%d]: name and type are required", field("columns"), i)
		}
		if cols[col.Name] {
			return nil, fmt.Errorf("%s[%d]: column %q declared twice", field("columns"), i, col.Name)
		}
		cols[col.Name] = true
		defs = append(defs, col.def())
	}
	vocab := dms.DetectVocabulary(defs)
	for i, d := range defs {
		if _, err := dms.IcebergType(d, vocab, dms.TypeOptions{}); err != nil {
			return nil, fmt.Errorf("%s[%d].type: %v", field("columns"), i, err)
		}
	}
	return cols, nil
}

// validKey checks primary_key against the configured columns cols and returns its columns.
func (t TableConfig) validKey(field func(string) string, cols map[string]bool) (map[string]bool, error) {
	key := map[string]bool{}
	for i, k := range t.PrimaryKey {
		switch {
		case k == "":
			return nil, fmt.Errorf("%s[%d]: empty column name", field("primary_key"), i)
		case key[k]:
			return nil, fmt.Errorf("%s[%d]: column %q listed twice", field("primary_key"), i, k)
		case len(cols) > 0 && !cols[k]:
			return nil, fmt.Errorf("%s[%d]: %q is not one of the configured columns", field("primary_key"), i, k)
		}
		key[k] = true
	}
	return key, nil
}

// validPartition checks the partition fields against the key columns and returns their columns.
func (t TableConfig) validPartition(field func(string) string, key map[string]bool) (map[string]bool, error) {
	part := map[string]bool{}
	if len(t.Partition) > 0 && len(t.PrimaryKey) == 0 {
		return nil, fmt.Errorf("%s: requires primary_key: equality deletes are partition-scoped, so partition columns must be key columns", field("partition"))
	}
	for i, p := range t.Partition {
		f := fmt.Sprintf("%s[%d]", field("partition"), i)
		if !key[p.Column] {
			return nil, fmt.Errorf("%s.column: %q is not a primary_key column %v (equality deletes are partition-scoped: a key whose partition changed could not be deleted)", f, p.Column, t.PrimaryKey)
		}
		if _, err := p.transform(); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		part[p.Column] = true
	}
	return part, nil
}

// validColumnLists checks the column lists (exclude, hash, mask, timestamp types) against the
// key and partition columns and each other.
func (t TableConfig) validColumnLists(field func(string) string, key, part map[string]bool, hashKey []byte) error {
	seen := map[string]string{}
	lists := []struct {
		name string
		cols []string
	}{{"exclude_columns", t.ExcludeColumns}, {"hash_columns", t.HashColumns}, {"mask_columns", t.MaskColumns}}
	for _, l := range lists {
		for i, c := range l.cols {
			f := fmt.Sprintf("%s[%d]", field(l.name), i)
			switch {
			case c == "":
				return fmt.Errorf("%s: empty column name", f)
			case seen[c] != "":
				return fmt.Errorf("%s: column %q is already in %s", f, c, seen[c])
			case l.name == "exclude_columns" && key[c]:
				return fmt.Errorf("%s: %q is a primary_key column and cannot be excluded", f, c)
			case l.name == "mask_columns" && key[c]:
				return fmt.Errorf("%s: %q is a primary_key column; masking it would merge rows (use hash_columns)", f, c)
			case l.name != "hash_columns" && part[c]:
				return fmt.Errorf("%s: %q is a partition column", f, c)
			}
			seen[c] = l.name
		}
	}
	if len(t.HashColumns) > 0 && len(hashKey) == 0 {
		return fmt.Errorf("%s: needs a hash key: set DMS2ICEBERG_HASH_KEY (never in the file)", field("hash_columns"))
	}
	for i, c := range t.TimestampTZColumns {
		if slices.Contains(t.TimestampColumns, c) {
			return fmt.Errorf("%s[%d]: %q is also in timestamp_columns", field("timestamptz_columns"), i, c)
		}
	}
	return nil
}

// validModes checks the table's modes and flush thresholds.
func (t TableConfig) validModes(field func(string) string) error {
	if err := validAbsent(t.AbsentColumns); err != nil {
		return fmt.Errorf("%s: %w", field("absent_columns"), err)
	}
	if err := validOrdering(t.Ordering); err != nil {
		return fmt.Errorf("%s: %w", field("ordering"), err)
	}
	if err := validDeletes(t.DeleteMode, t.FormatVersion, field); err != nil {
		return err
	}
	if err := validIdentity(t.KeylessIdentity); err != nil {
		return fmt.Errorf("%s: %w", field("keyless_identity"), err)
	}
	if t.FlushInterval < 0 {
		return fmt.Errorf("%s: must not be negative, got %s", field("flush_interval"), t.FlushInterval)
	}
	if t.FlushRows < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", field("flush_rows"), t.FlushRows)
	}
	if t.FlushBytes < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", field("flush_bytes"), t.FlushBytes)
	}
	return nil
}

func (c ColumnSpec) def() change.ColumnDef {
	return change.ColumnDef{Name: c.Name, Type: c.Type, Length: c.Length, Precision: c.Precision, Scale: c.Scale,
		Nullable: c.Nullable == nil || *c.Nullable}
}

func (p PartitionField) transform() (iceberg.Transform, error) {
	needN := false
	var t iceberg.Transform
	switch strings.ToLower(p.Transform) {
	case "", "identity":
		t = iceberg.IdentityTransform{}
	case "bucket":
		needN, t = true, iceberg.BucketTransform{NumBuckets: p.N}
	case "truncate":
		needN, t = true, iceberg.TruncateTransform{Width: p.N}
	case "year":
		t = iceberg.YearTransform{}
	case "month":
		t = iceberg.MonthTransform{}
	case "day":
		t = iceberg.DayTransform{}
	case "hour":
		t = iceberg.HourTransform{}
	default:
		return nil, fmt.Errorf("transform: %q is not identity, bucket, truncate, year, month, day or hour", p.Transform)
	}
	if needN && p.N <= 0 {
		return nil, fmt.Errorf("n: %s needs a positive n, got %d", p.Transform, p.N)
	}
	if !needN && p.N != 0 {
		return nil, fmt.Errorf("n: only bucket and truncate take n")
	}
	return t, nil
}

// Selected reports whether the source table "schema.table" is replicated: it matches Include
// (or Include is empty), matches no Exclude glob, and its table configuration is not disabled.
func (c Config) Selected(src string) bool {
	if len(c.Include) > 0 && !matchAny(c.Include, src) {
		return false
	}
	if matchAny(c.Exclude, src) {
		return false
	}
	tc, _ := c.TableConfigFor(src)
	return tc.Enabled == nil || *tc.Enabled
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// TableConfigFor returns the configuration of a source table: the entry keyed by its exact
// name, else the one of the longest matching glob (ties: the lexically first). The key that
// matched is returned too ("" when none).
func (c Config) TableConfigFor(src string) (TableConfig, string) {
	if tc, ok := c.Tables[src]; ok {
		return tc, src
	}
	best := ""
	for k := range c.Tables {
		if ok, _ := path.Match(k, src); !ok {
			continue
		}
		if best == "" || len(k) > len(best) || (len(k) == len(best) && k < best) {
			best = k
		}
	}
	if best == "" {
		return TableConfig{}, ""
	}
	return c.Tables[best], best
}

// Target returns the Iceberg table a source table "schema.table" is written to: the table's
// namespace and name settings, else Config.Namespace, else the source schema and table name.
func (c Config) Target(src string) table.Identifier {
	schema, name, _ := strings.Cut(src, ".")
	tc, _ := c.TableConfigFor(src)
	ns := schema
	if c.Namespace != "" {
		ns = c.Namespace
	}
	if tc.Namespace != "" {
		ns = tc.Namespace
	}
	if tc.Name != "" {
		name = tc.Name
	}
	return table.Identifier{ns, name}
}

// settings is the resolved configuration of one table writer. It holds no configuration type:
// settingsFor resolves the sink's and the table's entries into it.
type settings struct {
	// primaryKey is the configured key (sink.tables primary_key; nil: none), columns the
	// configured columns; formatVersion is what the table is created with (0: tableProperties'),
	// deleteMode its delete mode (for its maintainer).
	primaryKey    []string
	columns       []change.ColumnDef
	formatVersion int
	deleteMode    string
	// excludeColumns and maskColumns are the lists of exclude and mask (keyRule names the entry).
	excludeColumns, maskColumns []string
	// specOf builds the configured partition spec against a new table's schema (nil:
	// unpartitioned; partitionSpec).
	specOf func(schema *iceberg.Schema) (*iceberg.PartitionSpec, error)
	// tcKey is the sink.tables key the table's entry came from ("" when none matched), for
	// error messages.
	tcKey         string
	flushInterval time.Duration
	flushRows     int
	flushBytes    int64
	timestampTZ   bool
	icebergTime   bool
	exclude, hash map[string]bool
	mask          map[string]bool
	tsTZ, ts      map[string]bool
	hashKey       []byte
	// keepAbsent: a column an update image leaves out keeps its previous value (absent_columns
	// keep) instead of becoming NULL.
	keepAbsent bool
	// arrival: the ordering guard is on (ordering arrival); freshness is sink.freshness_interval.
	arrival   bool
	freshness time.Duration
	// identity: a keyless table's inserts carry their DMS record identity (sink.keyless_identity
	// auto, identity.go).
	identity bool
	// reloadReplace: a DMS reload replaces the table's content (sink.reload replace, reload.go);
	// reloadQuiet is sink.reload_quiet_period.
	reloadReplace bool
	reloadQuiet   time.Duration
}

func (c Config) settingsFor(src string) *settings {
	tc, key := c.TableConfigFor(src)
	// The sink's delete mode and format version where the table leaves them unset: the writer
	// creates the table with them, and its maintainer takes the mode from here.
	if tc.DeleteMode == "" {
		tc.DeleteMode = c.DeleteMode
	}
	if tc.FormatVersion == 0 {
		tc.FormatVersion = c.FormatVersion
	}
	var columns []change.ColumnDef
	for _, c := range tc.Columns {
		columns = append(columns, c.def())
	}
	st := &settings{primaryKey: tc.PrimaryKey, columns: columns, formatVersion: tc.formatVersion(), deleteMode: tc.DeleteMode,
		excludeColumns: tc.ExcludeColumns, maskColumns: tc.MaskColumns, specOf: partitionSpecOf(tc.Partition), tcKey: key, flushInterval: c.FlushInterval, flushRows: c.FlushRows, flushBytes: c.FlushBytes,
		timestampTZ: c.TimestampTZ, icebergTime: c.TimeType == "time", exclude: set(tc.ExcludeColumns), hash: set(tc.HashColumns), mask: set(tc.MaskColumns),
		tsTZ: set(tc.TimestampTZColumns), ts: set(tc.TimestampColumns), hashKey: c.HashKey,
		keepAbsent: c.AbsentColumns == AbsentKeep, arrival: c.Ordering != OrderingShard, freshness: c.FreshnessInterval,
		identity: c.KeylessIdentity != KeylessIdentityOff, reloadReplace: c.Reload != ReloadUpsert, reloadQuiet: c.ReloadQuietPeriod}
	if tc.Ordering != "" {
		st.arrival = tc.Ordering == OrderingArrival
	}
	if tc.KeylessIdentity != "" {
		st.identity = tc.KeylessIdentity == KeylessIdentityAuto
	}
	if tc.FlushInterval > 0 {
		st.flushInterval = tc.FlushInterval
	}
	if tc.FlushRows > 0 {
		st.flushRows = tc.FlushRows
	}
	if tc.FlushBytes > 0 {
		st.flushBytes = tc.FlushBytes
	}
	if tc.TimestampTZ != nil {
		st.timestampTZ = *tc.TimestampTZ
	}
	if tc.AbsentColumns != "" {
		st.keepAbsent = tc.AbsentColumns == AbsentKeep
	}
	return st
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// typeOf maps a table-def column to the Iceberg type this table stores it as: string for
// hashed and masked columns; DATETIME as timestamp or timestamptz per the table's and the
// column's setting.
func (st *settings) typeOf(c change.ColumnDef, vocab dms.Vocabulary) (iceberg.Type, error) {
	if st.hash[c.Name] || st.mask[c.Name] {
		return iceberg.PrimitiveTypes.String, nil
	}
	tz := st.timestampTZ
	if st.tsTZ[c.Name] {
		tz = true
	}
	if st.ts[c.Name] {
		tz = false
	}
	return dms.IcebergType(c, vocab, dms.TypeOptions{TimestampTZ: tz, IcebergTime: st.icebergTime})
}

// inferType picks the type of a column first seen in data.
func (st *settings) inferType(c change.Column) iceberg.Type {
	if st.hash[c.Name] || st.mask[c.Name] {
		return iceberg.PrimitiveTypes.String
	}
	return dms.InferType(c.Value)
}

// desired maps a table-def to the columns this table wants, leaving out excluded columns. Key
// columns (the configured key, else the table-def's) get dms.KeyType: a timestamp key with more
// than 6 fractional digits is stored as text.
func (st *settings) desired(def *change.TableDef) []dms.DesiredColumn {
	vocab := dms.DetectVocabulary(def.Columns)
	key := st.key(def.PrimaryKey)
	out := make([]dms.DesiredColumn, 0, len(def.Columns))
	for _, c := range def.Columns {
		if st.exclude[c.Name] {
			continue
		}
		t, err := st.typeOf(c, vocab)
		if err != nil {
			t = iceberg.PrimitiveTypes.String // unknown DMS type: keep the text
		}
		var doc string
		if slices.Contains(key, c.Name) {
			t, doc = dms.KeyType(c, t)
		}
		out = append(out, dms.DesiredColumn{Name: c.Name, Type: t, Doc: doc})
	}
	return out
}

// transformed reports whether a column's values are rewritten (hash or mask) or dropped.
func (st *settings) transformed() bool {
	return len(st.exclude) > 0 || len(st.hash) > 0 || len(st.mask) > 0
}

// value applies the column's hashing or masking; keep is false for excluded columns.
func (st *settings) value(name string, v change.Value) (change.Value, bool) {
	switch {
	case st.exclude[name]:
		return v, false
	case v.Kind == change.KindNull:
		return v, true
	case st.hash[name]:
		m := hmac.New(sha256.New, st.hashKey)
		m.Write([]byte(v.Text))
		return change.Value{Kind: change.KindString, Text: hex.EncodeToString(m.Sum(nil))}, true
	case st.mask[name]:
		return change.Value{Kind: change.KindString, Text: maskText}, true
	}
	return v, true
}

// partitionSpec builds the configured spec against a new table's schema; nil when unpartitioned.
func (st *settings) partitionSpec(schema *iceberg.Schema) (*iceberg.PartitionSpec, error) {
	if st.specOf == nil {
		return nil, nil
	}
	return st.specOf(schema)
}

// partitionSpecOf returns what builds the spec of parts, the configured partition fields,
// against a new table's schema (settings.specOf).
func partitionSpecOf(parts []PartitionField) func(schema *iceberg.Schema) (*iceberg.PartitionSpec, error) {
	return func(schema *iceberg.Schema) (*iceberg.PartitionSpec, error) { return buildSpec(parts, schema) }
}

// buildSpec builds the spec of parts against schema; nil without parts.
func buildSpec(parts []PartitionField, schema *iceberg.Schema) (*iceberg.PartitionSpec, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	opts := make([]iceberg.PartitionOption, 0, len(parts))
	for _, p := range parts {
		t, err := p.transform()
		if err != nil {
			return nil, err
		}
		name := p.Column
		if _, ok := t.(iceberg.IdentityTransform); !ok {
			name += "_" + strings.ToLower(strings.SplitN(t.String(), "[", 2)[0])
		}
		opts = append(opts, iceberg.AddPartitionFieldByName(p.Column, name, t, schema, nil))
	}
	spec, err := iceberg.NewPartitionSpecOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("partition spec: %w", err)
	}
	return &spec, nil
}

// ValidateTables checks only include/exclude, drop_table, dead_letters and sink.tables (errors
// name the field), for configuration that arrives outside the file.
func (c Config) ValidateTables() error { return c.validateTables() }
