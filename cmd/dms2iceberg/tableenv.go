package main

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/sink"
)

// Environment variables that override the table selection and per-table settings of the file
// (for containers, where one image serves several tasks):
//
//	DMS2ICEBERG_INCLUDE      comma-separated "schema.table" globs: replaces sink.include
//	DMS2ICEBERG_EXCLUDE      comma-separated globs: replaces sink.exclude
//	DMS2ICEBERG_TABLES       YAML (or JSON) mapping of "schema.table" (or glob) to table
//	                         settings, merged over sink.tables entry by entry
//	DMS2ICEBERG_DROP_TABLE   ignore or mark: replaces sink.drop_table
//	DMS2ICEBERG_DEAD_LETTERS table or file: replaces sink.dead_letters.type
//	DMS2ICEBERG_HASH_KEY     secret key of hash_columns (only ever from the environment)
const (
	envInclude     = "DMS2ICEBERG_INCLUDE"
	envExclude     = "DMS2ICEBERG_EXCLUDE"
	envTables      = "DMS2ICEBERG_TABLES"
	envDropTable   = "DMS2ICEBERG_DROP_TABLE"
	envDeadLetters = "DMS2ICEBERG_DEAD_LETTERS"
	envHashKey     = "DMS2ICEBERG_HASH_KEY"
)

// applyTableEnv applies the variables above to c; getenv is os.Getenv outside tests. Errors name
// the variable; the merged configuration is validated with the rest (sink.Config.Validate).
func applyTableEnv(c *sink.Config, getenv func(string) string) error {
	list := func(v string) []string {
		var out []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	if v := getenv(envInclude); v != "" {
		c.Include = list(v)
	}
	if v := getenv(envExclude); v != "" {
		c.Exclude = list(v)
	}
	if v := getenv(envTables); v != "" {
		var tables map[string]sink.TableConfig
		dec := yaml.NewDecoder(strings.NewReader(v))
		dec.KnownFields(true)
		if err := dec.Decode(&tables); err != nil {
			return fmt.Errorf("%s: %w", envTables, err)
		}
		if c.Tables == nil {
			c.Tables = map[string]sink.TableConfig{}
		}
		keys := make([]string, 0, len(tables))
		for k := range tables {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			t := tables[k]
			if err := (sink.Config{Tables: map[string]sink.TableConfig{k: t}, HashKey: []byte(getenv(envHashKey)),
				DropTable: sink.DropTableIgnore, DeadLetters: sink.DeadLetterConfig{Type: sink.DeadLettersFile}}).ValidateTables(); err != nil {
				return fmt.Errorf("%s: %w", envTables, err)
			}
			c.Tables[k] = t
		}
	}
	if v := getenv(envDropTable); v != "" {
		c.DropTable = v
	}
	if v := getenv(envDeadLetters); v != "" {
		c.DeadLetters.Type = v
	}
	if v := getenv(envHashKey); v != "" {
		c.HashKey = []byte(v)
	}
	return nil
}
