package dms

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGolden")

// TestGolden decodes every testdata/golden/*.dms file the way `dms2iceberg decode` does (Scanner
// + Normalizer) and compares the JSON lines with the .golden file next to it. Run
// `go test ./pkg/dms -run TestGolden -update` to rewrite them, then review the diff: the inputs
// are built from the examples and rules of shared/dms-format.md, so a changed golden line is a
// changed behaviour.
//
// Input files are DMS messages in either MessageFormat (one per line, or cJSON pretty printed),
// plus directive lines that start with '#' in the first column:
//
//	# any comment
//	#config before-image-field=old bi=true bi-prefix=BI_ bi-suffix=_x timestamptz=true
//	#raw "<Go-quoted bytes>"   (a message that a text file cannot hold: empty, binary)
//
// #config applies to the whole file and must come before the first message.
func TestGolden(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("testdata", "golden", "*.dms"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".dms")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := runGolden(t, src)
			path := strings.TrimSuffix(in, ".dms") + ".golden"
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				for i := range max(len(gl), len(wl)) {
					var g, w string
					if i < len(gl) {
						g = gl[i]
					}
					if i < len(wl) {
						w = wl[i]
					}
					if g != w {
						t.Fatalf("%s line %d differs:\ngot  %s\nwant %s", path, i+1, g, w)
					}
				}
			}
		})
	}
}

// runGolden splits src into messages and directives and returns the normalised JSON lines.
func runGolden(t *testing.T, src []byte) []byte {
	t.Helper()
	cfg := DefaultConfig()
	var opts TypeOptions
	// Directive lines are blanked (keeping line numbers) and raw messages are queued by the line
	// they stand on.
	lines := bytes.SplitAfter(src, []byte("\n"))
	raws := map[int][]byte{}
	for i, l := range lines {
		if len(l) == 0 || l[0] != '#' {
			continue
		}
		text := strings.TrimSpace(string(l))
		switch {
		case strings.HasPrefix(text, "#config "):
			for _, kv := range strings.Fields(strings.TrimPrefix(text, "#config ")) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "before-image-field":
					cfg.BeforeImageField = v
				case "bi":
					cfg.BIEnabled = v == "true"
				case "bi-prefix":
					cfg.BIPrefix = v
				case "bi-suffix":
					cfg.BISuffix = v
				case "timestamptz":
					opts.TimestampTZ = v == "true"
				default:
					t.Fatalf("line %d: unknown #config key %q", i+1, k)
				}
			}
		case strings.HasPrefix(text, "#raw "):
			b, err := strconv.Unquote(strings.TrimPrefix(text, "#raw "))
			if err != nil {
				t.Fatalf("line %d: #raw: %v", i+1, err)
			}
			raws[i+1] = []byte(b)
		}
		lines[i] = []byte("\n")
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("#config: %v", err)
	}
	n := NewNormalizer(cfg, opts)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	emit := func(msg []byte, line int) {
		r := n.Normalize(msg)
		r.Line = line
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	// Messages and raw directives in line order.
	sc := NewScanner(bytes.NewReader(bytes.Join(lines, nil)))
	line := 0
	flushRaws := func(upTo int) {
		for ; line < upTo; line++ {
			if b, ok := raws[line]; ok {
				emit(b, line)
			}
		}
	}
	for sc.Scan() {
		flushRaws(sc.Line())
		emit(sc.Message(), sc.Line())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flushRaws(len(lines) + 1)
	return out.Bytes()
}
