package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"

	"github.com/aws/smithy-go/logging"
	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dms2iceberg/dms2iceberg/consumer"
)

// newLogger builds the service logger: JSON lines (log_format: json, for production) or
// human-readable console output (the default, for development), to stderr.
func newLogger(cfg Config) (*zap.Logger, error) {
	var zc zap.Config
	if cfg.LogFormat == "json" {
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "time"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	} else {
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.OutputPaths = []string{"stderr"}
	return zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return snapshotIDCore{c} }))
}

// snapshotIDCore writes snapshot ids as strings: they are int64 values beyond 2^53, which JSON
// tools that read numbers as doubles (JavaScript, Elasticsearch, jq) round. It applies to every
// logger of the service, the sink's and iceberg-go's included, by field name (isSnapshotIDKey).
type snapshotIDCore struct{ zapcore.Core }

func (c snapshotIDCore) With(fields []zapcore.Field) zapcore.Core {
	return snapshotIDCore{c.Core.With(snapshotIDsAsStrings(fields))}
}

func (c snapshotIDCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c snapshotIDCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, snapshotIDsAsStrings(fields))
}

// snapshotIDsAsStrings returns fields with integer snapshot-id fields as decimal strings (fields
// itself when there are none).
func snapshotIDsAsStrings(fields []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field
	for i, f := range fields {
		if (f.Type != zapcore.Int64Type && f.Type != zapcore.Uint64Type) || !isSnapshotIDKey(f.Key) {
			continue
		}
		if out == nil {
			out = append(make([]zapcore.Field, 0, len(fields)), fields...)
		}
		if f.Type == zapcore.Int64Type {
			out[i] = zap.String(f.Key, strconv.FormatInt(f.Integer, 10))
		} else {
			out[i] = zap.String(f.Key, strconv.FormatUint(uint64(f.Integer), 10))
		}
	}
	if out == nil {
		return fields
	}
	return out
}

// isSnapshotIDKey reports whether a field names a snapshot id: "snapshot", "snapshot_id",
// "snapshot-id", "starting_snapshot", "parent-snapshot-id", "iceberg.snapshot_id", ... but not
// counts like "snapshots" or "snapshots_before".
func isSnapshotIDKey(key string) bool {
	k := strings.ToLower(key)
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		k = k[i+1:]
	}
	if k == "snapshot" || strings.HasSuffix(k, "_snapshot") || strings.HasSuffix(k, "-snapshot") {
		return true
	}
	return strings.Contains(k, "snapshot") && !strings.Contains(k, "snapshots") &&
		(strings.HasSuffix(k, "id") || strings.HasSuffix(k, "ids"))
}

// routeLibraryLogs sends the logs that libraries write to process-wide loggers through log:
// iceberg-go logs with log/slog and the standard log package (slog.SetDefault captures both),
// and the KCL's polling shard consumer logs lease-renewal and GetRecords errors to logrus's
// global logger. It returns a function that restores the previous state (for tests).
func routeLibraryLogs(log *zap.Logger) (restore func()) {
	prevSlog := slog.Default()
	slog.SetDefault(slog.New(newZapSlogHandler(log.Named("iceberg"))))

	std := logrus.StandardLogger()
	prevOut, prevLevel := std.Out, std.GetLevel()
	kcl := log.Named("kcl").WithOptions(zap.WithCaller(false)) // logrus reports no caller
	hooks := make(logrus.LevelHooks)
	hooks.Add(logrusToZap{log: kcl})
	prevHooks := std.ReplaceHooks(hooks)
	std.SetOutput(io.Discard)
	std.SetLevel(logrusLevel(log.Level()))
	return func() {
		slog.SetDefault(prevSlog)
		std.ReplaceHooks(prevHooks)
		std.SetOutput(prevOut)
		std.SetLevel(prevLevel)
	}
}

// awsLogger routes the AWS SDK's own log lines (retries, checksum warnings) into zap.
func awsLogger(log *zap.Logger) logging.Logger {
	l := log.Named("aws").WithOptions(zap.WithCaller(false))
	return logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		lvl := zapcore.InfoLevel
		switch c {
		case logging.Warn:
			lvl = zapcore.WarnLevel
		case logging.Debug:
			lvl = zapcore.DebugLevel
		}
		if ce := l.Check(lvl, fmt.Sprintf(format, v...)); ce != nil {
			ce.Write()
		}
	})
}

