package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// Every command of the table is listed by --help, -h and help, in the table's order.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: dms2iceberg <command>") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		last := 0
		for _, c := range commands {
			i := strings.Index(out, "\n  "+c.name+" ")
			if i < 0 || !strings.Contains(out[i:], c.summary) {
				t.Errorf("%v does not list %s with its summary:\n%s", args, c.name, out)
				continue
			}
			if i < last {
				t.Errorf("%v lists %s out of the table's order", args, c.name)
			}
			last = i
		}
	}
	for _, want := range []string{"run", "demo", "gen", "verify", "status", "maintain", "dlq", "decode", "version"} {
		if lookupCommand(want) == nil {
			t.Errorf("command %s is not in the table", want)
		}
	}
}

// --help and -h on any command print its usage on stdout and exit 0; so does help <command>.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			code, out, errOut := runCLI(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
			}
			if !strings.HasPrefix(out, "usage: dms2iceberg "+c.name) || !strings.Contains(out, "-") {
				t.Errorf("%v printed no usage of %s with flags:\n%s", args, c.name, out)
			}
		}
	}
	// A subcommand's help is its command's.
	if code, out, _ := runCLI(t, "dlq", "list", "--help"); code != 0 || !strings.Contains(out, "dms2iceberg dlq list") {
		t.Errorf("dlq list --help: exit %d\n%s", code, out)
	}
	// Commands that read a configuration take it from $DMS2ICEBERG_CONFIG too.
	for _, name := range []string{"run", "demo", "verify", "status", "maintain", "dlq", "decode"} {
		if _, out, _ := runCLI(t, name, "--help"); !strings.Contains(out, "env DMS2ICEBERG_CONFIG") {
			t.Errorf("%s --help does not name DMS2ICEBERG_CONFIG:\n%s", name, out)
		}
	}
}

// Usage errors (unknown command or flag, bad flag value, missing required flag, unexpected
// argument, missing subcommand) exit 2 with the reason and a hint on stderr, before any work.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, c := range commands {
		code, out, errOut := runCLI(t, c.name, "--no-such-flag")
		if code != 2 || out != "" || !strings.Contains(errOut, "dms2iceberg "+c.name+": flag provided but not defined: -no-such-flag") ||
			!strings.Contains(errOut, "Run 'dms2iceberg "+c.name+" --help'") {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q", c.name, code, out, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: dms2iceberg"},
		{[]string{"no-such-command"}, `unknown command "no-such-command"`},
		{[]string{"gen", "--expected", "x"}, "--stream is required"},
		{[]string{"gen", "--stream", "s", "--expected", "x", "--shards", "many"}, "invalid value"},
		{[]string{"verify"}, "--expected is required"},
		{[]string{"status", "extra"}, "unexpected arguments: extra"},
		{[]string{"decode", "file.json"}, "the messages are read from stdin"},
		{[]string{"version", "extra"}, "unexpected arguments"},
		{[]string{"dlq"}, "a subcommand is required"},
		{[]string{"dlq", "purge"}, `unknown subcommand "purge"`},
		{[]string{"dlq", "--json", "list"}, "comes before the flags"},
		{[]string{"dlq", "list", "--no-such-flag"}, "flag provided but not defined"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// exitStatus is the one place that maps a command's error to the exit status.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, 0, ""},
		{errors.New("catalog: unreachable"), 1, "dms2iceberg x: catalog: unreachable\n"},
		{errExplained, 1, ""},
		{exitCode(1), 1, ""},
		{usageErrorf("--stream is required"), 2, "dms2iceberg x: --stream is required\nRun 'dms2iceberg x --help' for usage.\n"},
		{&helpRequest{print: func(w io.Writer) { _, _ = w.Write([]byte("usage")) }}, 0, ""},
	} {
		var out, errb bytes.Buffer
		if code := exitStatus("x", tc.err, &out, &errb); code != tc.code || errb.String() != tc.printed {
			t.Errorf("exitStatus(%v) = %d, stderr %q; want %d, %q", tc.err, code, errb.String(), tc.code, tc.printed)
		}
	}
}

func TestVersion(t *testing.T) {
	if code, _, errOut := runCLI(t, "version", "--json"); code != 0 || errOut != "" {
		t.Fatalf("version --json: exit %d, stderr %q", code, errOut)
	}
	info, _ := debug.ReadBuildInfo()
	var out bytes.Buffer
	if err := writeVersion(&out, buildVersion(info), true); err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("version --json printed %q: %v", out.String(), err)
	}
	if v.GoVersion != runtime.Version() || v.Version == "" || v.Module == "" {
		t.Fatalf("version %+v", v)
	}
	if code, _, _ := runCLI(t, "--version"); code != 0 {
		t.Fatalf("--version: exit %d", code)
	}

	info = &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "example.com/m", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := buildVersion(info)
	want := versionInfo{Module: "example.com/m", Version: "v1.2.3", Revision: "abc123", RevisionTime: "2026-01-02T03:04:05Z", Modified: true, GoVersion: "go1.99"}
	if got != want {
		t.Fatalf("buildVersion = %+v, want %+v", got, want)
	}
	var b bytes.Buffer
	if err := writeVersion(&b, got, false); err != nil {
		t.Fatal(err)
	}
	if s := b.String(); !strings.Contains(s, "dms2iceberg v1.2.3") || !strings.Contains(s, "abc123 (modified) 2026-01-02T03:04:05Z") || !strings.Contains(s, "go1.99") {
		t.Fatalf("version text:\n%s", s)
	}
	if v := buildVersion(nil); v.Version != "(devel)" || v.GoVersion != runtime.Version() {
		t.Fatalf("buildVersion(nil) = %+v", v)
	}
}
