package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

const statusUsage = `usage: dms2iceberg status --config FILE [--json] [--namespace NS ...]

Prints, for the service that the configuration describes:
  per shard: lease owner and expiry, checkpoint, committed watermark (the highest sequence
             number any table holds for the shard), and lag (age of the oldest record after
             the checkpoint; 0 when the checkpoint is at the end of the shard)
  per table: last commit (current snapshot time), complete-through (every change of the stream
             that arrived at or before it is in the table), rows, data files, delete files,
             equality deletes (from the snapshot summary), and its watermark per shard; a DMS
             reload in progress (load rows staged, since when)
It reads the lease table (DynamoDB), the stream (Kinesis: ListShards and one GetRecords per
shard) and the catalog; it writes nothing.

flags:
`

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runStatus(ctx context.Context, args []string) error {
	fs := newFlags("status", statusUsage).withConfig("service configuration file")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", time.Minute, "bound on the whole status collection")
	var namespaces stringList
	fs.Var(&namespaces, "namespace", "catalog namespace to list (repeatable; default: the namespaces the configuration implies, else all)")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, err := fs.validConfig(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	awsCfg, err := cfg.awsConfig(ctx)
	if err != nil {
		return err
	}
	src, closeCat, err := catalogSources(ctx, cfg, namespaces)
	if err != nil {
		return err
	}
	defer closeCat()
	src.leaseTable, src.now = cfg.Application, time.Now
	src.kinesis, src.dynamo = kinesis.NewFromConfig(awsCfg), dynamodb.NewFromConfig(awsCfg)
	rep := src.collect(ctx)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.render(os.Stdout)
	}
	if len(rep.Errors) > 0 && len(rep.Shards) == 0 && len(rep.Tables) == 0 {
		return errExplained
	}
	return nil
}

// catalogSources are the status sources of the catalog side for a reading command: the catalog
// (openCatalogToRead), the stream, the namespaces to list (namespaces, else those the
// configuration implies) and the configured targets. The caller closes the catalog with the
// returned function.
func catalogSources(ctx context.Context, cfg Config, namespaces []string) (statusSources, func(), error) {
	cat, closeCat, err := openCatalogToRead(ctx, cfg.Sink.Catalog)
	if err != nil {
		return statusSources{}, nil, err
	}
	src := statusSources{stream: cfg.Stream, catalog: cat, namespaces: namespaces, targets: configuredTargets(cfg.Sink),
		branch: cfg.Sink.Maintenance.PositionalBranch}
	if len(src.namespaces) == 0 {
		src.namespaces = impliedNamespaces(cfg.Sink)
	}
	return src, closeCat, nil
}

// openCatalogToRead opens the catalog for a command that only reads it: an embedded SQLite
// catalog must exist already (reading must not create one where the service has not run yet).
func openCatalogToRead(ctx context.Context, c sink.CatalogConfig) (catalog.Catalog, func(), error) {
	if c.Type == "sql" && strings.HasPrefix(c.URI, "file:") {
		path, _, _ := strings.Cut(strings.TrimPrefix(c.URI, "file:"), "?")
		if _, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("catalog %s: %w (has the service run with this configuration?)", path, err)
		}
	}
	cat, err := sink.OpenCatalog(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	closeCat := func() {}
	if cl, ok := cat.(io.Closer); ok {
		closeCat = func() { _ = cl.Close() }
	}
	return cat, closeCat, nil
}

// statusReport is what `status` prints.
type statusReport struct {
	Stream     string        `json:"stream"`
	LeaseTable string        `json:"lease_table"`
	At         time.Time     `json:"at"`
	Shards     []shardStatus `json:"shards"`
	Tables     []tableStatus `json:"tables"`
	// MaxLagSeconds is the highest shard lag: every table holds every change that arrived
	// before At minus this (an upper bound of every table's staleness).
	MaxLagSeconds *float64 `json:"max_lag_seconds,omitempty"`
	// Errors lists what could not be read; the rest of the report is still valid.
	Errors []string `json:"errors,omitempty"`
}

