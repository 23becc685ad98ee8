package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

const reloadUsage = `usage: dms2iceberg reload --table SCHEMA.TABLE [--task-arn ARN]

dms2iceberg does not reload a table by itself: only DMS can send the table's rows again, and a
reload without them would empty the target table. This command prints how to make DMS reload
the table, and exits with status 1 without touching anything.

What the service does with a DMS reload under sink.reload replace (opt-in, exact with one
worker; the default upsert only upserts the load rows; docs/design.md §7 "Reload"): DMS sends a create-table control record, every row of the table as a load
record, then the changes it cached meanwhile. The service upserts the load rows as they come
(readers keep every row the table had, reloaded rows show their new values); at the table's
first CDC change after them, or after sink.reload_quiet_period without one, one snapshot
(summary dms2iceberg.reload=replace) removes every row the table held before the reload, so
rows deleted at the source while the table was out of sync disappear. 'dms2iceberg status'
and the metric dms2iceberg_table_reload_rows show a reload in progress.

flags:
`

// runReload prints how to reload a table through DMS and refuses to do anything else.
func runReload(_ context.Context, args []string) error {
	fs := newFlags("reload", reloadUsage)
	tbl := fs.String("table", "", "the source table to reload, as SCHEMA.TABLE (required)")
	arn := fs.String("task-arn", "", "the ARN of the DMS replication task that replicates the table (printed into the command)")
	if err := fs.parse(args); err != nil {
		return err
	}
	schema, name, ok := strings.Cut(*tbl, ".")
	if !ok || schema == "" || name == "" {
		return usageErrorf("--table: want SCHEMA.TABLE, got %q", *tbl)
	}
	printReloadGuide(os.Stdout, schema, name, *arn)
	return errExplained
}

// printReloadGuide writes the DMS steps that reload schema.name.
func printReloadGuide(w io.Writer, schema, name, arn string) {
	if arn == "" {
		arn = "<replication-task-arn>"
	}
	fmt.Fprintf(w, `dms2iceberg reload: not done here. dms2iceberg cannot reload %[1]s.%[2]s by itself: only DMS
can send its rows again. Reload it from DMS; with sink.reload replace the running service replaces
the target table's content when the reload ends:

  AWS CLI:
    aws dms reload-tables --replication-task-arn %[3]s \
      --tables-to-reload SchemaName=%[1]s,TableName=%[2]s --reload-option data-reload

  DMS console: Database migration tasks > the task > Table statistics > select %[1]s.%[2]s >
    Reload table data.

  A task restarted with full load ("Restart" of a full-load-and-CDC task) reloads every table
  the same way.

Needs, on the service: sink.reload replace (opt-in; exact with one worker only) and
sink.ordering arrival (the default) for the target table; the DMS Kinesis endpoint must send control records (create-table), which it
does by default. Watch it with 'dms2iceberg status' (a "reload of ... in progress" line) or the
metrics dms2iceberg_table_reload_rows and dms2iceberg_table_reload_started_timestamp_seconds.
`, schema, name, arn)
}
