// Package repotest checks the repository as a whole: the layering of its
// packages, the lean module graph of the core module, and that the README's
// code is code that runs.
package repotest

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/resiliencekit/resiliencekit"

// root is the repository's top folder.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// layer ranks each package folder as the README lists the layers, bottom
// first; a package may import only packages of its own layer or below.
func layer(pkg string) (int, bool) {
	top, _, _ := strings.Cut(pkg, "/")
	switch {
	case pkg == "resilience", pkg == "idempotencykey":
		return 0, true
	case pkg == "internal/classify", pkg == "internal/safe", pkg == "internal/tally", pkg == "internal/window", pkg == "internal/monotime",
		pkg == "internal/sendtime":
		return 1, true
	case pkg == "retrypolicy", pkg == "breaker", pkg == "throttle", pkg == "limit", pkg == "hedge":
		return 2, true
	case pkg == "pipeline":
		return 3, true
	case top == "httpclient", top == "idempotency", top == "deadline", top == "chaos", top == "slogevents", top == "retrysignal",
		top == "redis", top == "sql", top == "otelevents", top == "grpc", top == "registry", top == "dashboard":
		return 4, true
	case top == "examples", top == "integration", top == "benchmarks", top == "internal":
		return 5, true
	}
	return 0, false
}

// sources returns the non-test Go files of the repository by package
// folder.
func sources(t *testing.T) map[string][]string {
	t.Helper()
	return goFiles(t, func(path string) bool { return !strings.HasSuffix(path, "_test.go") })
}

func imports(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range af.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			out = append(out, p)
		}
	}
	return out
}

func TestNoUpwardImports(t *testing.T) {
	pkgs := sources(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages", len(pkgs))
	}
	for pkg, files := range pkgs {
		rank, ok := layer(pkg)
		if !ok {
			t.Errorf("package %s has no layer: add it to layer() and the README", pkg)
			continue
		}
		for _, imp := range imports(t, files) {
			rel, ours := strings.CutPrefix(imp, module+"/")
			if !ours {
				continue
			}
			if r, ok := layer(rel); !ok || r > rank {
				t.Errorf("%s (layer %d) imports %s (layer %d), above it", pkg, rank, rel, r)
			}
		}
	}
}

// TestVocabularyIsStdlibOnly: the vocabulary, which every package may
// import, clients and servers alike, brings no dependency.
func TestVocabularyIsStdlibOnly(t *testing.T) {
	pkgs := sources(t)
	for _, pkg := range []string{"resilience", "idempotencykey"} {
		if pkgs[pkg] == nil {
			t.Errorf("no package %s", pkg)
		}
		for _, imp := range imports(t, pkgs[pkg]) {
			if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}

// serverPackages are the packages of the server side: the idempotency
// middleware and its guard, the stores and their test suite, and the gRPC
// interceptor on the guard. What a client shares with them (the names of
// the key on the wire, its form) is in idempotencykey. deadline,
// retrysignal and grpc/grpcsignal hold both sides of one convention in one
// package, and are not on the list.
var serverPackages = []string{
	"idempotency", "idempotency/storetest", "redis/idempotencystore", "sql/idempotencystore", "grpc/grpcidempotency",
}

// clientPackages are the packages of the client side.
var clientPackages = []string{"httpclient", "grpc/grpcclient"}

// TestClientsImportNoServerPackage: a client package depends on no server
// package, directly or through another package of ours, not even for a
// constant.
func TestClientsImportNoServerPackage(t *testing.T) {
	pkgs := sources(t)
	for _, pkg := range slices.Concat(serverPackages, clientPackages) {
		if pkgs[pkg] == nil {
			t.Errorf("no package %s: update the lists", pkg)
		}
	}
	for _, client := range clientPackages {
		by := map[string]string{client: ""} // each package reached, by the one that imports it
		for queue := []string{client}; len(queue) > 0; queue = queue[1:] {
			for _, imp := range imports(t, pkgs[queue[0]]) {
				rel, ours := strings.CutPrefix(imp, module+"/")
				if _, seen := by[rel]; !ours || seen {
					continue
				}
				by[rel] = queue[0]
				queue = append(queue, rel)
				if slices.Contains(serverPackages, rel) {
					t.Errorf("client package %s imports server package %s (in %s)", client, rel, queue[0])
				}
			}
		}
	}
}

// TestNoAssertionLibraryOutsideTests keeps testify out of what users
// import, such as idempotency/storetest.
func TestNoAssertionLibraryOutsideTests(t *testing.T) {
	for pkg, files := range sources(t) {
		for _, imp := range imports(t, files) {
			if strings.HasPrefix(imp, "github.com/stretchr/testify") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}

// TestCoreModuleGraphIsLean builds the module graph of a program that
// imports the core packages, as a user's would be.
func TestCoreModuleGraphIsLean(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module scratch\n\ngo 1.26.0\n\nrequire "+module+" v0.0.0\n\nreplace "+module+" => "+root(t)+"\n")
	write("main.go", `package main

import (
	_ "`+module+`/httpclient"
	_ "`+module+`/idempotency"
	_ "`+module+`/pipeline"
)

func main() {}
`)
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	all := run("list", "-m", "all")
	t.Logf("go list -m all:\n%s", all)
	for _, heavy := range []string{"go-redis", "opentelemetry", "toxiproxy", "miniredis", "gopher-lua", "grpc"} {
		if strings.Contains(all, heavy) {
			t.Errorf("the core module graph holds %s", heavy)
		}
	}
}