type shardStatus struct {
	Shard        string     `json:"shard"`
	Parents      []string   `json:"parents,omitempty"`
	Closed       bool       `json:"closed"` // the shard has an ending sequence number (resharded)
	Owner        string     `json:"owner,omitempty"`
	LeaseTimeout *time.Time `json:"lease_timeout,omitempty"`
	LeaseEpoch   int64      `json:"lease_epoch,omitempty"`
	Checkpoint   string     `json:"checkpoint,omitempty"`
	// Committed is the highest watermark any table holds for the shard.
	Committed string `json:"committed_watermark,omitempty"`
	// LagSeconds is the age of the oldest record after the checkpoint (0: none).
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// MillisBehindLatest is Kinesis's own figure for the read after the checkpoint.
	MillisBehindLatest *int64 `json:"millis_behind_latest,omitempty"`
	LagError           string `json:"lag_error,omitempty"`
}

type tableStatus struct {
	Table      string     `json:"table"`
	SnapshotID int64      `json:"snapshot_id,string,omitempty"`
	LastCommit *time.Time `json:"last_commit,omitempty"`
	// LastCommitAgeSeconds is At minus LastCommit.
	LastCommitAgeSeconds *float64          `json:"last_commit_age_seconds,omitempty"`
	Rows                 int64             `json:"rows"`
	DataFiles            int64             `json:"data_files"`
	DeleteFiles          int64             `json:"delete_files"`
	EqualityDeletes      int64             `json:"equality_deletes"`
	PositionDeletes      int64             `json:"position_deletes"`
	Watermarks           map[string]string `json:"watermarks,omitempty"`
	// CompleteThrough is tableprop.CompleteThrough: the table holds every change of the stream
	// that arrived at or before it (absent: never recorded, ordering shard).
	CompleteThrough *time.Time `json:"complete_through,omitempty"`
	// Reload is a DMS reload of the table in progress (design.md §7 "Reload"); absent: none.
	Reload *reloadStatus `json:"reload,omitempty"`
	// PositionalBranch is the branch without equality deletes (delete_mode position and dv,
	// design.md §10.1); absent: none.
	PositionalBranch *branchStatus `json:"positional_branch,omitempty"`
	Error            string        `json:"error,omitempty"`
}

// branchStatus is a table's positional branch: its snapshot, the main snapshot it shows and how
// far behind main that is (maintenance.BranchBehind).
type branchStatus struct {
	Name          string  `json:"name"`
	SnapshotID    int64   `json:"snapshot_id,string"`
	Shows         int64   `json:"shows_snapshot_id,string"`
	BehindSeconds float64 `json:"behind_seconds"`
}

// reloadStatus is a reload in progress, from the table's properties (tableprop.ReloadBefore,
// ReloadStarted, ReloadRows).
type reloadStatus struct {
	// Since is the metadata.timestamp of the create-table that started it.
	Since string `json:"since"`
	// Rows counts the load rows committed since (they replace the table's content at its end).
	Rows int64 `json:"rows_staged"`
	// BeforeSeq is the sequence number at or below which every file is removed at its end.
	BeforeSeq int64 `json:"replaces_up_to_sequence"`
}

type statusKinesis interface {
	ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(context.Context, *kinesis.GetShardIteratorInput, ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

type statusDynamo interface {
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// statusSources are the inputs of a status report.
type statusSources struct {
	stream, leaseTable string
	kinesis            statusKinesis
	dynamo             statusDynamo
	catalog            catalog.Catalog
	// namespaces to list; empty means all top-level namespaces.
	namespaces []string
	// targets are "ns.table" names the configuration names; listed even without watermarks.
	targets map[string]bool
	// branch is sink.maintenance.positional_branch ("": the default's name).
	branch string
	now    func() time.Time
}

// collect gathers the report. Failures of one source are recorded in Errors; the others are
// still reported.
func (s statusSources) collect(ctx context.Context) statusReport {
	rep := statusReport{Stream: s.stream, LeaseTable: s.leaseTable, At: s.now().UTC()}
	shards := map[string]*shardStatus{}
	shard := func(id string) *shardStatus {
		if sh, ok := shards[id]; ok {
			return sh
		}
		sh := &shardStatus{Shard: id}
		shards[id] = sh
		return sh
	}
	if list, err := s.listShards(ctx); err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("list shards of %s: %v", s.stream, err))
	} else {
		for _, k := range list {
			sh := shard(aws.ToString(k.ShardId))
			for _, p := range []*string{k.ParentShardId, k.AdjacentParentShardId} {
				if p != nil {
					sh.Parents = append(sh.Parents, *p)
				}
			}
			sh.Closed = k.SequenceNumberRange != nil && k.SequenceNumberRange.EndingSequenceNumber != nil
		}
	}
	if err := s.readLeases(ctx, shard); err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("read lease table %s: %v", s.leaseTable, err))
	}
	tables, err := s.readTables(ctx, rep.At)
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("list tables: %v", err))
	}
	for i := range tables {
		t := &tables[i]
		if t.LastCommit != nil {
			age := max(rep.At.Sub(*t.LastCommit), 0).Seconds()
			t.LastCommitAgeSeconds = &age
		}
		for id, wm := range t.Watermarks {
			sh := shard(id)
			if change.CompareSeq(wm, sh.Committed) > 0 {
				sh.Committed = wm
			}
		}
	}
	rep.Tables = tables
	for _, sh := range shards {
		s.lag(ctx, sh, rep.At)
		if sh.LagSeconds != nil && (rep.MaxLagSeconds == nil || *sh.LagSeconds > *rep.MaxLagSeconds) {
			v := *sh.LagSeconds
			rep.MaxLagSeconds = &v
		}
		rep.Shards = append(rep.Shards, *sh)
	}
	sort.Slice(rep.Shards, func(i, j int) bool { return rep.Shards[i].Shard < rep.Shards[j].Shard })
	return rep
}

