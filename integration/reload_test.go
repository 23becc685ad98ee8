//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// TestReload (issue 16): gen writes the generated workload to 4 shards in DMS's default layout
// (load rows by primary key over every shard, CDC by table, control records by task) with a
// reload of customers in the middle of the CDC phase: an outage deletes 10 rows and updates 10
// at the source without records, then a new create-table, a load of the table's current rows
// (between CDC of the other tables) and the table's CDC after it. Two service processes consume
// it with no per-table configuration.
//
//   - replace (the default sink.reload): every table equals the expected state, and customers
//     has exactly one snapshot marked dms2iceberg.reload=replace.
//   - upsert (sink.reload: upsert, the behaviour before reloads were handled): verify must find
//     customers differing by the rows deleted during the outage (the negative control).
func TestReload(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	s := newOrderingStream(t, bin, orderingCase{name: "reload", layout: "dms-default", lagShard: -1, lateShard: -1, reload: workload.Customers, processes: 1})
	t.Run("replace", func(t *testing.T) {
		// A short quiet period: the replace must still come from the table's first CDC change
		// (exactly one replacing snapshot either way).
		r := s.newRun(t, "replace", map[string]any{"reload_quiet_period": "20s"})
		ok, report := r.consume(t)
		if !ok {
			t.Fatalf("reload with sink.reload replace: the tables differ from the expected state:\n%s\n%s", report, summarizeDiffs(report))
		}
		t.Logf("verify:\n%s", report)
		ctx := context.Background()
		cat, err := sink.OpenCatalog(ctx, sink.DefaultCatalogConfig(r.dataDir))
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := cat.LoadTable(ctx, table.Identifier{workload.Schema, workload.Customers})
		if err != nil {
			t.Fatal(err)
		}
		var replaces []string
		for _, snap := range tbl.Metadata().Snapshots() {
			if snap.Summary != nil && snap.Summary.Properties[tableprop.SummaryReload] == tableprop.SummaryReloadReplace {
				p := snap.Summary.Properties
				replaces = append(replaces, p[tableprop.SummaryReloadRows]+" load rows, "+p[tableprop.SummaryReloadRemovedFiles]+" files removed")
			}
		}
		if len(replaces) != 1 {
			t.Fatalf("customers has %d replacing snapshots (%v), want exactly 1", len(replaces), replaces)
		}
		for _, k := range tableprop.ReloadProps {
			if v, ok := tbl.Properties()[k]; ok {
				t.Fatalf("customers still has %s=%s: the reload did not end", k, v)
			}
		}
		t.Logf("MEASURED: the replacing snapshot of customers: %s", replaces[0])
	})
	t.Run("upsert", func(t *testing.T) {
		r := s.newRun(t, "upsert", map[string]any{"reload": "upsert"})
		ok, report := r.consume(t)
		if ok {
			t.Fatalf("reload with sink.reload upsert: verify found every table equal, so the replace check proves nothing:\n%s", report)
		}
		diffs := summarizeDiffs(report)
		if !strings.Contains(diffs, workload.Customers) {
			t.Fatalf("reload with sink.reload upsert: customers does not differ: %s\n%s", diffs, report)
		}
		t.Logf("NEGATIVE CONTROL (sink.reload upsert): %s\nverify:\n%s", diffs, report)
	})
}
