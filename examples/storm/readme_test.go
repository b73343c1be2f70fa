package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeOutage is the command the README names beside its gRPC table.
const readmeOutage = "./examples/storm -extra -scenarios outage"

// TestReadmeQuotesTheOutage fails when a row of the README's table of a
// 5 s outage (calls ok, backend requests per call, calls failed while
// healthy) is on no line of what the command it names prints.
func TestReadmeQuotesTheOutage(t *testing.T) {
	if raceEnabled {
		t.Skip("the demo's runs take minutes under the race detector: run go test ./examples/storm without -race")
	}
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := strings.ReplaceAll(string(raw), "\n", " ")
	at := strings.Index(readme, "go run "+readmeOutage)
	require.GreaterOrEqual(t, at, 0, "the README names %q beside its table", readmeOutage)
	var rows [][]string
	for _, line := range strings.Split(string(raw)[strings.Index(string(raw), "| strategy | calls ok (of 3,600)"):], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		require.Len(t, cells, 4, line)
		var figures []string
		for _, c := range cells[1:] {
			figures = append(figures, strings.ReplaceAll(strings.TrimSpace(c), ",", ""))
		}
		rows = append(rows, figures)
	}
	require.Len(t, rows, 4)
	out := demoOutput(t, strings.Fields(readmeOutage)[1:])
	for _, figures := range rows {
		found := false
		for _, line := range strings.Split(out, "\n") {
			fields := strings.Fields(line)
			if containsAll(fields, figures) {
				found = true
			}
		}
		assert.True(t, found, "the README's row %v is on no line of go run %s", figures, readmeOutage)
	}
}

// containsAll reports whether every one of want is among fields.
func containsAll(fields, want []string) bool {
	for _, w := range want {
		found := false
		for _, f := range fields {
			found = found || f == w
		}
		if !found {
			return false
		}
	}
	return true
}