func (s statusSources) listShards(ctx context.Context) ([]kintypes.Shard, error) {
	var out []kintypes.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(s.stream)}
	for {
		page, err := s.kinesis.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Shards...)
		if page.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// readLeases scans the lease table through checkpoint.ParseLeaseRow, the one lease-row parser.
func (s statusSources) readLeases(ctx context.Context, shard func(string) *shardStatus) error {
	in := &dynamodb.ScanInput{TableName: aws.String(s.leaseTable), ConsistentRead: aws.Bool(true)}
	for {
		page, err := s.dynamo.Scan(ctx, in)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			// A malformed timeout or epoch is shown as absent; status only displays rows.
			r, _ := checkpoint.ParseLeaseRow(item)
			if r.Shard == "" {
				continue
			}
			sh := shard(r.Shard)
			sh.Owner, sh.Checkpoint, sh.LeaseEpoch = r.Owner, r.Checkpoint, r.Epoch
			if !r.LeaseTimeout.IsZero() {
				ts := r.LeaseTimeout.UTC()
				sh.LeaseTimeout = &ts
			}
			if r.Parent != "" && len(sh.Parents) == 0 {
				sh.Parents = []string{r.Parent}
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// lagReads bounds the GetRecords calls per shard: an empty answer with MillisBehindLatest > 0
// (a sparse shard) is followed this many times before the lag is reported as unknown.
const lagReads = 5

// lagLimit is how many records one of those reads takes: enough to see past the heartbeats a
// checkpoint has not passed yet (at most a minute of them).
const lagLimit = 500

// lag reads the first record after the shard's checkpoint: its age is the shard's lag.
func (s statusSources) lag(ctx context.Context, sh *shardStatus, now time.Time) {
	zero := 0.0
	if sh.Checkpoint == checkpoint.ShardEnd {
		sh.LagSeconds = &zero
		return
	}
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(s.stream), ShardId: aws.String(sh.Shard)}
	if isSeq(sh.Checkpoint) {
		in.ShardIteratorType, in.StartingSequenceNumber = kintypes.ShardIteratorTypeAfterSequenceNumber, aws.String(sh.Checkpoint)
	} else {
		in.ShardIteratorType = kintypes.ShardIteratorTypeTrimHorizon
	}
	it, err := s.kinesis.GetShardIterator(ctx, in)
	if err != nil {
		sh.LagError = err.Error()
		return
	}
	iter := it.ShardIterator
	for range lagReads {
		if iter == nil { // a closed shard read to its end
			sh.LagSeconds = &zero
			return
		}
		out, err := s.kinesis.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(lagLimit)})
		if err != nil {
			sh.LagError = err.Error()
			return
		}
		behind := aws.ToInt64(out.MillisBehindLatest)
		sh.MillisBehindLatest = &behind
		for _, r := range out.Records {
			// Heartbeat records (consumer.heartbeat_interval) are no change: a checkpoint
			// passes them at most once a minute, so they would show an idle shard as behind.
			if consumer.IsHeartbeat(aws.ToString(r.PartitionKey), r.Data) {
				continue
			}
			lag := 0.0
			if ts := r.ApproximateArrivalTimestamp; ts != nil {
				lag = max(now.Sub(*ts), 0).Seconds()
			}
			sh.LagSeconds = &lag
			return
		}
		if behind == 0 {
			sh.LagSeconds = &zero
			return
		}
		iter = out.NextShardIterator
	}
	sh.LagError = fmt.Sprintf("no record found within %d reads after the checkpoint", lagReads)
}

