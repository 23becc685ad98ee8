package sink

import (
	"strings"
	"testing"
	"time"
)

func TestTableConfigValidation(t *testing.T) {
	t.Parallel()
	f := false
	cases := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"valid", func(c *Config) {
			c.Include = []string{"shop.*"}
			c.Tables = map[string]TableConfig{"shop.users": {PrimaryKey: []string{"id", "region"},
				Partition:   []PartitionField{{Column: "id", Transform: "bucket", N: 16}, {Column: "region"}},
				MaskColumns: []string{"phone"}, ExcludeColumns: []string{"pw"}, Enabled: &f}}
		}, ""},
		{"bad include", func(c *Config) { c.Include = []string{"shop.["} }, "sink.include[0]"},
		{"bad exclude", func(c *Config) { c.Exclude = []string{""} }, "sink.exclude[0]"},
		{"drop_table", func(c *Config) { c.DropTable = "delete" }, "sink.drop_table"},
		{"dead_letters.type", func(c *Config) { c.DeadLetters.Type = "s3" }, "sink.dead_letters.type"},
		{"dead_letters.table", func(c *Config) { c.DeadLetters.Table = "" }, "sink.dead_letters"},
		{"key", func(c *Config) { c.Tables = map[string]TableConfig{"users": {}} }, "sink.tables[users]"},
		{"columns", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {Columns: []ColumnSpec{{Name: "a"}}}}
		}, "sink.tables[s.t].columns[0]: name and type are required"},
		{"column type", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {Columns: []ColumnSpec{{Name: "a", Type: "WIDGET"}}}}
		}, "sink.tables[s.t].columns[0].type"},
		{"key not a column", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {PrimaryKey: []string{"b"}, Columns: []ColumnSpec{{Name: "a", Type: "INT4"}}}}
		}, "sink.tables[s.t].primary_key[0]"},
		{"partition without key", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {Partition: []PartitionField{{Column: "a"}}}}
		}, "sink.tables[s.t].partition: requires primary_key"},
		{"partition outside key", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {PrimaryKey: []string{"id"}, Partition: []PartitionField{{Column: "day"}}}}
		}, "sink.tables[s.t].partition[0].column"},
		{"partition transform", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {PrimaryKey: []string{"id"}, Partition: []PartitionField{{Column: "id", Transform: "bucket"}}}}
		}, "sink.tables[s.t].partition[0]: n"},
		{"mask key", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {PrimaryKey: []string{"id"}, MaskColumns: []string{"id"}}}
		}, "sink.tables[s.t].mask_columns[0]"},
		{"exclude key", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {PrimaryKey: []string{"id"}, ExcludeColumns: []string{"id"}}}
		}, "sink.tables[s.t].exclude_columns[0]"},
		{"hash without key", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {HashColumns: []string{"email"}}}
		}, "sink.tables[s.t].hash_columns: needs a hash key"},
		{"hash and mask", func(c *Config) {
			c.HashKey = []byte("k")
			c.Tables = map[string]TableConfig{"s.t": {HashColumns: []string{"email"}, MaskColumns: []string{"email"}}}
		}, "sink.tables[s.t].mask_columns[0]: column \"email\" is already in hash_columns"},
		{"timestamp both", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {TimestampTZColumns: []string{"a"}, TimestampColumns: []string{"a"}}}
		}, "sink.tables[s.t].timestamptz_columns[0]"},
		{"flush_rows", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {FlushRows: -1}}
		}, "sink.tables[s.t].flush_rows"},
		{"absent_columns keep", func(c *Config) {
			c.AbsentColumns = AbsentKeep
			c.Tables = map[string]TableConfig{"s.t": {AbsentColumns: AbsentNull}}
		}, ""},
		{"absent_columns", func(c *Config) { c.AbsentColumns = "skip" }, `sink.absent_columns: "skip" is not null or keep`},
		{"table absent_columns", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {AbsentColumns: "NULL"}}
		}, `sink.tables[s.t].absent_columns: "NULL" is not null or keep`},
		{"ordering", func(c *Config) { c.Ordering = "time" }, `sink.ordering: "time" is not arrival or shard`},
		{"table ordering", func(c *Config) {
			c.Ordering = OrderingShard
			c.Tables = map[string]TableConfig{"s.t": {Ordering: "Arrival"}}
		}, `sink.tables[s.t].ordering: "Arrival" is not arrival or shard`},
		{"ordering per table", func(c *Config) {
			c.Tables = map[string]TableConfig{"s.t": {Ordering: OrderingShard}}
		}, ""},
		{"freshness_interval", func(c *Config) { c.FreshnessInterval = -time.Second }, "sink.freshness_interval: must not be negative"},
		{"two entries one target", func(c *Config) {
			c.Tables = map[string]TableConfig{"crm.log": {Namespace: "shop"}, "shop.log": {PrimaryKey: []string{"id"}}}
		}, "sink.tables[shop.log]: sources crm.log and shop.log both write the target table shop.log"},
		{"one target case-folded", func(c *Config) {
			c.Tables = map[string]TableConfig{"a.x": {Name: "Orders"}, "a.y": {Name: "orders"}}
		}, "sink.tables[a.y]: sources a.x and a.y both write the target table a.orders"},
		{"sink.namespace folds two entries", func(c *Config) {
			c.Namespace = "lake"
			c.Tables = map[string]TableConfig{"crm.log": {}, "shop.log": {}}
		}, "both write the target table lake.log"},
		{"entry onto an included table", func(c *Config) {
			c.Include = []string{"shop.log", "crm.*"}
			c.Tables = map[string]TableConfig{"crm.log": {Namespace: "shop"}}
		}, "sink.include[0]: sources crm.log and shop.log both write the target table shop.log"},
		{"entry onto a disabled table", func(c *Config) {
			c.Tables = map[string]TableConfig{"crm.log": {Namespace: "shop"}, "shop.log": {Enabled: &f}}
		}, ""},
		{"entry onto the dead-letter table", func(c *Config) {
			c.Tables = map[string]TableConfig{"crm.log": {Namespace: "dms2iceberg", Name: "dead_letters"}}
		}, "sink.tables[crm.log]: the target table dms2iceberg.dead_letters is the dead-letter table"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Stream = "st"
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestTableSelectionAndTargets(t *testing.T) {
	t.Parallel()
	off := false
	c := DefaultConfig()
	c.Namespace = "lake"
	c.Include = []string{"shop.*", "crm.customers"}
	c.Exclude = []string{"shop.tmp_*"}
	c.Tables = map[string]TableConfig{
		"shop.*":      {Namespace: "shop_ns"},
		"shop.order*": {Name: "orders_tbl"},
		"shop.orders": {Name: "orders_exact"},
		"shop.off":    {Enabled: &off},
	}
	for src, want := range map[string]bool{"shop.a": true, "shop.tmp_1": false, "crm.customers": true, "crm.x": false, "shop.off": false} {
		if got := c.Selected(src); got != want {
			t.Errorf("Selected(%s) = %v, want %v", src, got, want)
		}
	}
	for src, want := range map[string]string{"shop.orders": "lake.orders_exact", "shop.order_items": "lake.orders_tbl",
		"shop.a": "shop_ns.a", "crm.customers": "lake.customers"} {
		id := c.Target(src)
		if got := id[0] + "." + id[1]; got != want {
			t.Errorf("Target(%s) = %s, want %s", src, got, want)
		}
	}
}

// sink.ordering is the default of every table; a table's ordering overrides it.
func TestOrderingSettings(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if c.Ordering != OrderingArrival || c.FreshnessInterval != time.Minute {
		t.Fatalf("defaults: ordering %q freshness %s", c.Ordering, c.FreshnessInterval)
	}
	c.Tables = map[string]TableConfig{"s.shard": {Ordering: OrderingShard}, "s.arr": {Ordering: OrderingArrival}}
	if !c.settingsFor("s.other").arrival || c.settingsFor("s.shard").arrival {
		t.Fatal("ordering arrival: per-table shard not applied")
	}
	c.Ordering = OrderingShard
	if c.settingsFor("s.other").arrival || !c.settingsFor("s.arr").arrival {
		t.Fatal("ordering shard: per-table arrival not applied")
	}
}

// delete_mode is equality, position or dv; position and dv need maintenance, which converts the
// deletes; dv needs format v3, which it implies unless format_version says 2.
func TestDeleteModeValidated(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Stream = "st"
	for _, tc := range []TableConfig{{DeleteMode: "position"}, {DeleteMode: "dv"}, {DeleteMode: "dv", FormatVersion: 3},
		{FormatVersion: 3}, {DeleteMode: "position", FormatVersion: 3}} {
		c.Tables = map[string]TableConfig{"s.t": tc}
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
	for _, bad := range []struct {
		tc    TableConfig
		field string
	}{
		{TableConfig{DeleteMode: "vectors"}, "sink.tables[s.t].delete_mode"},
		{TableConfig{DeleteMode: "dv", FormatVersion: 2}, "sink.tables[s.t].delete_mode"},
		{TableConfig{FormatVersion: 4}, "sink.tables[s.t].format_version"},
		{TableConfig{FormatVersion: 1}, "sink.tables[s.t].format_version"},
	} {
		c.Tables = map[string]TableConfig{"s.t": bad.tc}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Fatalf("%+v: %v, want an error naming %s", bad.tc, err, bad.field)
		}
	}
	if v := (TableConfig{DeleteMode: "dv"}).formatVersion(); v != 3 {
		t.Fatalf("delete_mode dv creates format v%d, want 3", v)
	}
	if v := (TableConfig{DeleteMode: "position"}).formatVersion(); v != 0 {
		t.Fatalf("delete_mode position creates format v%d, want the default (0: tableProperties' 2)", v)
	}
	for _, mode := range []string{"position", "dv"} {
		c.Tables = map[string]TableConfig{"s.t": {DeleteMode: mode}}
		c.Maintenance.Enabled = false
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "maintenance") {
			t.Fatalf("%s without maintenance: %v, want an error", mode, err)
		}
		c.Maintenance.Enabled = true
	}
}

