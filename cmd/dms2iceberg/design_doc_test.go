package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The design document names Go identifiers in backticks; this check fails when one of them is
// not declared in the module, so a rename or a removal in the code cannot leave the design
// describing something that is gone.
//
// Which backticked spans are Go identifiers (the rule, applied by goSpan):
//
//  1. Inline code spans only: text between single backticks outside fenced (```) blocks.
//  2. One trailing argument list is dropped: `Iceberg.Submit(ctx, ev)` is `Iceberg.Submit`.
//  3. What is left must be one to three dot-separated segments of ASCII letters and digits, each
//     starting with a letter: `Ident`, `pkg.Ident`, `Type.Member`, `pkg.Type.Member`. Anything
//     with another character is not a Go identifier: paths (`/`), config keys (`_`, `:`, `<t>`),
//     metric names (`dms2iceberg_...`), property names with `-`, shell commands (spaces), JSON.
//     A span whose last segment is a file extension (`CHANGELOG.md`, `doc.go`) is a file name.
//  4. It must contain both an upper-case and a lower-case letter. All-lower spans are config
//     values, property names (`dms2iceberg.source`) and words (`dv`, `replace`); all-upper ones
//     are other systems' constants (`LATEST`, `GOGC`, `IN`).
//  5. Spans in foreignNames (names of Kinesis, the KCL, DMS, iceberg-go, the standard library)
//     are skipped; every entry must occur in the document and must not be declared in the
//     module, so the list stays as short as the document allows.
//
// A span so chosen must resolve (goNames.resolves) against the declarations of every non-test
// .go file of the module (types, funcs, methods, struct fields, interface methods, consts, vars
// and package names): one segment is any such name; `A.B` is a name B declared at top level in a
// package named A, or a method or field B of a type named A; `A.B.C` is a method or field C of
// type B of package A. A name starting with Test, Benchmark, Fuzz or Example, alone or after
// its package name (`sink.TestX`), is a test function and must be declared in a _test.go file
// of the module (of that package, when named).

// foreignNames are mixed-case names the design document uses that are not declared in this module.
var foreignNames = []string{
	// Kinesis and the KCL
	"ApproximateArrivalTimestamp", "AdjacentParentShardId", "UpdateItem",
	// DMS settings
	"IncludeTransactionDetails", "IncludeNullAndEmpty",
	// iceberg-go and the Go standard library
	"RowDelta", "RewriteFiles", "ReplaceFiles", "ExpireSnapshots", "RewriteManifests",
	"DeleteOrphanFiles", "Transaction.RewriteDataFiles", "t.TempDir",
}

// designDocPath is the design document, relative to this package.
const designDocPath = "../../docs/design.md"

// designDocMaxLines bounds the design document: one short read for a newcomer; history goes
// to CHANGELOG.md and figures to docs/benchmarks.md.
const designDocMaxLines = 600

func TestDesignDocIsShort(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(designDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(doc), "\n"); n > designDocMaxLines {
		t.Errorf("docs/design.md has %d lines, more than %d: move history to CHANGELOG.md and figures to docs/benchmarks.md", n, designDocMaxLines)
	}
}

func TestDesignDocNamesOnlyDeclaredIdentifiers(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(designDocPath)
	if err != nil {
		t.Fatal(err)
	}
	names := moduleNames(t)
	for _, bad := range undeclaredNames(string(doc), names) {
		t.Errorf("docs/design.md names `%s`, which is not declared in the module (rename it in the doc, or add it to foreignNames if it is another system's name)", bad)
	}
	for _, f := range foreignNames {
		if !strings.Contains(string(doc), "`"+f) {
			t.Errorf("foreignNames lists %s, which docs/design.md no longer uses: remove it", f)
		}
		if names.resolves(f) {
			t.Errorf("foreignNames lists %s, which the module declares: remove it", f)
		}
	}
}

// The checker itself: a misspelled identifier is reported in every form, and spans that are not
// Go identifiers are left alone.
func TestDesignDocCheckerReportsMisspelledIdentifiers(t *testing.T) {
	t.Parallel()
	names := moduleNames(t)
	doc := "Good: `sink.New`, `Iceberg.Submit(ctx, ev)`, `checkpoint.Shard.BeginTracked`, `relayRows`, " +
		"`TestDesignDocNamesOnlyDeclaredIdentifiers`, `main.TestEveryMetricIsDocumented`, `maintenance.Config.CommitTimeout`.\n" +
		"Not identifiers: `max_delete_files`, `dms2iceberg.source`, `sink/writer.go`, `ordering: arrival`, " +
		"`dms2iceberg_table_commit_unknown_outcomes_total`, `LATEST`, `dv`, `ApproximateArrivalTimestamp`, `a b`, `CHANGELOG.md`.\n" +
		"```\n`Inside.Fence`\n```\n" +
		"Bad: `sink.Neww`, `Icebergg.Submit`, `Iceberg.Submitt(ctx)`, `relayRowz`, `TestNoSuchTest`, `sink.TestEveryMetricIsDocumented`, " +
		"`maintenance.Config.NoSuchField`.\n"
	got := undeclaredNames(doc, names)
	want := []string{"sink.Neww", "Icebergg.Submit", "Iceberg.Submitt", "relayRowz", "TestNoSuchTest",
		"sink.TestEveryMetricIsDocumented", "maintenance.Config.NoSuchField"}
	if !slices.Equal(got, want) {
		t.Fatalf("undeclared names: got %q, want %q", got, want)
	}
}