// isSeq reports whether a checkpoint is a sequence number (not TRIM_HORIZON, SHARD_END, ...).
func isSeq(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// readTables loads every table of the namespaces that holds watermarks of this stream or that
// the configuration names.
func (s statusSources) readTables(ctx context.Context, at time.Time) ([]tableStatus, error) {
	tables, err := s.loadTables(ctx)
	out := make([]tableStatus, 0, len(tables))
	for _, t := range tables {
		if t.err != nil {
			out = append(out, tableStatus{Table: t.name, Error: t.err.Error()})
			continue
		}
		out = append(out, tableStatusOf(t.name, t.tbl, s.stream, s.branch, at))
	}
	return out, err
}

// loadedTable is a table of loadTables: loaded, or the error of loading it.
type loadedTable struct {
	name string
	tbl  *table.Table
	err  error
}

// loadTables loads the tables of the namespaces to list that this stream writes (they hold its
// watermarks) or the configuration names, sorted by name. A table that cannot be loaded is
// returned with its error; a namespace that cannot be listed is in the error.
func (s statusSources) loadTables(ctx context.Context) ([]loadedTable, error) {
	var nss []table.Identifier
	if len(s.namespaces) > 0 {
		for _, ns := range s.namespaces {
			nss = append(nss, strings.Split(ns, "."))
		}
	} else {
		var err error
		if nss, err = s.catalog.ListNamespaces(ctx, nil); err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
	}
	var out []loadedTable
	var errs []error
	for _, ns := range nss {
		for ident, err := range s.catalog.ListTables(ctx, ns) {
			if err != nil {
				if errors.Is(err, catalog.ErrNoSuchNamespace) {
					break // implied by the configuration, not created yet
				}
				errs = append(errs, fmt.Errorf("list tables of %s: %w", strings.Join(ns, "."), err))
				break
			}
			name := strings.Join(ident, ".")
			tbl, err := s.catalog.LoadTable(ctx, ident)
			if err != nil {
				out = append(out, loadedTable{name: name, err: err})
				continue
			}
			if len(tableprop.Watermarks(tbl.Properties(), s.stream)) == 0 && !s.targets[name] {
				continue // not written from this stream
			}
			out = append(out, loadedTable{name: name, tbl: tbl})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, errors.Join(errs...)
}

// tableStatusOf reads a table's current snapshot summary and its watermarks, and its positional
// branch (named branch; "": the default name) as of at.
func tableStatusOf(name string, tbl *table.Table, stream, branch string, at time.Time) tableStatus {
	ts := tableStatus{Table: name, Watermarks: tableprop.Watermarks(tbl.Properties(), stream)}
	if branch == "" {
		branch = maintenance.DefaultConfig().PositionalBranch
	}
	if snap := tbl.Metadata().SnapshotByName(branch); snap != nil {
		behind, _ := maintenance.BranchBehind(tbl.Metadata(), branch, at)
		ts.PositionalBranch = &branchStatus{Name: branch, SnapshotID: snap.SnapshotID,
			Shows: maintenance.BranchSource(snap), BehindSeconds: behind.Seconds()}
	}
	if ct, ok := tableprop.ParseCompleteThrough(tbl.Properties()[tableprop.CompleteThrough]); ok {
		ts.CompleteThrough = &ct
	}
	if props := tbl.Properties(); props[tableprop.ReloadBefore] != "" {
		before, _ := strconv.ParseInt(props[tableprop.ReloadBefore], 10, 64)
		rows, _ := strconv.ParseInt(props[tableprop.ReloadRows], 10, 64)
		ts.Reload = &reloadStatus{Since: props[tableprop.ReloadStarted], Rows: rows, BeforeSeq: before}
	}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return ts
	}
	ts.SnapshotID = snap.SnapshotID
	last := time.UnixMilli(snap.TimestampMs).UTC()
	ts.LastCommit = &last
	if snap.Summary != nil {
		n := func(k string) int64 {
			v, _ := strconv.ParseInt(snap.Summary.Properties[k], 10, 64)
			return v
		}
		ts.Rows, ts.DataFiles, ts.DeleteFiles = n("total-records"), n("total-data-files"), n("total-delete-files")
		ts.EqualityDeletes, ts.PositionDeletes = n("total-equality-deletes"), n("total-position-deletes")
	}
	return ts
}

// impliedNamespaces are the namespaces the sink configuration writes to, when it names them:
// sink.namespace, each table's namespace, else each configured source table's schema. Empty
// means "all".
func impliedNamespaces(c sink.Config) []string {
	seen := map[string]bool{}
	if c.Namespace != "" {
		seen[c.Namespace] = true
	}
	for src, tc := range c.Tables {
		switch {
		case tc.Namespace != "":
			seen[tc.Namespace] = true
		case c.Namespace == "":
			if schema, _, ok := strings.Cut(src, "."); ok {
				seen[schema] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// configuredTargets are the "namespace.table" names of the configured source tables, resolved
// as the sink resolves them.
func configuredTargets(c sink.Config) map[string]bool {
	out := map[string]bool{}
	for src := range c.Tables {
		out[strings.Join(c.Target(src), ".")] = true
	}
	return out
}

// render prints the report as two aligned tables.
func (r statusReport) render(w io.Writer) {
	fmt.Fprintf(w, "stream %s, lease table %s, at %s\n", r.Stream, r.LeaseTable, r.At.Format(time.RFC3339))
	if r.MaxLagSeconds != nil {
		fmt.Fprintf(w, "every table holds every change that arrived before %s (max shard lag %s)\n",
			r.At.Add(-time.Duration(*r.MaxLagSeconds*float64(time.Second))).Format(time.RFC3339), fmtSeconds(*r.MaxLagSeconds))
	}
	fmt.Fprintf(w, "\nSHARDS (%d)\n", len(r.Shards))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSTATE\tOWNER\tLEASE\tCHECKPOINT\tCOMMITTED\tLAG")
	for _, s := range r.Shards {
		state := "open"
		if s.Closed {
			state = "closed"
		}
		if s.Checkpoint == checkpoint.ShardEnd {
			state = "finished"
		}
		owner, lease := dash(s.Owner), "-"
		if s.LeaseTimeout != nil {
			if d := s.LeaseTimeout.Sub(r.At); d >= 0 {
				lease = "expires in " + fmtDuration(d)
			} else {
				lease = "expired " + fmtDuration(-d) + " ago"
			}
		}
		if s.LeaseEpoch > 0 {
			lease += fmt.Sprintf(" (epoch %d)", s.LeaseEpoch)
		}
		lag := "?"
		switch {
		case s.LagSeconds != nil:
			lag = fmtSeconds(*s.LagSeconds)
		case s.LagError != "":
			lag = "? (" + s.LagError + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Shard, state, owner, lease, shortSeq(s.Checkpoint), shortSeq(s.Committed), lag)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nTABLES (%d)\n", len(r.Tables))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tLAST COMMIT\tAGE\tCOMPLETE THROUGH\tROWS\tDATA FILES\tDELETE FILES\tEQ DELETES\tSNAPSHOT")
	for _, t := range r.Tables {
		if t.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\t\n", t.Table, t.Error)
			continue
		}
		through := "-"
		if t.CompleteThrough != nil {
			through = t.CompleteThrough.Format(tableprop.CompleteThroughLayout)
		}
		last, age := "never", "-"
		if t.LastCommit != nil {
			last = t.LastCommit.Format(time.RFC3339)
		}
		if t.LastCommitAgeSeconds != nil {
			age = fmtSeconds(*t.LastCommitAgeSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", t.Table, last, age, through, t.Rows, t.DataFiles, t.DeleteFiles, t.EqualityDeletes, t.SnapshotID)
	}
	_ = tw.Flush()
	for _, t := range r.Tables {
		if b := t.PositionalBranch; b != nil {
			fmt.Fprintf(w, "\n%s: branch %q (for readers that refuse equality deletes) shows snapshot %d, %s behind main\n",
				t.Table, b.Name, b.Shows, fmtSeconds(b.BehindSeconds))
		}
	}
	for _, t := range r.Tables {
		if rl := t.Reload; rl != nil {
			fmt.Fprintf(w, "\nreload of %s in progress since %s: %d load rows staged; its end (the table's first CDC change, or sink.reload_quiet_period without one) replaces the table's content in one snapshot\n",
				t.Table, dash(rl.Since), rl.Rows)
		}
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nerror: %s\n", e)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortSeq abbreviates a 56-digit sequence number to its last 12 digits (--json has them whole).
func shortSeq(s string) string {
	if len(s) > 16 && isSeq(s) {
		return "…" + s[len(s)-12:]
	}
	return dash(s)
}

func fmtSeconds(s float64) string { return fmtDuration(time.Duration(s * float64(time.Second))) }

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