// sink.delete_mode and sink.format_version apply to every table that does not set its own, and
// are validated like a table's.
func TestSinkDeleteModeIsEveryTablesDefault(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Stream = "st"
	c.DeleteMode = "dv"
	c.Tables = map[string]TableConfig{"s.own": {DeleteMode: "equality"}, "s.v2": {FormatVersion: 2}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src     string
		mode    string
		version int
	}{
		{"s.unconfigured", "dv", 3}, // no entry: the sink's mode, and dv creates v3
		{"s.own", "equality", 0},    // its own mode wins
		{"s.v2", "dv", 2},           // its own version wins: the conversion writes Parquet there
	} {
		st := c.settingsFor(tc.src)
		if st.deleteMode != tc.mode || st.formatVersion != tc.version {
			t.Errorf("%s: delete mode %q, format version %d; want %q, %d", tc.src, st.deleteMode, st.formatVersion, tc.mode, tc.version)
		}
	}
	for _, bad := range []struct {
		mod   func(*Config)
		field string
	}{
		{func(c *Config) { c.DeleteMode = "vectors" }, "sink.delete_mode"},
		{func(c *Config) { c.FormatVersion = 4 }, "sink.format_version"},
		{func(c *Config) { c.DeleteMode, c.FormatVersion = "dv", 2 }, "sink.delete_mode"},
		{func(c *Config) { c.DeleteMode, c.Maintenance.Enabled = "position", false }, "sink.delete_mode: position needs sink.maintenance.enabled"},
	} {
		c := DefaultConfig()
		c.Stream = "st"
		bad.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, bad.field)
		}
	}
}
