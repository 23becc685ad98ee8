package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

const cutUsage = `usage: dms2iceberg cut --config FILE --at TIME [--json] [--namespace NS ...]

Prints a consistent cut of the tables the service writes: for every table, the first snapshot
that holds every change of the stream that arrived at or before TIME (RFC 3339), by the
dms2iceberg.complete-through the ordering guard records with each commit. Reading every table at
its snapshot (Spark and Trino: VERSION AS OF; Athena: FOR VERSION AS OF) gives tables that all
hold the source's changes up to TIME; a snapshot may also hold later changes, up to its own
complete-through, which is printed. It reads the catalog only. Exit status 1 when a table is not
complete through TIME yet (it is listed with what it is complete through).

flags:
`

// cutEntry is one table of a cut.
type cutEntry struct {
	Table string `json:"table"`
	// SnapshotID and SnapshotTime name the snapshot (absent: no snapshot is complete through
	// the cut's time yet, or the table is complete and empty: it has no snapshot).
	SnapshotID   int64      `json:"snapshot_id,string,omitempty"`
	SnapshotTime *time.Time `json:"snapshot_time,omitempty"`
	// CompleteThrough is what that snapshot is complete through (or, without one, what the
	// table is complete through now; absent: never recorded).
	CompleteThrough *time.Time `json:"complete_through,omitempty"`
	Complete        bool       `json:"complete"`
	Error           string     `json:"error,omitempty"`
}

// cutReport is what cut prints.
type cutReport struct {
	At     time.Time  `json:"at"`
	Tables []cutEntry `json:"tables"`
	Errors []string   `json:"errors,omitempty"`
}

func runCut(ctx context.Context, args []string) error {
	fs := newFlags("cut", cutUsage).withConfig("service configuration file")
	atText := fs.String("at", "", "the cut's time, RFC 3339 (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	var namespaces stringList
	fs.Var(&namespaces, "namespace", "catalog namespace to list (repeatable; default: the namespaces the configuration implies, else all)")
	if err := fs.parse(args); err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, *atText)
	if err != nil {
		return usageErrorf("cut: --at %q: want an RFC 3339 time, e.g. 2026-12-01T10:00:00Z", *atText)
	}
	cfg, err := fs.validConfig(ctx)
	if err != nil {
		return err
	}
	src, closeCat, err := catalogSources(ctx, cfg, namespaces)
	if err != nil {
		return err
	}
	defer closeCat()
	tables, err := src.loadTables(ctx)
	rep := cutReport{At: at.UTC()}
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	for _, t := range tables {
		if t.err != nil {
			rep.Tables = append(rep.Tables, cutEntry{Table: t.name, Error: t.err.Error()})
			continue
		}
		rep.Tables = append(rep.Tables, cutOf(t.name, t.tbl, rep.At))
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.render(os.Stdout)
	}
	for _, t := range rep.Tables {
		if !t.Complete {
			return errExplained
		}
	}
	if len(rep.Errors) > 0 {
		return errExplained
	}
	return nil
}

// cutOf finds the first snapshot of tbl that is complete through at. A snapshot is complete
// through the highest complete-through recorded in its summary or an earlier one's (a
// compaction records none and changes no data), and the current snapshot also through the
// table property (a quiet table's freshness commit raises it without a snapshot). Snapshots that
// maintenance expired are gone, so the answer may be later than the first one there was, never
// earlier than correct.
func cutOf(name string, tbl *table.Table, at time.Time) cutEntry {
	e := cutEntry{Table: name}
	snaps := slices.Clone(tbl.Metadata().Snapshots())
	slices.SortFunc(snaps, func(a, b table.Snapshot) int {
		if c := cmp.Compare(a.SequenceNumber, b.SequenceNumber); c != 0 {
			return c
		}
		return cmp.Compare(a.TimestampMs, b.TimestampMs)
	})
	cur := tbl.CurrentSnapshot()
	var through time.Time
	for i := range snaps {
		s := &snaps[i]
		if s.Summary != nil {
			if ct, ok := tableprop.ParseCompleteThrough(s.Summary.Properties[tableprop.CompleteThrough]); ok && ct.After(through) {
				through = ct
			}
		}
		if cur != nil && s.SnapshotID == cur.SnapshotID {
			if ct, ok := tableprop.ParseCompleteThrough(tbl.Properties()[tableprop.CompleteThrough]); ok && ct.After(through) {
				through = ct
			}
		}
		if !through.IsZero() && !through.Before(at) {
			ts := time.UnixMilli(s.TimestampMs).UTC()
			ct := through
			e.SnapshotID, e.SnapshotTime, e.CompleteThrough, e.Complete = s.SnapshotID, &ts, &ct, true
			return e
		}
	}
	if ct, ok := tableprop.ParseCompleteThrough(tbl.Properties()[tableprop.CompleteThrough]); ok {
		e.CompleteThrough = &ct
		// A table without any snapshot that is complete through the time was empty then.
		e.Complete = cur == nil && !ct.Before(at)
	}
	return e
}

func (r cutReport) render(w io.Writer) {
	fmt.Fprintf(w, "cut at %s\n", r.At.Format(tableprop.CompleteThroughLayout))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSNAPSHOT\tSNAPSHOT TIME\tCOMPLETE THROUGH")
	for _, t := range r.Tables {
		through := "-"
		if t.CompleteThrough != nil {
			through = t.CompleteThrough.Format(tableprop.CompleteThroughLayout)
		}
		switch {
		case t.Error != "":
			fmt.Fprintf(tw, "%s\terror: %s\t\t\n", t.Table, t.Error)
		case !t.Complete:
			fmt.Fprintf(tw, "%s\tnot complete yet\t-\t%s\n", t.Table, through)
		case t.SnapshotID == 0:
			fmt.Fprintf(tw, "%s\tnone (empty)\t-\t%s\n", t.Table, through)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", t.Table, t.SnapshotID, t.SnapshotTime.Format(time.RFC3339), through)
		}
	}
	_ = tw.Flush()
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nerror: %s\n", e)
	}
}
