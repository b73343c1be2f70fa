package repotest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goBlocks returns the ```go blocks of a Markdown file.
func goBlocks(text string) []string {
	var blocks []string
	for {
		_, rest, ok := strings.Cut(text, "```go\n")
		if !ok {
			return blocks
		}
		block, after, _ := strings.Cut(rest, "```")
		blocks = append(blocks, block)
		text = after
	}
}

// trimmed returns the non-blank lines of s with their runs of white space
// folded to one space (gofmt aligns comments by the widest line of a
// block), without surrounding white space.
func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func contains(haystack, needle []string) bool {
	for i := 0; i+len(needle) <= len(haystack); i++ {
		match := true
		for j := range needle {
			if haystack[i+j] != needle[j] {
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

// TestDocsCodeRuns checks that every Go block in the README and docs/
// stands, line for line, in a test or Example of the repository, so that
// the code a reader copies compiles and runs in CI.
func TestDocsCodeRuns(t *testing.T) {
	base := root(t)
	var tests [][]string
	err := filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != base {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") && !strings.Contains(path, "repotest") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tests = append(tests, trimmed(string(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob(filepath.Join(base, "docs", "*.md"))
	docs = append(docs, filepath.Join(base, "README.md"))
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range goBlocks(string(b)) {
			checked++
			lines := trimmed(block)
			found := false
			for _, tf := range tests {
				if contains(tf, lines) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: Go block %d stands in no test or Example:\n%s", filepath.Base(doc), i+1, block)
			}
		}
	}
	if checked < 2 {
		t.Errorf("checked %d Go blocks; the README has at least two", checked)
	}
}

// workspaceModules returns the nested modules that go.work uses, as
// "./path".
func workspaceModules(t *testing.T) []string {
	work, err := os.ReadFile(filepath.Join(root(t), "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	_, use, ok := strings.Cut(string(work), "use (")
	use, _, _ = strings.Cut(use, ")")
	if !ok {
		t.Fatal("go.work has no use block")
	}
	var mods []string
	for _, l := range strings.Fields(use) {
		if l != "." {
			mods = append(mods, l)
		}
	}
	if len(mods) < 5 {
		t.Fatalf("go.work uses %v: too few nested modules", mods)
	}
	return mods
}

// TestCIRunsTheREADMEsTestCommand keeps .ci/run and the README's "run all
// tests" command the same, and that command runs every module of go.work.
func TestCIRunsTheREADMEsTestCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root(t), ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "go test ") {
			if cmd != "" {
				t.Fatalf("the README has two test commands: %q and %q", cmd, l)
			}
			cmd = l
		}
	}
	if cmd == "" {
		t.Fatal("the README has no test command")
	}
	for _, m := range workspaceModules(t) {
		if !strings.Contains(cmd, " "+m+"/...") {
			t.Errorf("the README's test command %q leaves out the module %s", cmd, m)
		}
	}
	if !strings.Contains("\n"+string(ci)+"\n", "\n"+cmd+"\n") {
		t.Errorf(".ci/run does not run the README's test command %q", cmd)
	}
}
