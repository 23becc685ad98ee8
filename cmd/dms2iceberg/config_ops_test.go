package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpsConfigDefaultsAndKeys(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "stream: s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "127.0.0.1:9464" || cfg.httpAddrSet {
		t.Fatalf("default http_addr %q (set %v)", cfg.HTTPAddr, cfg.httpAddrSet)
	}
	if cfg.PostCommit.Enabled() || cfg.PostCommit.Timeout != 10*time.Second || cfg.PostCommit.QueueLength != 1000 {
		t.Fatalf("default post_commit %+v", cfg.PostCommit)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	cfg, err = loadConfig(writeConfig(t, `stream: s
http_addr: ""
post_commit:
  command: [/usr/local/bin/refresh, --table]
  url: https://hooks.example/refresh
  headers: {Authorization: Bearer x}
  timeout: 3s
  queue_length: 5
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "" || !cfg.httpAddrSet {
		t.Fatalf("http_addr %q (set %v)", cfg.HTTPAddr, cfg.httpAddrSet)
	}
	pc := cfg.PostCommit
	if !pc.Enabled() || len(pc.Command) != 2 || pc.URL != "https://hooks.example/refresh" || pc.Headers["Authorization"] != "Bearer x" ||
		pc.Timeout != 3*time.Second || pc.QueueLength != 5 {
		t.Fatalf("post_commit %+v", pc)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestOpsConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.HTTPAddr = "9464" }, "http_addr"},
		{func(c *Config) { c.PostCommit.Command = []string{""} }, "post_commit.command"},
		{func(c *Config) { c.PostCommit.URL = "ftp://x/y" }, "post_commit.url"},
		{func(c *Config) { c.PostCommit.URL = "http://" }, "post_commit.url"},
		{func(c *Config) { c.PostCommit.Timeout = 0 }, "post_commit.timeout"},
		{func(c *Config) { c.PostCommit.QueueLength = 0 }, "post_commit.queue_length"},
	} {
		cfg := defaultConfig()
		cfg.Stream, cfg.Region = "s", "us-east-1" // no default region any more (region.go)
		cfg.resolve()
		tc.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}
	cfg := defaultConfig()
	cfg.Stream, cfg.Region = "s", "us-east-1"
	cfg.resolve()
	cfg.HTTPAddr = ":0"
	if err := cfg.Validate(); err != nil {
		t.Fatalf(":0 rejected: %v", err)
	}
}
