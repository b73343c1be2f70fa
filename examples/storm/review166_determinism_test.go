package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The virtual-time figures are promised to be the same on every run and
// machine. Within one process everything that is seeded from the clock
// (internal/monotime's base, which is the process's real start time, and
// what is derived from it: the breaker's slow spans and its xorshift seed
// c.rnd = uint64(c.start)|1) is fixed, so the only fair check is across
// processes: the test binary re-runs itself in children, with different
// GOMAXPROCS, and every child must print the same bytes.

const review166ChildEnv = "REVIEW166_STORM_CHILD"

// TestReview166Child is the child: it prints the demo for the scenarios
// named in the environment, between markers. It does nothing unless the
// parent started it.
func TestReview166Child(t *testing.T) {
	keys := os.Getenv(review166ChildEnv)
	if keys == "" {
		t.Skip("run by TestReview166SameBytesInEveryProcess")
	}
	o, err := parseArgs([]string{"-extra", "-scenarios", keys})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printDemo(&b, o.keys, runVirtual(t, o.keys, o.strategies, o.seed), o.extra)
	fmt.Printf("<<<REVIEW166\n%s\nREVIEW166>>>\n", b.String())
}

func review166Child(t *testing.T, keys string, procs int) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview166Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), review166ChildEnv+"="+keys, fmt.Sprintf("GOMAXPROCS=%d", procs))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s := string(out)
	i, j := strings.Index(s, "<<<REVIEW166\n"), strings.Index(s, "\nREVIEW166>>>")
	if i < 0 || j < i {
		t.Fatalf("child printed no demo:\n%s", out)
	}
	return s[i+len("<<<REVIEW166\n") : j]
}

// TestReview166SameBytesInEveryProcess: the same scenarios, in six
// processes (GOMAXPROCS 1, 2, 4), print the same bytes.
func TestReview166SameBytesInEveryProcess(t *testing.T) {
	if raceEnabled {
		t.Skip("real-time runs with busy goroutines, or processes of the demo: .ci/run runs this package without the race detector too")
	}
	if testing.Short() {
		t.Skip("six processes")
	}
	keys := os.Getenv("REVIEW166_KEYS")
	if keys == "" {
		keys = "outage,metastable,slowrecovery"
	}
	procs := []int{2, 1, 4, 2, 1, 4}
	var first string
	seen := map[[32]byte]int{}
	diffs := 0
	for i, p := range procs {
		out := review166Child(t, keys, p)
		seen[sha256.Sum256([]byte(out))]++
		if i == 0 {
			first = out
			continue
		}
		if out != first {
			diffs++
			a, b := strings.Split(first, "\n"), strings.Split(out, "\n")
			for k := range min(len(a), len(b)) {
				if a[k] != b[k] {
					t.Errorf("process %d (GOMAXPROCS=%d) differs from process 1:\n  1: %s\n  %d: %s", i+1, p, a[k], i+1, b[k])
				}
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d of %d processes printed other bytes than the first; %d distinct outputs", diffs, len(procs)-1, len(seen))
	}
}
