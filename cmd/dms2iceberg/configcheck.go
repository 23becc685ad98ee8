package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

const configUsage = `usage: dms2iceberg config check [--config FILE] [--json]

Validates the configuration (the YAML file over the defaults, with the environment: ${VAR}
expansion, DMS2ICEBERG_* overrides, the region from the AWS SDK's chain) and prints the
effective configuration with every default filled in and secrets redacted: passwords in URIs,
post_commit.headers, and every key named like secret, password, token, credential or
authorization. An invalid configuration exits 1 naming the YAML path of the value; a usage error
exits 2.

flags:
`

// redacted replaces a secret in config check's output.
const redacted = "<redacted>"

func runConfig(ctx context.Context, args []string) error {
	return configCommand(ctx, args, os.Stdout, os.Stderr)
}

// configCommand is runConfig with its output streams.
func configCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fs := newFlags("config", configUsage)
		if err := fs.parse(args); err != nil {
			return err
		}
		return usageErrorf("missing subcommand: config check")
	}
	fs := newFlags("config check", configUsage).withConfig("YAML configuration file")
	asJSON := fs.Bool("json", false, "print one JSON object {file, valid, error, config}")
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	cfg, err := fs.validConfig(ctx)
	return reportConfig(stdout, stderr, *fs.configPath, cfg, err, *asJSON)
}

// configReport is config check's JSON output.
type configReport struct {
	File   string `json:"file"`
	Valid  bool   `json:"valid"`
	Error  string `json:"error,omitempty"`
	Config any    `json:"config,omitempty"`
}

// reportConfig prints the effective configuration (redacted) or the reason it is invalid.
func reportConfig(stdout, stderr io.Writer, file string, cfg Config, cfgErr error, asJSON bool) error {
	if cfgErr != nil {
		if asJSON {
			if err := writeJSON(stdout, configReport{File: file, Error: cfgErr.Error()}); err != nil {
				return err
			}
		}
		fmt.Fprintf(stderr, "dms2iceberg config check: %v\n", cfgErr)
		return errExplained
	}
	node, err := redactedConfig(cfg)
	if err != nil {
		return err
	}
	if asJSON {
		var v any
		if err := node.Decode(&v); err != nil {
			return fmt.Errorf("config check: %w", err)
		}
		return writeJSON(stdout, configReport{File: file, Valid: true, Config: v})
	}
	enc := yaml.NewEncoder(stdout)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	return enc.Close()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// secretKey matches the keys whose values are secrets wherever they are.
var secretKey = regexp.MustCompile(`(?i)secret|password|passwd|token|credential|authorization|api[-_]?key`)

// redactedConfig is cfg as a YAML node with its secrets replaced by redacted.
func redactedConfig(cfg Config) (*yaml.Node, error) {
	var root yaml.Node
	if err := root.Encode(cfg); err != nil {
		return nil, fmt.Errorf("config check: encode: %w", err)
	}
	_ = walkYAML(&root, nil, func(path []string, n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return nil
		}
		if isSecretPath(path) && n.Value != "" {
			n.Value, n.Style, n.Tag = redacted, 0, "!!str"
			return nil
		}
		n.Value = redactURL(n.Value)
		return nil
	})
	return &root, nil
}

// isSecretPath reports whether the value at path is a secret: any key of post_commit.headers,
// or a key (at any depth) named like a secret.
func isSecretPath(path []string) bool {
	if len(path) == 3 && path[0] == "post_commit" && path[1] == "headers" {
		return true
	}
	for _, p := range path {
		if secretKey.MatchString(p) {
			return true
		}
	}
	return false
}

// redactURL hides the password of a URL's user info and query parameters named like secrets
// (postgres://user:pw@host/db?password=...); other values are returned as they are.
func redactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	changed := false
	if _, ok := u.User.Password(); ok {
		u.User, changed = url.UserPassword(u.User.Username(), "redacted"), true
	}
	if q := u.Query(); len(q) > 0 {
		for k := range q {
			if secretKey.MatchString(k) {
				q.Set(k, "redacted")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return s
	}
	return u.String()
}
