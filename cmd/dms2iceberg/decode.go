package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

const decodeUsage = `usage: dms2iceberg decode [flags] < messages

Reads DMS JSON from stdin (one message per line, pretty printed, or both mixed: what the Kinesis
console, 'aws kinesis get-records' piped through base64 -d, or a Firehose/S3 capture shows) and
prints one normalised event per message as a JSON line on stdout: record type, operation, table,
metadata, every column with its JSON kind and text, the before-image, and for control records
the table-def with the Iceberg type of each column and the schema changes the service would
make. Once a control record has announced a table, its later data records are shown typed: each
column's Iceberg type and the exact value the service would store, or why it cannot be stored.
With --config the sink's own column rules apply as the service applies them (one code path):
sink.tables (exclude_columns, hash_columns, mask_columns, primary_key, columns, timestamptz
settings) and sink.time_type; each such column carries its rule (excluded, hashed, masked), and
data of a table no earlier control record announced is typed as the sink creates the table
(configured columns, else inferred from the record).
Undecodable messages print as {"error": ...} with the reason the service would dead-letter
them. A summary goes to stderr; the exit status is 1 when a message did not decode (or, with
--strict, when a value does not convert).

flags:
`

func runDecode(ctx context.Context, args []string) error {
	fs := newFlags("decode", decodeUsage).withConfig("service configuration file: take the dms section (before-image field, BI_ columns) and the sink's column rules (sink.tables, sink.timestamptz, sink.time_type) from it")
	fs.positional = true // refused below, with the reason
	field := fs.String("before-image-field", "", "BeforeImageSettings.FieldName (default before-image)")
	bi := fs.Bool("bi", false, "recognise add-before-image-columns columns (<prefix><column><suffix>)")
	biPrefix := fs.String("bi-prefix", "", "prefix of before-image columns (default BI_)")
	biSuffix := fs.String("bi-suffix", "", "suffix of before-image columns (default none)")
	tz := fs.Bool("timestamptz", false, "show DATETIME columns as timestamptz (as sink.timestamptz does)")
	pretty := fs.Bool("pretty", false, "indent the output")
	strict := fs.Bool("strict", false, "exit 1 also when a value does not convert to its column type")
	_ = fs.Bool("json", true, "the output is JSON lines (always; accepted like on every reporting command)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s (the messages are read from stdin)", strings.Join(fs.Args(), " "))
	}
	cfg := dms.DefaultConfig()
	opts := dms.TypeOptions{}
	var sinkCfg *sink.Config // the column rules; nil without --config
	if fs.hasConfig() {
		sc, err := fs.config()
		if err != nil {
			return err
		}
		if err := sc.Sink.ValidateTables(); err != nil { // as the service refuses it (a hash key is missing, ...)
			return fmt.Errorf("invalid configuration: %w", err)
		}
		cfg, opts.TimestampTZ, opts.IcebergTime = sc.DMS, sc.Sink.TimestampTZ, sc.Sink.TimeType == "time"
		sinkCfg = &sc.Sink
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "before-image-field":
			cfg.BeforeImageField = *field
		case "bi":
			cfg.BIEnabled = *bi
		case "bi-prefix":
			cfg.BIPrefix = *biPrefix
		case "bi-suffix":
			cfg.BISuffix = *biSuffix
		case "timestamptz":
			opts.TimestampTZ = *tz
			if sinkCfg != nil {
				sinkCfg.TimestampTZ = *tz
			}
		}
	})
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := dms.NewNormalizer(cfg, opts)
	if sinkCfg != nil {
		n.SetRules(sinkCfg.Rules)
	}
	st, err := decodeStream(ctx, os.Stdin, os.Stdout, n, *pretty)
	fmt.Fprintf(os.Stderr, "decode: %d messages, %d undecodable, %d with values that do not convert, %d with warnings\n",
		st.messages, st.errors, st.convertErrors, st.warnings)
	if err != nil {
		return err
	}
	if st.errors > 0 || (*strict && st.convertErrors > 0) {
		return errExplained
	}
	return nil
}

type decodeStats struct{ messages, errors, convertErrors, warnings int }

// decodeStream normalises every message of r with n and writes one JSON document per message
// to w.
func decodeStream(ctx context.Context, r io.Reader, w io.Writer, n *dms.Normalizer, pretty bool) (decodeStats, error) {
	var st decodeStats
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if pretty {
		enc.SetIndent("", "  ")
	}
	sc := dms.NewScanner(r)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		rec := n.Normalize(sc.Message())
		rec.Line = sc.Line()
		st.messages++
		switch {
		case rec.Error != nil:
			st.errors++
		case hasConvertError(rec):
			st.convertErrors++
		}
		if len(rec.Warnings) > 0 {
			st.warnings++
		}
		if err := enc.Encode(rec); err != nil {
			return st, err
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("read stdin: %w", err)
	}
	return st, bw.Flush()
}

func hasConvertError(r dms.Record) bool {
	for _, fs := range [][]dms.Field{r.Columns, r.Before} {
		for _, f := range fs {
			if f.Error != "" {
				return true
			}
		}
	}
	return false
}
