package main

import (
	"strings"
	"testing"
)

const sample = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0}
{"Action":"run","Package":"example.com/a","Test":"TestRedis"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"    redis_test.go:12: RESILIENCEKIT_REDIS_ADDR is not set\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestRedis","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Elapsed":0.5}
{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:9: got 2, want 1\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad","Elapsed":0}
{"Action":"fail","Package":"example.com/b","Elapsed":0.1}
{"ImportPath":"example.com/c","Action":"build-output","Output":"c.go:3:1: syntax error\n"}
{"Action":"fail","Package":"example.com/c","Elapsed":0}
{"Action":"skip","Package":"example.com/d","Elapsed":0}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	if run(strings.NewReader(sample), &out) {
		t.Error("a run with failures reported success")
	}
	got := out.String()
	for _, want := range []string{
		"ok  \texample.com/a\t0.500s\n",
		"--- FAIL: example.com/b TestBad\n    b_test.go:9: got 2, want 1\n",
		"--- FAIL: package example.com/c\nc.go:3:1: syntax error\n",
		"skipped (1), and why:\n  example.com/a TestRedis: redis_test.go:12: RESILIENCEKIT_REDIS_ADDR is not set\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "\ntests: 1 passed, 2 failed, 1 skipped\n") {
		t.Errorf("closing line: got\n%s", got)
	}
}

func TestSummaryPassAndNoTests(t *testing.T) {
	var out strings.Builder
	if !run(strings.NewReader(`{"Action":"run","Package":"p","Test":"T"}`+"\n"+`{"Action":"pass","Package":"p","Test":"T"}`+"\n"), &out) {
		t.Errorf("a passing run failed:\n%s", out.String())
	}
	out.Reset()
	if run(strings.NewReader("go: no packages\n"), &out) {
		t.Error("a run with no test reported success")
	}
	if !strings.Contains(out.String(), "go: no packages\n") || !strings.HasSuffix(out.String(), "no test passed\n\ntests: 0 passed, 0 failed, 0 skipped\n") {
		t.Errorf("got\n%s", out.String())
	}
}

// TestSummaryOfARunCutShort: a go command killed mid-run leaves packages
// started and never finished: a failure, never a success.
func TestSummaryOfARunCutShort(t *testing.T) {
	var out strings.Builder
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Elapsed":0.1}
{"Action":"start","Package":"q"}
{"Action":"run","Package":"q","Test":"TestSlow"}
`
	if run(strings.NewReader(in), &out) {
		t.Errorf("a run cut short reported success:\n%s", out.String())
	}
	if got := out.String(); !strings.Contains(got, "--- FAIL: package q\n") || !strings.Contains(got, "(unfinished: TestSlow)") ||
		!strings.HasSuffix(got, "tests: 1 passed, 1 failed, 0 skipped\n") {
		t.Errorf("got\n%s", got)
	}
}

// TestSummaryShowsTheBuildErrorOfATestVariant: go test -json names the
// build of a package's tests "pkg [pkg.test]", and a dependency's failed
// build by the fail event's FailedBuild: both are shown.
func TestSummaryShowsTheBuildErrorOfATestVariant(t *testing.T) {
	var out strings.Builder
	in := `{"ImportPath":"p [p.test]","Action":"build-output","Output":"p_test.go:3:14: cannot use \"s\"\n"}
{"ImportPath":"p [p.test]","Action":"build-fail"}
{"Action":"start","Package":"p"}
{"Action":"fail","Package":"p","Elapsed":0,"FailedBuild":"p [p.test]"}
{"ImportPath":"dep","Action":"build-output","Output":"dep.go:1:1: syntax error\n"}
{"Action":"start","Package":"q"}
{"Action":"fail","Package":"q","Elapsed":0,"FailedBuild":"dep"}
`
	if run(strings.NewReader(in), &out) {
		t.Error("failed builds reported success")
	}
	got := out.String()
	for _, want := range []string{"--- FAIL: package p\np_test.go:3:14", "--- FAIL: package q\ndep.go:1:1: syntax error"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestSummaryOfSkipsAlone: a run where every test skipped passed nothing:
// it fails, with the counts as they are.
func TestSummaryOfSkipsAlone(t *testing.T) {
	var out strings.Builder
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestRedis"}
{"Action":"skip","Package":"p","Test":"TestRedis"}
{"Action":"pass","Package":"p","Elapsed":0}
`
	if run(strings.NewReader(in), &out) {
		t.Error("a run with no test passed reported success")
	}
	if got := out.String(); !strings.HasSuffix(got, "tests: 0 passed, 0 failed, 1 skipped\n") {
		t.Errorf("got\n%s", got)
	}
}
