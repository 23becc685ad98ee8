package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The configuration file is read in two passes. The first parses it into a YAML node tree and
// rewrites its scalar values: ${VAR} and ${VAR:-default} take values from the environment (for
// secrets: a file can then be a ConfigMap and the secrets environment variables from a Secret),
// and size settings accept units (64MiB, 1GiB, 512KiB, 10MB; a plain number is bytes). The
// second decodes the result strictly (unknown keys are errors) into Config. Errors name the YAML
// path of the value.

// sizePaths are the settings that hold a byte count ("*" matches any key).
var sizePaths = [][]string{
	{"sink", "flush_bytes"},
	{"sink", "tables", "*", "flush_bytes"},
	{"sink", "maintenance", "target_file_size"},
	{"sink", "maintenance", "max_metadata_bytes"},
}

// prepareConfig returns the YAML text of b with the environment expanded and sizes in bytes (b
// itself when nothing changed) and the YAML path of the key written on each line.
func prepareConfig(b []byte, getenv func(string) (string, bool)) ([]byte, map[int]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, nil, err
	}
	changed := false
	err := walkYAML(&root, nil, func(path []string, n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return nil
		}
		v, err := expandEnv(n.Value, getenv)
		if err != nil {
			return fmt.Errorf("%s (line %d): %w", joinPath(path), n.Line, err)
		}
		if isSizePath(path) {
			size, err := parseSize(v)
			if err != nil {
				return fmt.Errorf("%s (line %d): %w", joinPath(path), n.Line, err)
			}
			v = strconv.FormatInt(size, 10)
		}
		if v != n.Value {
			n.Value, changed = v, true
			if n.Style == 0 || isSizePath(path) {
				n.Style, n.Tag = 0, "" // resolved again from the new text: ${PORT} may be a number
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := b
	if changed {
		if out, err = yaml.Marshal(&root); err != nil {
			return nil, nil, fmt.Errorf("re-encode: %w", err)
		}
		root = yaml.Node{}
		if err := yaml.Unmarshal(out, &root); err != nil {
			return nil, nil, fmt.Errorf("re-parse: %w", err)
		}
	}
	lines := map[int]string{}
	_ = walkYAML(&root, nil, func(path []string, n *yaml.Node) error {
		// A block mapping starts on the line of its first key: the deepest path of a line
		// is the key written there.
		if p := joinPath(path); len(path) > 0 && len(p) > len(lines[n.Line]) {
			lines[n.Line] = p
		}
		return nil
	})
	return out, lines, nil
}

// walkYAML calls fn for every value node under n with its path (mapping keys; sequence items as
// "[i]"), parents before children. Mapping keys themselves are not visited.
func walkYAML(n *yaml.Node, path []string, fn func(path []string, n *yaml.Node) error) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := walkYAML(c, path, fn); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		return nil // the anchor's node is walked where it is defined
	}
	if err := fn(path, n); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := walkYAML(n.Content[i+1], append(path[:len(path):len(path)], n.Content[i].Value), fn); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := walkYAML(c, append(path[:len(path):len(path)], fmt.Sprintf("[%d]", i)), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// joinPath writes a YAML path as dotted keys with [i] for sequence items.
func joinPath(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if i > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

func isSizePath(path []string) bool {
	for _, p := range sizePaths {
		if len(p) != len(path) {
			continue
		}
		match := true
		for i := range p {
			if p[i] != "*" && p[i] != path[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// envName is a variable name of ${NAME}.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces ${NAME} by the variable's value (an error when it is not set) and
// ${NAME:-default} by the value, or default when the variable is unset or empty. $${ is a
// literal ${; any other $ is kept.
func expandEnv(s string, getenv func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' { // $${: literal
			b.WriteString(s[:i])
			b.WriteString("{")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", s)
		}
		expr := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !envName.MatchString(name) {
			return "", fmt.Errorf("${%s}: %q is not an environment variable name", expr, name)
		}
		v, ok := getenv(name)
		switch {
		case hasDef && v == "":
			v = def
		case !ok:
			return "", fmt.Errorf("environment variable %s is not set (write ${%s:-default} for a default)", name, name)
		}
		b.WriteString(v)
	}
}

// sizeUnits are the accepted suffixes of a size, case-insensitive.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

var sizeSyntax = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// parseSize reads a byte count: a plain number, or a number with a unit (KiB, MiB, GiB, TiB;
// KB, MB, GB, TB in powers of 1000), for example 64MiB or 1.5GiB (rounded down to a byte).
func parseSize(s string) (int64, error) {
	m := sizeSyntax.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size (a byte count, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, m[2])
	}
	if !strings.Contains(m[1], ".") {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/unit {
			return 0, fmt.Errorf("%q: out of range", s)
		}
		return n * unit, nil
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil || f*float64(unit) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q: out of range", s)
	}
	return int64(f * float64(unit)), nil
}

// lineRef is "line N: " in yaml.v3's errors.
var lineRef = regexp.MustCompile(`^line (\d+): `)

// namePaths rewrites the "line N: ..." messages of a yaml.TypeError to start with the YAML path
// of that line.
func namePaths(err error, lines map[int]string) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		if sm := lineRef.FindStringSubmatch(m); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			if p, ok := lines[n]; ok {
				msgs[i] = p + " (line " + sm[1] + "): " + m[len(sm[0]):]
			}
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// lookupEnv is os.LookupEnv, the getenv of prepareConfig.
func lookupEnv(k string) (string, bool) { return os.LookupEnv(k) }