// undeclaredNames returns, in document order, each Go identifier span of doc (goSpan) that does
// not resolve in names.
func undeclaredNames(doc string, names *goNames) []string {
	foreign := map[string]bool{}
	for _, f := range foreignNames {
		foreign[f] = true
	}
	var out []string
	for _, span := range inlineCode(doc) {
		id, ok := goSpan(span)
		if !ok || foreign[id] || names.resolves(id) || slices.Contains(out, id) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// inlineCode returns the inline code spans of markdown text outside fenced code blocks.
func inlineCode(doc string) []string {
	var spans []string
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		parts := strings.Split(line, "`")
		for i := 1; i+1 < len(parts); i += 2 {
			spans = append(spans, parts[i])
		}
	}
	return spans
}

var (
	goIdentForm = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*){0,2}$`)
	hasUpper    = regexp.MustCompile(`[A-Z]`)
	hasLower    = regexp.MustCompile(`[a-z]`)
)

// fileExtensions end the file names rule 3 leaves out.
var fileExtensions = map[string]bool{"go": true, "md": true, "yaml": true, "yml": true, "json": true, "jsonl": true, "sh": true, "py": true, "txt": true}

// goSpan applies rules 2–4 of the rule above: the identifier a span names, and whether it is one.
func goSpan(span string) (string, bool) {
	if i := strings.IndexByte(span, '('); i > 0 && strings.HasSuffix(span, ")") {
		span = span[:i]
	}
	if !goIdentForm.MatchString(span) || !hasUpper.MatchString(span) || !hasLower.MatchString(span) {
		return "", false
	}
	if i := strings.LastIndexByte(span, '.'); i > 0 && fileExtensions[span[i+1:]] {
		return "", false
	}
	return span, true
}

// goNames are the identifiers declared in the module.
type goNames struct {
	// all holds every declared name and every package name.
	all map[string]bool
	// top maps a package name to the names declared at its top level.
	top map[string]map[string]bool
	// members maps a type name, and "pkg.Type", to its methods and fields.
	members map[string]map[string]bool
	// tests holds the test, benchmark, fuzz and example functions of _test.go files, by name and
	// by "pkg.Name".
	tests map[string]bool
}

// resolves reports whether id (one to three segments) names a declaration (see the rule above).
func (n *goNames) resolves(id string) bool {
	seg := strings.Split(id, ".")
	if len(seg) <= 2 && isTestName(seg[len(seg)-1]) {
		return n.tests[id]
	}
	switch len(seg) {
	case 1:
		return n.all[id]
	case 2:
		return n.top[seg[0]][seg[1]] || n.members[seg[0]][seg[1]]
	default:
		return n.members[seg[0]+"."+seg[1]][seg[2]]
	}
}

// isTestName reports whether name is the name of a test, benchmark, fuzz or example function.
func isTestName(name string) bool {
	for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// moduleNames parses every .go file of the module: declarations from the non-test files, test
// functions from the _test.go files.
func moduleNames(t *testing.T) *goNames {
	t.Helper()
	root := moduleRoot(t)
	n := &goNames{all: map[string]bool{}, top: map[string]map[string]bool{}, members: map[string]map[string]bool{}, tests: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			for _, decl := range f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && isTestName(fd.Name.Name) {
					n.tests[fd.Name.Name] = true
					n.tests[strings.TrimSuffix(f.Name.Name, "_test")+"."+fd.Name.Name] = true
				}
			}
			return nil
		}
		n.addFile(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// addFile records the declarations of one non-test file.
func (n *goNames) addFile(f *ast.File) {
	pkg := f.Name.Name
	n.all[pkg] = true
	if n.top[pkg] == nil {
		n.top[pkg] = map[string]bool{}
	}
	member := func(typ, name string) {
		n.all[name] = true
		for _, k := range []string{typ, pkg + "." + typ} {
			if n.members[k] == nil {
				n.members[k] = map[string]bool{}
			}
			n.members[k][name] = true
		}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				n.all[d.Name.Name], n.top[pkg][d.Name.Name] = true, true
				continue
			}
			if typ := receiverType(d.Recv.List[0].Type); typ != "" {
				member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					n.all[s.Name.Name], n.top[pkg][s.Name.Name] = true, true
					switch tt := s.Type.(type) {
					case *ast.StructType:
						for _, fl := range tt.Fields.List {
							for _, name := range fieldNames(fl) {
								member(s.Name.Name, name)
							}
						}
					case *ast.InterfaceType:
						for _, m := range tt.Methods.List {
							for _, name := range m.Names {
								member(s.Name.Name, name.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						n.all[name.Name], n.top[pkg][name.Name] = true, true
					}
				}
			}
		}
	}
}

// fieldNames returns a struct field's names; an embedded field is named by its type.
func fieldNames(fl *ast.Field) []string {
	if len(fl.Names) > 0 {
		out := make([]string, len(fl.Names))
		for i, name := range fl.Names {
			out[i] = name.Name
		}
		return out
	}
	if typ := receiverType(fl.Type); typ != "" {
		return []string{typ}
	}
	return nil
}

// receiverType is the name of a receiver's (or embedded field's) type: T, *T, T[P], pkg.T.
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
	return dir
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
