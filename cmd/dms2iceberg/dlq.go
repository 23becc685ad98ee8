package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// openDeadLetters returns the dead-letter place of the configuration: nil for the Iceberg table
// (the sink runs it; sink.Iceberg.DeadLetters hands it to the consumer), or the JSON-lines file.
func openDeadLetters(cfg Config) (change.DeadLetterer, func(), error) {
	if cfg.Sink.DeadLetters.Type != sink.DeadLettersFile {
		return nil, func() {}, nil
	}
	f, err := sink.OpenFileDeadLetters(cfg.DeadLetterFile)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}

const dlqUsage = `usage: dms2iceberg dlq list   --config FILE [filters] [--json]
       dms2iceberg dlq replay --config FILE [filters] [--dry-run] [--include-replayed] [--json]

Works on the dead-letter table (sink.dead_letters, default dms2iceberg.dead_letters): every
record the service could not apply, with the raw payload, stream, shard, sequence number,
source table, error class and reason.

list prints the dead letters (not yet replayed ones unless --all).

replay re-applies dead letters after a fix (a configured primary key, a corrected column type,
a table that is no longer paused, a decoder setting): each payload is decoded again with the
configuration's dms settings and handed to the table writers as if it arrived now, in stream,
shard and sequence order, bypassing the watermarks that would otherwise skip it. Records that
apply are marked replayed (replayed_at); records that fail again stay in the table with the new
reason. With sink.tables column rules, payloads are stored redacted (excluded columns removed,
hashed and masked ones as the sink stores them, listed under "dms2iceberg-redacted"): replay
stores those values as they are, and refuses a record whose redacted column has another rule
now. A keyed table takes the replayed row image or delete by key: replay only records whose
keys have not changed since (filter with --table, --class, --seq-from), or the older image wins.
Run it while the service runs or not; commits of both are retried against each other.

flags:
`

type dlqFilter struct {
	table, class, shard, seqFrom, seqTo string
	all                                 bool
}

func (f dlqFilter) match(r sink.StoredDeadLetter, stream string) bool {
	if stream != "" && r.Stream != stream {
		return false
	}
	if !f.all && !r.ReplayedAt.IsZero() {
		return false
	}
	if f.table != "" {
		if ok, _ := path.Match(f.table, r.Table); !ok {
			return false
		}
	}
	if f.class != "" && r.Class != f.class {
		return false
	}
	if f.shard != "" && r.Shard != f.shard {
		return false
	}
	if f.seqFrom != "" && change.CompareSeq(r.Seq, f.seqFrom) < 0 {
		return false
	}
	if f.seqTo != "" && change.CompareSeq(r.Seq, f.seqTo) > 0 {
		return false
	}
	return true
}

// dlqOptions are the flags of dlq list and dlq replay.
type dlqOptions struct {
	filter     dlqFilter
	allStreams bool
	asJSON     bool
	dry        bool
}

// dlqFlags returns the flag set of dlq (both subcommands take the same flags).
func dlqFlags(o *dlqOptions) *cmdFlags {
	fs := newFlags("dlq", dlqUsage).withConfig("service configuration file")
	f := &o.filter
	fs.StringVar(&f.table, "table", "", "only dead letters of these source tables (\"schema.table\" glob)")
	fs.StringVar(&f.class, "class", "", "only this error class (decode, convert, keyless_change, incompatible_schema, table_paused, table_dropped, target_taken, unsupported_control)")
	fs.StringVar(&f.shard, "shard", "", "only this shard")
	fs.StringVar(&f.seqFrom, "seq-from", "", "only sequence numbers from this one")
	fs.StringVar(&f.seqTo, "seq-to", "", "only sequence numbers up to this one")
	fs.BoolVar(&o.allStreams, "all-streams", false, "not only dead letters of the configured stream")
	fs.BoolVar(&o.asJSON, "json", false, "list and replay --dry-run: one JSON object per dead letter; replay: one JSON summary {selected, applied, failed}")
	fs.BoolVar(&o.dry, "dry-run", false, "replay: decode and print what would be replayed, change nothing")
	fs.BoolVar(&f.all, "include-replayed", false, "also dead letters already replayed")
	fs.BoolVar(&f.all, "all", false, "same as --include-replayed")
	return fs
}

// parseDLQArgs returns the subcommand (list or replay) and the flags after it.
func parseDLQArgs(args []string) (string, *cmdFlags, *dlqOptions, error) {
	o := &dlqOptions{}
	fs := dlqFlags(o)
	switch {
	case len(args) == 0:
		return "", nil, nil, usageErrorf("a subcommand is required: list or replay")
	case strings.HasPrefix(args[0], "-"):
		fs.positional = true
		if err := fs.parse(args); err != nil { // -h, --help, or a flag dlq does not know
			return "", nil, nil, err
		}
		return "", nil, nil, usageErrorf("the subcommand (list or replay) comes before the flags")
	case args[0] != "list" && args[0] != "replay":
		return "", nil, nil, usageErrorf("unknown subcommand %q: list or replay", args[0])
	}
	if err := fs.parse(args[1:]); err != nil {
		return "", nil, nil, err
	}
	return args[0], fs, o, nil
}

