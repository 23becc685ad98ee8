package main

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/logging"
	"github.com/sirupsen/logrus"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRouteLibraryLogs checks that slog (iceberg-go), the standard log package and logrus's
// global logger (the KCL) all end up in zap, at matching levels, and that restore undoes it.
// Not parallel: it changes process-wide loggers.
func TestRouteLibraryLogs(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	restore := routeLibraryLogs(zap.New(core, zap.AddCaller()))

	slog.Warn("downcasting nanosecond timestamp", "column", "ts", slog.Group("g", "n", 2), "err", errors.New("x"))
	slog.Debug("below the level")
	slog.With("table", "shop.orders").WithGroup("w").Error("commit", "attempt", 3, "took", time.Second)
	log.Printf("WARNING: failed to delete old metadata file: %s", "f.json")
	logrus.WithField("shard", "shard-0").WithError(errors.New("gone")).Error("Error in refreshing lease")
	// As the KCL's polling consumer logs a renewal refused because another worker took the lease.
	logrus.Errorf("Error in refreshing lease on shard: %s for worker: %s. Error: %+v", "shard-1", "w1", chk.ErrLeaseNotAcquired{})
	logrus.Debugf("Trying to read %d records", 10) // below the level: filtered by logrus already
	restore()
	for _, hs := range logrus.StandardLogger().Hooks {
		for _, h := range hs {
			if _, ok := h.(logrusToZap); ok {
				t.Fatal("logrus hook still installed after restore")
			}
		}
	}

	entries := logs.AllUntimed()
	var got []string
	for _, e := range entries {
		var fields []string
		for k, v := range e.ContextMap() {
			fields = append(fields, k+"="+fmt.Sprint(v))
		}
		got = append(got, e.LoggerName+" "+e.Level.String()+" "+e.Message+" "+strings.Join(sorted(fields), " "))
	}
	want := []string{
		"iceberg warn downcasting nanosecond timestamp column=ts err=x g.n=2",
		"iceberg error commit table=shop.orders w.attempt=3 w.took=1s",
		"iceberg info WARNING: failed to delete old metadata file: f.json ",
		"kcl error Error in refreshing lease error=gone shard=shard-0",
		"kcl warn Error in refreshing lease on shard: shard-1 for worker: w1. Error: lease not acquired: ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("routed logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := entries[0]; !e.Caller.Defined || !strings.HasSuffix(e.Caller.File, "logging_test.go") {
		t.Errorf("slog entry caller %v, want this test file", e.Caller)
	}
}

func sorted(s []string) []string { sort.Strings(s); return s }

func TestNewLoggerJSON(t *testing.T) {
	cfg := defaultConfig()
	cfg.LogFormat, cfg.LogLevel = "json", "debug"
	l, err := newLogger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Core().Enabled(zapcore.DebugLevel) {
		t.Fatal("log_level debug not applied")
	}
	cfg.LogLevel = "loud"
	if _, err := newLogger(cfg); err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Fatalf("bad level: %v", err)
	}
}

func TestAWSLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := awsLogger(zap.New(core))
	l.Logf(logging.Warn, "failed to close HTTP response body: %s", "checksum")
	l.Logf(logging.Debug, "retrying")
	got := logs.AllUntimed()
	if len(got) != 1 || got[0].LoggerName != "aws" || got[0].Level != zapcore.WarnLevel || got[0].Message != "failed to close HTTP response body: checksum" {
		t.Fatalf("aws log entries %+v", got)
	}
}

// Snapshot ids reach JSON logs as strings, whoever logs them (the sink logs zap.Int64).
func TestJSONLogsWriteSnapshotIDsAsStrings(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(snapshotIDCore{core})
	const id int64 = 9007199254740993 // 2^53 + 1: a double rounds it
	log.With(zap.Int64("parent-snapshot-id", id-1)).Info("commit", zap.Int64("snapshot", id), zap.Int64("starting_snapshot", id),
		zap.Int("snapshots", 4), zap.Int64("rows", 7), zap.Uint64("iceberg.snapshot_id", uint64(id)))
	e := logs.All()[0].ContextMap()
	for k, want := range map[string]any{
		"snapshot": "9007199254740993", "starting_snapshot": "9007199254740993", "iceberg.snapshot_id": "9007199254740993",
		"parent-snapshot-id": "9007199254740992", "snapshots": int64(4), "rows": int64(7),
	} {
		if e[k] != want {
			t.Errorf("%s = %#v, want %#v", k, e[k], want)
		}
	}
	cfg := defaultConfig()
	cfg.LogFormat = "json"
	if l, err := newLogger(cfg); err != nil {
		t.Fatal(err)
	} else if _, ok := l.Core().(snapshotIDCore); !ok {
		t.Fatalf("newLogger's core is %T, want snapshotIDCore", l.Core())
	}
}
