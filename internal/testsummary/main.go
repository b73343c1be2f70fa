// Command testsummary reads the output of `go test -json` on its standard
// input and says what was tested and what was not: a line per package as it
// finishes (as go test prints them), the output of every test and package
// that failed, the tests that were skipped with the reason each gave, and a
// closing line
//
//	tests: 812 passed, 0 failed, 9 skipped
//
// It exits with status 1 if a test or a package (a build) failed, if a
// package started and the input ended before it finished (the go command
// was killed), or if no test passed at all. Subtests count as tests. Lines that are not JSON (an
// error of the go command itself) are printed as they come.
//
//	go test -json -race -count=1 ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Output      string
	Elapsed     float64
	FailedBuild string // fail: the import path whose build failed
}

type testKey struct{ pkg, test string }

// summary accumulates the events of a run.
type summary struct {
	out      io.Writer
	output   map[testKey][]string // lines of output by test; test "" is the package's
	build    map[string][]string  // build output by import path
	failedBy map[string]string    // package: the import path whose build failed it
	started  map[string]bool      // packages started and not yet finished
	running  map[testKey]bool     // started and not yet finished
	passed   int
	failed   []testKey
	skipped  []testKey
	failPkgs []string
}

func newSummary(out io.Writer) *summary {
	return &summary{
		out:      out,
		output:   map[testKey][]string{},
		build:    map[string][]string{},
		failedBy: map[string]string{},
		started:  map[string]bool{},
		running:  map[testKey]bool{},
	}
}

func (s *summary) add(e event) {
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		ip := importPath(e.ImportPath)
		s.build[ip] = append(s.build[ip], e.Output)
	case "start":
		s.started[e.Package] = true
	case "output":
		s.output[k] = append(s.output[k], e.Output)
	case "run":
		s.running[k] = true
	case "pass", "fail", "skip":
		delete(s.running, k)
		if e.Test == "" {
			delete(s.started, e.Package)
			if e.FailedBuild != "" {
				s.failedBy[e.Package] = importPath(e.FailedBuild)
			}
			s.packageDone(e)
			return
		}
		switch e.Action {
		case "pass":
			s.passed++
			delete(s.output, k)
		case "fail":
			s.failed = append(s.failed, k)
		case "skip":
			s.skipped = append(s.skipped, k)
		}
	}
}

// importPath returns the package path of an ImportPath such as
// "pkg [pkg.test]", a test variant's.
func importPath(p string) string {
	ip, _, _ := strings.Cut(p, " ")
	return ip
}

// packageDone prints the package's line, as go test would.
func (s *summary) packageDone(e event) {
	switch e.Action {
	case "pass":
		fmt.Fprintf(s.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
	case "skip": // no test files
		return
	case "fail":
		s.failPkgs = append(s.failPkgs, e.Package)
		fmt.Fprintf(s.out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
	}
}

// reason returns what a skipped test said: its output less go test's own
// "=== RUN" and "--- SKIP" lines.
func (s *summary) reason(k testKey) string {
	var lines []string
	for _, l := range s.output[k] {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " / ")
}

// report prints the failures, the skipped tests and the closing line, and
// returns whether the run is a success.
func (s *summary) report() bool {
	w := s.out
	for p := range s.started { // the input ended first: the go command died
		s.failPkgs = append(s.failPkgs, p)
		s.output[testKey{p, ""}] = append(s.output[testKey{p, ""}], "    (no result: the input ended before the package finished)\n")
	}
	sort.Strings(s.failPkgs)
	if len(s.failed) > 0 || len(s.failPkgs) > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, k := range s.failed {
			fmt.Fprintf(w, "--- FAIL: %s %s\n", k.pkg, k.test)
			for _, l := range s.output[k] {
				fmt.Fprint(w, l)
			}
		}
		// A package that failed outside its tests: a build error, a panic,
		// a timeout, a TestMain that failed. Its own output says why, and
		// the tests it had started and not finished.
		for _, p := range s.failPkgs {
			fmt.Fprintf(w, "--- FAIL: package %s\n", p)
			for _, l := range s.build[p] {
				fmt.Fprint(w, l)
			}
			if dep := s.failedBy[p]; dep != "" && dep != p {
				for _, l := range s.build[dep] {
					fmt.Fprint(w, l)
				}
			}
			for _, l := range s.output[testKey{p, ""}] {
				fmt.Fprint(w, l)
			}
			for k := range s.running {
				if k.pkg == p && k.test != "" {
					fmt.Fprintf(w, "    (unfinished: %s)\n", k.test)
					for _, l := range s.output[k] {
						fmt.Fprint(w, l)
					}
				}
			}
		}
	}
	if len(s.skipped) > 0 {
		sort.Slice(s.skipped, func(i, j int) bool {
			a, b := s.skipped[i], s.skipped[j]
			return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
		})
		fmt.Fprintf(w, "\nskipped (%d), and why:\n", len(s.skipped))
		for _, k := range s.skipped {
			fmt.Fprintf(w, "  %s %s: %s\n", strings.TrimPrefix(k.pkg, "github.com/resiliencekit/resiliencekit/"), k.test, s.reason(k))
		}
	}
	failed := len(s.failed)
	for _, p := range s.failPkgs { // a package that failed with no failing test counts once
		if !slices.ContainsFunc(s.failed, func(k testKey) bool { return k.pkg == p }) {
			failed++
		}
	}
	ok := failed == 0
	if s.passed == 0 && failed == 0 {
		fmt.Fprintln(w, "\nno test passed")
		ok = false
	}
	fmt.Fprintf(w, "\ntests: %d passed, %d failed, %d skipped\n", s.passed, failed, len(s.skipped))
	return ok
}

func run(in io.Reader, out io.Writer) bool {
	s := newSummary(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: reading input: %v\n", err)
		s.failPkgs = append(s.failPkgs, "(input)")
	}
	return s.report()
}

func main() {
	if !run(os.Stdin, os.Stdout) {
		os.Exit(1)
	}
}
