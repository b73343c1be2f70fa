package repotest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// moduleOf returns the folder, relative to the root, of the module that
// holds the package folder pkg: the nearest folder with a go.mod.
func moduleOf(t *testing.T, pkg string) string {
	t.Helper()
	for dir := pkg; ; dir = filepath.ToSlash(filepath.Dir(dir)) {
		if _, err := os.Stat(filepath.Join(root(t), dir, "go.mod")); err == nil {
			return dir
		}
		if dir == "." {
			t.Fatalf("no go.mod above %s", pkg)
		}
	}
}

// goFiles returns the Go files of the repository that keep says yes to,
// by package folder; folders whose names start with a dot, and testdata,
// are left out.
func goFiles(t *testing.T, keep func(path string) bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	base := root(t)
	err := filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != base {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && keep(path) {
			rel, _ := filepath.Rel(base, filepath.Dir(path))
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNoModuleImportsAnotherModulesInternals: the go command lets a nested
// module import the root module's internal packages, as their paths
// share a prefix, but such a module can then not be released apart from
// that very version of the root module.
func TestNoModuleImportsAnotherModulesInternals(t *testing.T) {
	for pkg, files := range goFiles(t, func(string) bool { return true }) {
		mod := moduleOf(t, pkg)
		for _, imp := range imports(t, files) {
			rel, ours := strings.CutPrefix(imp, module+"/")
			if !ours || !(strings.Contains(rel, "/internal/") || strings.HasPrefix(rel, "internal/")) {
				continue
			}
			in, _, _ := strings.Cut(rel, "internal/")
			if got := moduleOf(t, filepath.ToSlash(filepath.Clean("./"+in))); got != mod {
				t.Errorf("%s (module %s) imports %s of module %s", pkg, mod, imp, got)
			}
		}
	}
}

// TestPipelineFunctionsAreShort keeps the call path readable: no function
// of package pipeline is over 40 lines.
func TestPipelineFunctionsAreShort(t *testing.T) {
	fs := token.NewFileSet()
	for _, f := range sources(t)["pipeline"] {
		af, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1; n > 40 {
					t.Errorf("%s: %s is %d lines", filepath.Base(f), fd.Name.Name, n)
				}
			}
		}
	}
}
