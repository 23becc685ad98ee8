package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func runConfigCheck(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := configCommand(context.Background(), args, &out, &errOut)
	return exitStatus("config", err, &out, &errOut), out.String(), errOut.String()
}

// CI runs config check on every shipped example: each must be accepted.
func TestConfigCheckAcceptsEveryExample(t *testing.T) {
	files, err := filepath.Glob("../../docs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, out, errOut := runConfigCheck(t, "check", "--config", f)
			if code != 0 || !strings.Contains(out, "stream:") {
				t.Fatalf("exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
			}
			code, out, _ = runConfigCheck(t, "check", "--json", "--config", f)
			var rep configReport
			if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || !rep.Valid || rep.Config == nil {
				t.Fatalf("--json: exit %d, %v, %+v", code, err, rep)
			}
		})
	}
}

// A broken configuration exits 1 naming the YAML path of the bad value.
func TestConfigCheckRejectsBrokenConfigNamingThePath(t *testing.T) {
	for name, tc := range map[string]struct{ body, path string }{
		"invalid value": {"stream: s\nsink:\n  flush_rows: -1\n", "sink.flush_rows"},
		"unknown key":   {"stream: s\nsink:\n  maintenance:\n    intervall: 1h\n", "sink.maintenance.intervall"},
		"bad type":      {"stream: s\nconsumer:\n  max_records: lots\n", "consumer.max_records"},
		"bad size":      {"stream: s\nsink:\n  flush_bytes: 64XB\n", "sink.flush_bytes"},
		"unset var":     {"stream: s\npost_commit:\n  url: ${DMS2ICEBERG_TEST_UNSET_URL}\n", "post_commit.url"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runConfigCheck(t, "check", "--config", writeConfig(t, tc.body))
			if code != 1 || !strings.Contains(errOut, tc.path) || out != "" {
				t.Fatalf("exit %d, want 1 naming %s\nstderr: %s\nstdout: %s", code, tc.path, errOut, out)
			}
			code, out, _ = runConfigCheck(t, "check", "--json", "--config", writeConfig(t, tc.body))
			var rep configReport
			if err := json.Unmarshal([]byte(out), &rep); code != 1 || err != nil || rep.Valid || !strings.Contains(rep.Error, tc.path) {
				t.Fatalf("--json: exit %d, %v, %+v", code, err, rep)
			}
		})
	}
}

func TestConfigCheckUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"lint"}, {"check", "extra"}, {"check", "--nope"}} {
		if code, _, _ := runConfigCheck(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	for _, args := range [][]string{{"--help"}, {"check", "--help"}} {
		if code, out, _ := runConfigCheck(t, args...); code != 0 || !strings.Contains(out, "config check") {
			t.Errorf("%q: exit %d, out %q", args, code, out)
		}
	}
}

// Secrets never reach the output; the rest of the values do.
func TestConfigCheckRedactsSecrets(t *testing.T) {
	t.Setenv("DMS2ICEBERG_TEST_PG_PASSWORD", "pg-s3cret")
	body := `stream: s
sink:
  catalog:
    type: sql
    uri: postgres://svc:${DMS2ICEBERG_TEST_PG_PASSWORD}@db.internal:5432/iceberg?sslmode=require&password=q-s3cret
    warehouse: s3://bucket/prefix
    properties:
      credential: id:client-s3cret
      token: tok-s3cret
      s3.secret-access-key: sak-s3cret
      s3.access-key-id: AKIAVISIBLE
post_commit:
  url: https://user:url-s3cret@hooks.example/refresh
  headers: {X-Api: hdr-s3cret}
`
	for _, asJSON := range []bool{false, true} {
		args := []string{"check", "--config", writeConfig(t, body)}
		if asJSON {
			args = append(args, "--json")
		}
		code, out, errOut := runConfigCheck(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.Contains(out, "s3cret") {
			t.Fatalf("a secret is printed:\n%s", out)
		}
		for _, want := range []string{"svc:redacted@db.internal:5432", "AKIAVISIBLE", redacted, "hooks.example/refresh"} {
			if !strings.Contains(out, want) {
				t.Fatalf("json=%v: %q missing from\n%s", asJSON, want, out)
			}
		}
	}
}

func TestConfigEnvExpansion(t *testing.T) {
	env := map[string]string{"A": "x", "EMPTY": ""}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"${A}": "x", "pre-${A}-post": "pre-x-post", "${UNSET:-d}": "d", "${EMPTY:-d}": "d", "${A:-d}": "x",
		"${EMPTY}": "", "$${A}": "${A}", "$A and $": "$A and $", "${UNSET:-}": "",
	} {
		got, err := expandEnv(in, getenv)
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"${UNSET}", "${A", "${1A}", "${}"} {
		if got, err := expandEnv(in, getenv); err == nil {
			t.Errorf("%q: %q accepted", in, got)
		}
	}
}

// ${VAR} reaches typed settings too: a number from the environment decodes as a number.
func TestConfigEnvExpansionTypedAndQuoted(t *testing.T) {
	t.Setenv("DMS2ICEBERG_TEST_ROWS", "1234")
	t.Setenv("DMS2ICEBERG_TEST_STREAM", "orders")
	cfg, err := loadConfig(writeConfig(t, "stream: \"${DMS2ICEBERG_TEST_STREAM}\"\nsink:\n  flush_rows: ${DMS2ICEBERG_TEST_ROWS}\n  flush_interval: ${DMS2ICEBERG_TEST_UNSET:-7s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stream != "orders" || cfg.Sink.FlushRows != 1234 || cfg.Sink.FlushInterval.String() != "7s" {
		t.Fatalf("stream %q flush_rows %d flush_interval %s", cfg.Stream, cfg.Sink.FlushRows, cfg.Sink.FlushInterval)
	}
}

func TestConfigSizesWithUnits(t *testing.T) {
	for in, want := range map[string]int64{
		"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "4096": 4096, "10MB": 10e6, "1.5GiB": 3 << 29,
		"2 mib": 2 << 20, "7B": 7, "1Ti": 1 << 40,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "12XB", "MiB", "1e3", "99999999999TiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("%q: %d accepted", in, got)
		}
	}
	cfg, err := loadConfig(writeConfig(t, `stream: s
sink:
  flush_bytes: 64MiB
  tables:
    shop.orders: {flush_bytes: 512KiB}
  maintenance:
    target_file_size: 1GiB
    max_metadata_bytes: 4194304
`))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Sink.Maintenance
	if cfg.Sink.FlushBytes != 64<<20 || cfg.Sink.Tables["shop.orders"].FlushBytes != 512<<10 ||
		m.TargetFileSize != 1<<30 || m.MaxMetadataBytes != 4<<20 {
		t.Fatalf("flush_bytes %d, table %d, target_file_size %d, max_metadata_bytes %d",
			cfg.Sink.FlushBytes, cfg.Sink.Tables["shop.orders"].FlushBytes, m.TargetFileSize, m.MaxMetadataBytes)
	}
	// A unit is not accepted where the setting is not a size.
	if _, err := loadConfig(writeConfig(t, "stream: s\nsink:\n  flush_rows: 64MiB\n")); err == nil || !strings.Contains(err.Error(), "sink.flush_rows") {
		t.Fatalf("flush_rows: 64MiB: %v", err)
	}
}