// --- log/slog → zap ---

// zapSlogHandler is a slog.Handler that writes to a zap logger.
type zapSlogHandler struct {
	log    *zap.Logger
	groups string // "a.b." prefix of attribute keys
}

func newZapSlogHandler(log *zap.Logger) *zapSlogHandler {
	return &zapSlogHandler{log: log}
}

func slogToZapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

func (h *zapSlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.Core().Enabled(slogToZapLevel(l))
}

func (h *zapSlogHandler) Handle(_ context.Context, r slog.Record) error {
	ce := h.log.Check(slogToZapLevel(r.Level), r.Message)
	if ce == nil {
		return nil
	}
	if ce.Caller.Defined && r.PC != 0 {
		// The caller is the code that called slog (or log), not this handler.
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		ce.Caller = zapcore.EntryCaller{Defined: true, PC: f.PC, File: f.File, Line: f.Line, Function: f.Function}
	}
	fields := make([]zap.Field, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		fields = appendAttr(fields, h.groups, a)
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *zapSlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := make([]zap.Field, 0, len(attrs))
	for _, a := range attrs {
		fields = appendAttr(fields, h.groups, a)
	}
	return &zapSlogHandler{log: h.log.With(fields...), groups: h.groups}
}

func (h *zapSlogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &zapSlogHandler{log: h.log, groups: h.groups + name + "."}
}

func appendAttr(fields []zap.Field, prefix string, a slog.Attr) []zap.Field {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return fields
	}
	key := prefix + a.Key
	switch v.Kind() {
	case slog.KindGroup:
		p := prefix
		if a.Key != "" {
			p = key + "."
		}
		for _, g := range v.Group() {
			fields = appendAttr(fields, p, g)
		}
		return fields
	case slog.KindString:
		return append(fields, zap.String(key, v.String()))
	case slog.KindInt64:
		return append(fields, zap.Int64(key, v.Int64()))
	case slog.KindUint64:
		return append(fields, zap.Uint64(key, v.Uint64()))
	case slog.KindFloat64:
		return append(fields, zap.Float64(key, v.Float64()))
	case slog.KindBool:
		return append(fields, zap.Bool(key, v.Bool()))
	case slog.KindDuration:
		return append(fields, zap.Duration(key, v.Duration()))
	case slog.KindTime:
		return append(fields, zap.Time(key, v.Time()))
	}
	if err, ok := v.Any().(error); ok {
		return append(fields, zap.NamedError(key, err))
	}
	return append(fields, zap.Any(key, v.Any()))
}

// --- logrus → zap ---

// logrusToZap forwards every entry of a logrus logger to zap; the logger's own output is
// discarded.
type logrusToZap struct{ log *zap.Logger }

func (logrusToZap) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusToZap) Fire(e *logrus.Entry) error {
	lvl := zapcore.DebugLevel
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		lvl = zapcore.ErrorLevel
	case logrus.WarnLevel:
		lvl = zapcore.WarnLevel
	case logrus.InfoLevel:
		lvl = zapcore.InfoLevel
	}
	if lvl == zapcore.ErrorLevel && consumer.LostLeaseMessage(e.Message) { // the designed hand-over
		lvl = zapcore.WarnLevel
	}
	ce := h.log.Check(lvl, strings.TrimSpace(e.Message))
	if ce == nil {
		return nil
	}
	fields := make([]zap.Field, 0, len(e.Data))
	for k, v := range e.Data {
		if err, ok := v.(error); ok {
			fields = append(fields, zap.NamedError(k, err))
			continue
		}
		fields = append(fields, zap.Any(k, v))
	}
	ce.Write(fields...)
	return nil
}

// logrusLevel is the logrus level that lets through what zap at level l would write.
func logrusLevel(l zapcore.Level) logrus.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return logrus.DebugLevel
	case l == zapcore.InfoLevel:
		return logrus.InfoLevel
	case l == zapcore.WarnLevel:
		return logrus.WarnLevel
	default:
		return logrus.ErrorLevel
	}
}