func runDLQ(ctx context.Context, args []string) error {
	sub, fs, o, err := parseDLQArgs(args)
	if err != nil {
		return err
	}
	cfg, err := fs.validConfig(ctx)
	if err != nil {
		return err
	}
	if cfg.Sink.DeadLetters.Type != sink.DeadLettersTable {
		return fmt.Errorf("sink.dead_letters.type is %s: dlq works on the dead-letter table (the file %s is JSON lines)", cfg.Sink.DeadLetters.Type, cfg.DeadLetterFile)
	}
	cat, err := sink.OpenCatalog(ctx, cfg.Sink.Catalog)
	if err != nil {
		return err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	ident := []string{cfg.Sink.DeadLetters.Namespace, cfg.Sink.DeadLetters.Table}
	rows, err := sink.ReadDeadLetters(ctx, cat, ident)
	if err != nil {
		return err
	}
	stream := cfg.Stream
	if o.allStreams {
		stream = ""
	}
	var sel []sink.StoredDeadLetter
	for _, r := range rows {
		if o.filter.match(r, stream) {
			sel = append(sel, r)
		}
	}
	switch {
	case sub == "list":
		return listDeadLetters(os.Stdout, sel, o.asJSON)
	case o.dry:
		return dryReplay(os.Stdout, cfg, sel, o.asJSON)
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	res, err := replayDeadLetters(ctx, cfg, cat, sel, log)
	fmt.Fprintf(os.Stderr, "dlq replay: %d selected, %d applied and marked replayed, %d failed again\n", len(sel), res.applied, res.failed)
	if o.asJSON {
		sum := struct {
			Selected int    `json:"selected"`
			Applied  int    `json:"applied"`
			Failed   int    `json:"failed"`
			Error    string `json:"error,omitempty"`
		}{Selected: len(sel), Applied: res.applied, Failed: res.failed}
		if err != nil {
			sum.Error = err.Error()
		}
		if werr := writeJSON(os.Stdout, sum); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if res.failed > 0 {
		return errExplained
	}
	return nil
}

type dlqLine struct {
	Stream     string `json:"stream"`
	Shard      string `json:"shard"`
	Seq        string `json:"sequence_number"`
	Table      string `json:"source_table,omitempty"`
	Op         string `json:"operation,omitempty"`
	Class      string `json:"error_class"`
	Error      string `json:"error"`
	At         string `json:"dead_lettered_at"`
	ReplayedAt string `json:"replayed_at,omitempty"`
	Payload    string `json:"payload"`
}

func listDeadLetters(w io.Writer, rows []sink.StoredDeadLetter, asJSON bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		l := dlqLine{Stream: r.Stream, Shard: r.Shard, Seq: r.Seq, Table: r.Table, Op: r.Op, Class: r.Class, Error: r.Reason,
			At: r.At.Format(time.RFC3339Nano), Payload: string(r.Raw)}
		if !r.ReplayedAt.IsZero() {
			l.ReplayedAt = r.ReplayedAt.Format(time.RFC3339Nano)
		}
		if asJSON {
			if err := enc.Encode(l); err != nil {
				return err
			}
			continue
		}
		replayed := ""
		if l.ReplayedAt != "" {
			replayed = " replayed " + l.ReplayedAt
		}
		payload := strings.Join(strings.Fields(l.Payload), " ")
		if len(payload) > 160 {
			payload = payload[:160] + "…"
		}
		fmt.Fprintf(w, "%s %s %s %s %s [%s]%s: %s\n    %s\n", l.At, l.Shard, l.Seq, orDash(l.Table), orDash(l.Op), l.Class, replayed, l.Error, payload)
	}
	if !asJSON {
		fmt.Fprintf(w, "%d dead letters\n", len(rows))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dryReplayLine is one dead letter of replay --dry-run --json.
type dryReplayLine struct {
	Shard  string `json:"shard"`
	Seq    string `json:"sequence_number"`
	Table  string `json:"source_table,omitempty"`
	Action string `json:"action"` // apply, skip or undecodable
	Detail string `json:"detail"`
	Class  string `json:"error_class"`
	Reason string `json:"error"`
}

func dryReplay(w io.Writer, cfg Config, rows []sink.StoredDeadLetter, asJSON bool) error {
	dec := dms.NewDecoder(cfg.DMS)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		l := dryReplayLine{Shard: r.Shard, Seq: r.Seq, Class: r.Class, Reason: r.Reason}
		var ev change.Event
		if err := dec.Decode(r.Raw, &ev); err != nil {
			l.Action, l.Detail = "undecodable", err.Error()
		} else {
			op := ev.Op.String()
			if ev.Control != nil {
				op = ev.Control.Op
			}
			l.Table = ev.Schema + "." + ev.Table
			target := cfg.Sink.Target(l.Table)
			l.Action, l.Detail = "apply", "would apply "+op+" to "+target[0]+"."+target[1]
			if !cfg.Sink.Selected(l.Table) {
				l.Action, l.Detail = "skip", "would skip "+op+": "+l.Table+" is not replicated (include/exclude/enabled)"
			}
		}
		switch {
		case asJSON:
			if err := enc.Encode(l); err != nil {
				return err
			}
		case l.Action == "undecodable":
			fmt.Fprintf(w, "%s %s: still undecodable: %s\n", r.Shard, r.Seq, l.Detail)
		default:
			fmt.Fprintf(w, "%s %s %s: %s (was %s: %s)\n", r.Shard, r.Seq, l.Table, l.Detail, r.Class, r.Reason)
		}
	}
	if !asJSON {
		fmt.Fprintf(w, "%d dead letters would be replayed\n", len(rows))
	}
	return nil
}

type replayResult struct{ applied, failed int }

// replayDLQ wraps the dead-letter table during a replay and remembers which records were
// dead-lettered again (their rows are replaced, not marked replayed).
type replayDLQ struct {
	*sink.TableDeadLetters
	mu sync.Mutex
	// failed maps stream, shard and sequence number of a record dead-lettered again to the
	// source table of its new dead letter.
	failed map[[3]string]string
}

func (r *replayDLQ) note(dl change.DeadLetter) {
	r.mu.Lock()
	r.failed[[3]string{dl.Stream, dl.Shard, dl.Seq}] = dl.Table
	r.mu.Unlock()
}

func (r *replayDLQ) DeadLetter(ctx context.Context, dl change.DeadLetter) error {
	r.note(dl)
	return r.TableDeadLetters.DeadLetter(ctx, dl)
}

func (r *replayDLQ) DeadLetterAsync(ctx context.Context, dl change.DeadLetter, done func(error)) error {
	r.note(dl)
	return r.TableDeadLetters.DeadLetterAsync(ctx, dl, done)
}

type flagAck struct{ done atomic.Bool }

func (a *flagAck) Done(int) { a.done.Store(true) }

func replayDeadLetters(ctx context.Context, cfg Config, c catalog.Catalog, rows []sink.StoredDeadLetter, log *zap.Logger) (replayResult, error) {
	var res replayResult
	if len(rows) == 0 {
		return res, nil
	}
	scfg := cfg.Sink
	scfg.Maintenance.Enabled = false // the service maintains the tables
	tdl := sink.NewTableDeadLetters(c, scfg.DeadLetters, scfg.CommitRetries, log.Named("dead-letters"), nil)
	dlq := &replayDLQ{TableDeadLetters: tdl, failed: map[[3]string]string{}}
	snk, err := sink.New(scfg, c, dlq, sink.WithLogger(log))
	if err != nil {
		return res, err
	}
	var g errgroup.Group
	dctx, stopDLQ := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDLQ()
	g.Go(func() error { return tdl.Run(dctx) })
	sctx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSink()
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- snk.Run(sctx) }()

	dec := dms.NewDecoder(cfg.DMS)
	acks := make([]*flagAck, len(rows))
	var submitErr error
	for i, r := range rows {
		acks[i] = &flagAck{}
		ev := &change.Event{}
		if err := dec.Decode(r.Raw, ev); err != nil {
			dl := r.DeadLetter
			dl.Reason = err.Error()
			// Through the sink's dead letters, which keep the column rules.
			if err := snk.DeadLetters().DeadLetter(ctx, dl); err != nil {
				submitErr = err
				break
			}
			continue
		}
		ev.Pos = change.Position{Stream: r.Stream, Shard: r.Shard, Seq: r.Seq}
		ev.Raw = r.Raw
		ev.Replay = true
		ev.Redacted = dms.RedactedColumns(r.Raw) // values the column rules already applied to
		ev.Ack = acks[i]
		if err := snk.Submit(ctx, ev); err != nil {
			submitErr = err
			break
		}
	}
	if submitErr == nil {
		submitErr = snk.Flush(ctx)
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	_ = snk.Close(closeCtx)
	if err := <-sinkDone; err != nil && submitErr == nil {
		submitErr = err
	}
	var applied []sink.StoredDeadLetter
	for i, r := range rows {
		dlq.mu.Lock()
		table, again := dlq.failed[[3]string{r.Stream, r.Shard, r.Seq}]
		dlq.mu.Unlock()
		switch {
		case again && table == r.Table:
			res.failed++ // its row now holds the new reason
		case again:
			// Dead-lettered again under another source table (it decodes now): the new row
			// supersedes this one.
			res.failed++
			applied = append(applied, r)
		case acks[i].done.Load():
			applied = append(applied, r)
		}
	}
	if submitErr == nil {
		for i := range applied {
			// A row stored before dead letters kept the column rules loses its clear values now.
			applied[i].DeadLetter = cfg.Sink.RedactDeadLetter(applied[i].DeadLetter)
		}
		if err := tdl.MarkReplayed(ctx, applied, time.Now()); err != nil {
			submitErr = err
		} else {
			res.applied = len(applied)
		}
	}
	tdl.Close()
	if err := g.Wait(); err != nil && submitErr == nil {
		submitErr = err
	}
	return res, submitErr
}
