package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

const maintainUsage = `usage: dms2iceberg maintain --config FILE [flags] [namespace.table ...]

Runs table maintenance now, whatever the thresholds, as the service runs it in the background:
compacts the data files that deletes apply to (and small ones) and drops the delete files that
became dead, expires snapshots outside sink.maintenance.snapshot_retention (always keeping
keep_last), rewrites manifests and removes orphan files older than orphan_min_age. It is safe
while the service runs: it takes each table's maintenance lease, and a table whose lease a
service worker holds is skipped (unless --ignore-lease). Without table names every table of the
catalog is maintained. Prints, per table, what changed (--json: one JSON object). Exits 1 if a
table failed.

flags:
`

func runMaintain(ctx context.Context, args []string) error {
	fs := newFlags("maintain", maintainUsage).withConfig("service configuration file")
	fs.positional = true // the tables
	ignoreLease := fs.Bool("ignore-lease", false, "maintain tables even while a worker holds their maintenance lease")
	noOrphans := fs.Bool("no-orphans", false, "leave orphan files alone")
	asJSON := fs.Bool("json", false, "print one JSON object {ok, failed, tables: [{table, skipped, error, report}]}")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, err := fs.config()
	if err != nil {
		return err
	}
	if err := cfg.requireCatalogRegion(ctx); err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		return err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	idents, err := maintainTargets(ctx, cat, fs.Args())
	if err != nil {
		return err
	}
	mcfg := cfg.Sink.Maintenance
	mcfg.Owner = cfg.WorkerID + "/maintain"
	mcfg.CommitTimeout = cfg.Sink.CommitTimeout
	opts := maintenance.RunOptions{Log: log, IgnoreLease: *ignoreLease, SkipOrphans: *noOrphans}
	rep := maintainReport{OK: true, Tables: []maintainEntry{}}
	for _, id := range idents {
		r, err := maintenance.RunTable(ctx, cat, id, mcfg, opts)
		name := strings.Join(id, ".")
		switch {
		case errors.Is(err, maintenance.ErrLeaseHeld):
			rep.Tables = append(rep.Tables, maintainEntry{Table: name, Skipped: err.Error()})
			if !*asJSON {
				fmt.Printf("%s: skipped: %v\n", name, err)
			}
		default:
			e := maintainEntry{Table: name, Report: newMaintainJSON(r)}
			if !*asJSON {
				printReport(os.Stdout, name, r)
			}
			if err != nil {
				rep.OK, rep.Failed, e.Error = false, rep.Failed+1, err.Error()
				if !*asJSON {
					fmt.Printf("  error          %v\n", err)
				}
			}
			rep.Tables = append(rep.Tables, e)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if *asJSON {
		if err := writeJSON(os.Stdout, rep); err != nil {
			return err
		}
	} else if rep.Failed > 0 {
		fmt.Printf("maintain: %d of %d tables failed\n", rep.Failed, len(idents))
	}
	if rep.Failed > 0 {
		return errExplained
	}
	return nil
}

// maintainReport is maintain's --json output.
type maintainReport struct {
	OK     bool            `json:"ok"`
	Failed int             `json:"failed"`
	Tables []maintainEntry `json:"tables"`
}

// maintainEntry is one table: skipped (its lease is held), or maintained with a report (and the
// error of a failed step).
type maintainEntry struct {
	Table   string        `json:"table"`
	Skipped string        `json:"skipped,omitempty"`
	Error   string        `json:"error,omitempty"`
	Report  *maintainJSON `json:"report,omitempty"`
}

// maintainJSON is maintenance.Report in snake_case with durations in seconds; -1 is unknown.
type maintainJSON struct {
	Compacted           bool     `json:"compacted"`
	DataFilesBefore     int      `json:"data_files_before"`
	DataFilesAfter      int      `json:"data_files_after"`
	DataFilesRewritten  int      `json:"data_files_rewritten"`
	DataFilesWritten    int      `json:"data_files_written"`
	BytesBefore         int64    `json:"rewritten_bytes"`
	BytesAfter          int64    `json:"written_bytes"`
	DeleteFilesBefore   int      `json:"delete_files_before"`
	DeleteFilesAfter    int      `json:"delete_files_after"`
	DeleteFilesRemoved  int      `json:"delete_files_removed"`
	DeleteRowsRemoved   int64    `json:"delete_rows_applied"`
	SnapshotsBefore     int      `json:"snapshots_before"`
	SnapshotsAfter      int      `json:"snapshots_after"`
	SnapshotsExpired    int      `json:"snapshots_expired"`
	FilesDeferred       int      `json:"files_deferred"`
	DeferredRemoved     int      `json:"deferred_files_removed"`
	ManifestsBefore     int      `json:"manifests_before"`
	ManifestsAfter      int      `json:"manifests_after"`
	ManifestsRewritten  int      `json:"manifests_rewritten"`
	OrphansRemoved      int      `json:"orphan_files_removed"`
	OrphanBytes         int64    `json:"orphan_bytes_removed"`
	MetadataBytesBefore int64    `json:"metadata_bytes_before"`
	MetadataBytesAfter  int64    `json:"metadata_bytes_after"`
	Seconds             float64  `json:"seconds"`
	CompactionSeconds   float64  `json:"compaction_seconds"`
	CompactionAttempts  int      `json:"compaction_attempts"`
	FailedSteps         []string `json:"failed_steps,omitempty"`
}

func newMaintainJSON(r maintenance.Report) *maintainJSON {
	return &maintainJSON{
		Compacted: r.Compacted, DataFilesBefore: r.DataFilesBefore, DataFilesAfter: r.DataFilesAfter,
		DataFilesRewritten: r.DataFilesRewritten, DataFilesWritten: r.DataFilesWritten,
		BytesBefore: r.BytesBefore, BytesAfter: r.BytesAfter,
		DeleteFilesBefore: r.DeleteFilesBefore, DeleteFilesAfter: r.DeleteFilesAfter,
		DeleteFilesRemoved: r.DeleteFilesRemoved, DeleteRowsRemoved: r.DeleteRowsRemoved,
		SnapshotsBefore: r.SnapshotsBefore, SnapshotsAfter: r.SnapshotsAfter, SnapshotsExpired: r.SnapshotsExpired,
		FilesDeferred: r.FilesDeferred, DeferredRemoved: r.DeferredFilesRemoved,
		ManifestsBefore: r.ManifestsBefore, ManifestsAfter: r.ManifestsAfter, ManifestsRewritten: r.ManifestsRewritten,
		OrphansRemoved: r.OrphansRemoved, OrphanBytes: r.OrphanBytes,
		MetadataBytesBefore: r.MetadataBytesBefore, MetadataBytesAfter: r.MetadataBytesAfter,
		Seconds: r.Took.Seconds(), CompactionSeconds: r.CompactionTook.Seconds(), CompactionAttempts: r.CompactionAttempts,
		FailedSteps: r.Failed,
	}
}

// maintainTargets parses "namespace.table" arguments, or lists every table of the catalog.
func maintainTargets(ctx context.Context, cat catalog.Catalog, args []string) ([]table.Identifier, error) {
	var out []table.Identifier
	for _, a := range args {
		i := strings.LastIndex(a, ".")
		if i <= 0 || i == len(a)-1 {
			return nil, fmt.Errorf("table %q: want namespace.table", a)
		}
		out = append(out, table.Identifier{a[:i], a[i+1:]})
	}
	if len(out) > 0 {
		return out, nil
	}
	nss, err := cat.ListNamespaces(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nss {
		for id, err := range cat.ListTables(ctx, ns) {
			if err != nil {
				return nil, fmt.Errorf("list tables of %s: %w", strings.Join(ns, "."), err)
			}
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], ".") < strings.Join(out[j], ".") })
	return out, nil
}

func printReport(w io.Writer, name string, r maintenance.Report) {
	fmt.Fprintf(w, "%s\n", name)
	if r.Compacted {
		fmt.Fprintf(w, "  data files     %d → %d  (%d rewritten into %d, %s → %s)\n", r.DataFilesBefore, r.DataFilesAfter,
			r.DataFilesRewritten, r.DataFilesWritten, humanBytes(r.BytesBefore), humanBytes(r.BytesAfter))
		fmt.Fprintf(w, "  delete files   %d → %d  (%d removed, %d delete rows applied)\n", r.DeleteFilesBefore, r.DeleteFilesAfter,
			r.DeleteFilesRemoved, r.DeleteRowsRemoved)
	} else {
		fmt.Fprintf(w, "  data files     %d → %d  (not compacted: nothing has deletes or is small)\n", r.DataFilesBefore, r.DataFilesAfter)
		fmt.Fprintf(w, "  delete files   %d → %d\n", r.DeleteFilesBefore, r.DeleteFilesAfter)
	}
	fmt.Fprintf(w, "  snapshots      %d → %d  (%d expired)\n", r.SnapshotsBefore, r.SnapshotsAfter, r.SnapshotsExpired)
	if r.FilesDeferred > 0 || r.DeferredFilesRemoved > 0 {
		fmt.Fprintf(w, "  deferred files %d listed for deletion after snapshot_retention, %d deleted\n", r.FilesDeferred, r.DeferredFilesRemoved)
	}
	fmt.Fprintf(w, "  manifests      %s → %s\n", count(r.ManifestsBefore), count(r.ManifestsAfter))
	fmt.Fprintf(w, "  orphan files   %d removed (%s)\n", r.OrphansRemoved, humanBytes(r.OrphanBytes))
	fmt.Fprintf(w, "  metadata       %s → %s\n", humanBytes(r.MetadataBytesBefore), humanBytes(r.MetadataBytesAfter))
	took := r.Took.Round(time.Millisecond).String()
	if r.Compacted {
		took += fmt.Sprintf(" (compaction %s, %d commit attempt(s))", r.CompactionTook.Round(time.Millisecond), r.CompactionAttempts)
	}
	fmt.Fprintf(w, "  took           %s\n", took)
}

func count(n int) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func humanBytes(b int64) string {
	switch {
	case b < 0:
		return "?"
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%d B", b)
	}
}
