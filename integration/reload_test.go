//go:build integration

package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/fault"
	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// TestReload: gen writes the generated workload to 4 shards in DMS's default layout
// (load rows by primary key over every shard, CDC by table, control records by task) with a
// reload of customers in the middle of the CDC phase: an outage deletes 10 rows and updates 10
// at the source without records, then a new create-table, a load of the table's current rows
// (between CDC of the other tables) and the table's CDC after it. No per-table configuration.
//
//   - replace (sink.reload: replace, the default), one process: every table equals the expected
//     state, customers has exactly one snapshot marked dms2iceberg.reload=replace and no reload
//     properties left.
//   - replace with two processes, through the REST catalog server: the create-table (on the task's
//     shard) and the table's CDC (on its own shard) are read by different workers; equal too,
//     with one replacing snapshot
//     (before changes built before the create-table were superseded, 3 rows deleted at the
//     source stayed and one value was stale; before the build-time reorder was dropped, the two
//     processes deadlocked on this stream).
//   - upsert (sink.reload: upsert, the behaviour before reloads were handled): verify must find
//     customers differing by the rows deleted during the outage (the negative control).
func TestReload(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	s := newOrderingStream(t, bin, orderingCase{name: "reload", layout: "dms-default", lagShard: -1, lateShard: -1, reload: workload.Customers, processes: 1})
	t.Run("replace", func(t *testing.T) {
		// A short quiet period: the replace must still come from the table's first CDC change
		// (exactly one replacing snapshot either way).
		r := s.newRun(t, "replace", map[string]any{"reload": "replace", "reload_quiet_period": "20s"})
		ok, report := r.consume(t)
		if !ok {
			t.Fatalf("reload with sink.reload replace: the tables differ from the expected state:\n%s\n%s", report, summarizeDiffs(report))
		}
		t.Logf("verify:\n%s", report)
		replaces := replaceSnapshots(t, r)
		if len(replaces) != 1 {
			t.Fatalf("customers has %d replacing snapshots (%v), want exactly 1", len(replaces), replaces)
		}
		tbl := customersTable(t, r)
		for _, k := range tableprop.ReloadProps {
			if v, ok := tbl.Properties()[k]; ok {
				t.Fatalf("customers still has %s=%s: the reload did not end", k, v)
			}
		}
		t.Logf("MEASURED: the replacing snapshot of customers: %s", replaces[0])
	})
	t.Run("replace-2-processes", func(t *testing.T) {
		// The default: several workers. The create-table (on the task's shard) and customers'
		// CDC (on its own shard) are read by different processes, so a change built before the
		// create-table can reach the table after the reload started: it is superseded (its
		// effect is in the load rows), and the load rows of the other process go to the
		// reload branch too.
		// Through Iceberg's REST catalog server: it checks a commit's requirements only (not the
		// metadata location, as the SQL catalog does), so the publish's ref requirements and
		// the reload's fence are what keep the two processes apart.
		uri := RequireCatalogServer(t, EnvRESTURI)
		s2 := newOrderingStream(t, bin, orderingCase{name: "reload-2", layout: "dms-default", lagShard: -1, lateShard: -1, reload: workload.Customers, processes: 2})
		ns := uniqueNamespace("reload")
		r := s2.newRun(t, "replace-2", map[string]any{"reload": "replace", "reload_quiet_period": "20s",
			"catalog": map[string]any{"type": "rest", "uri": uri}, "namespace": ns})
		r.catalog, r.namespace = &sink.CatalogConfig{Type: "rest", Name: "dms2iceberg", URI: uri}, ns
		ok, report := r.consume(t)
		if !ok {
			t.Fatalf("reload read by two processes: the tables differ from the expected state:\n%s\n%s", report, summarizeDiffs(report))
		}
		if n := len(replaceSnapshots(t, r)); n != 1 {
			t.Fatalf("customers has %d replacing snapshots, want exactly 1", n)
		}
		superseded := 0
		for _, snap := range customersTable(t, r).Metadata().Snapshots() {
			if snap.Summary != nil {
				n, _ := strconv.Atoi(snap.Summary.Properties[tableprop.SummarySuperseded])
				superseded += n
			}
		}
		t.Logf("MEASURED: two processes, customers: %d changes built before the create-table superseded (written ones counted in the snapshot summaries)\nverify:\n%s", superseded, report)
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

// TestReloadCrashes: the stream of TestReload consumed by one process that is killed
// at each fault point inside the reload in turn (pkg/fault ReloadPoints: after its start is
// committed, with its replace staged, after its replace committed; each before anything is
// acknowledged) and restarted from its checkpoint. Every table ends equal to the expected state,
// with exactly one replacing snapshot.
func TestReloadCrashes(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	s := newOrderingStream(t, bin, orderingCase{name: "reload-crash", layout: "dms-default", lagShard: -1, lateShard: -1, reload: workload.Customers, processes: 1})
	r := s.newRun(t, "crash", map[string]any{"reload": "replace"})
	for _, p := range fault.ReloadPoints {
		svc := startCommand(t, bin, []string{"run", "--config", r.config},
			[]string{"DMS2ICEBERG_WORKER_ID=w1", fault.EnvVar + "=" + p + "@1"}, "", ordLogTail)
		select {
		case <-svc.Done():
		case <-time.After(3 * time.Minute):
			t.Fatalf("fault point %s was not hit in 3 minutes", p)
		}
		if !strings.Contains(svc.Log(), "fault point "+p+": killing the process") {
			t.Fatalf("the service armed with %s exited without being killed there:\n%s", p, tailFile(svc.LogPath, 8<<10))
		}
		t.Logf("killed at %s", p)
	}
	ok, report := r.consume(t)
	if !ok {
		t.Fatalf("after a crash at every fault point of the reload, the tables differ from the expected state:\n%s\n%s", report, summarizeDiffs(report))
	}
	if n := len(replaceSnapshots(t, r)); n != 1 {
		t.Fatalf("customers has %d replacing snapshots, want exactly 1", n)
	}
	t.Logf("verify:\n%s", report)
}

// customersTable loads the run's customers table.
func customersTable(t *testing.T, r *ordRun) *table.Table {
	t.Helper()
	ctx := context.Background()
	cfg, ns := sink.DefaultCatalogConfig(r.dataDir), workload.Schema
	if r.catalog != nil {
		cfg, ns = *r.catalog, r.namespace
	}
	cat, err := sink.OpenCatalog(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{ns, workload.Customers})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// replaceSnapshots describes the snapshots of the run's customers table that a reload's replace
// made.
func replaceSnapshots(t *testing.T, r *ordRun) []string {
	t.Helper()
	var out []string
	for _, snap := range customersTable(t, r).Metadata().Snapshots() {
		if snap.Summary != nil && snap.Summary.Properties[tableprop.SummaryReload] == tableprop.SummaryReloadReplace {
			p := snap.Summary.Properties
			out = append(out, p[tableprop.SummaryReloadRows]+" load rows, "+p[tableprop.SummaryReloadRemovedFiles]+" files removed")
		}
	}
	return out
}
