// Command ratios prints the benchmark figures of docs/benchmarks.md: it
// runs a package's benchmarks (by default the peer comparisons of this
// module) in rounds, each round running every subject once, so that a
// machine whose load drifts slows all subjects of a round alike; and it
// reports each subject as a ratio to the baseline of the same round (a
// bare gobreaker by default): the median over the rounds and the range.
// The raw output goes to a file for benchstat.
//
// Run from the benchmarks folder:
//
//	go run ./ratios                 # 10 rounds, -cpu 1,16, × gobreaker
//	go run ./ratios -rounds 20 -out bench.txt
//	go run ./ratios -pkg ../httpclient -bench HTTP -baseline PlainClient -cpu 2
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// sample is one benchmark line.
type sample struct {
	group, subject, cpu string
	ns, allocs          float64
}

func main() {
	rounds := flag.Int("rounds", 10, "rounds of every benchmark")
	cpu := flag.String("cpu", "1,16", "go test -cpu list (16 on 2 cores: 16 goroutines in RunParallel)")
	benchtime := flag.String("benchtime", "300ms", "go test -benchtime per benchmark and round")
	bench := flag.String("bench", ".", "go test -bench pattern")
	out := flag.String("out", "bench.txt", "file for the raw output, for benchstat")
	pkg := flag.String("pkg", ".", "the package whose benchmarks to run")
	baseline := flag.String("baseline", "Gobreaker", "the subject the others are divided by")
	flag.Parse()

	raw, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	defer raw.Close()
	var samples []sample
	for r := range *rounds {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", r+1, *rounds)
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", *bench, "-benchmem", "-count", "1",
			"-cpu", *cpu, "-benchtime", *benchtime, *pkg)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			log.Fatalf("go test: %v\n%s", err, b)
		}
		if r > 0 { // benchstat wants the header once
			b = bytes.Join(slices.DeleteFunc(bytes.Split(b, []byte("\n")), func(l []byte) bool {
				return !bytes.HasPrefix(l, []byte("Benchmark"))
			}), []byte("\n"))
			b = append(b, '\n')
		}
		if _, err := raw.Write(b); err != nil {
			log.Fatal(err)
		}
		samples = append(samples, parse(bytes.NewReader(b))...)
	}
	report(os.Stdout, samples, *rounds, *baseline)
	fmt.Printf("\nRaw output in %s: go run golang.org/x/perf/cmd/benchstat@latest %s\n", *out, *out)
}

// parse reads "BenchmarkGroup/Subject-CPU N ns/op ... allocs/op" lines.
func parse(r io.Reader) []sample {
	var out []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		cpu := "1"
		if i := strings.LastIndex(name, "-"); i > 0 {
			name, cpu = name[:i], name[i+1:]
		}
		group, subject, ok := strings.Cut(name, "/")
		if !ok {
			continue
		}
		s := sample{group: group, subject: subject, cpu: cpu}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = v
			case "allocs/op":
				s.allocs = v
			}
		}
		out = append(out, s)
	}
	return out
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else if n > 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return 0
}

func report(w io.Writer, samples []sample, rounds int, baseline string) {
	type key struct{ group, cpu string }
	var keys []key
	bySubject := map[key]map[string][]sample{}
	var order []string
	for _, s := range samples {
		k := key{s.group, s.cpu}
		if bySubject[k] == nil {
			bySubject[k] = map[string][]sample{}
			keys = append(keys, k)
		}
		if !slices.Contains(order, s.subject) {
			order = append(order, s.subject)
		}
		bySubject[k][s.subject] = append(bySubject[k][s.subject], s)
	}
	for _, k := range keys {
		subs := bySubject[k]
		base := subs[baseline]
		fmt.Fprintf(w, "\n%s, %s goroutine(s) (GOMAXPROCS=%s), %d rounds\n\n", k.group, k.cpu, k.cpu, rounds)
		if len(base) > 0 {
			fmt.Fprintf(w, "| subject | ns/op (median) | × %s (median) | × %s (range) | allocs/op |\n| --- | ---: | ---: | ---: | ---: |\n", baseline, baseline)
		} else {
			fmt.Fprintf(w, "| subject | ns/op (median) | allocs/op |\n| --- | ---: | ---: |\n")
		}
		for _, name := range order {
			ss := subs[name]
			if len(ss) == 0 {
				continue
			}
			var ns, allocs []float64
			for _, s := range ss {
				ns = append(ns, s.ns)
				allocs = append(allocs, s.allocs)
			}
			if len(base) != len(ss) {
				fmt.Fprintf(w, "| %s | %.1f | %.0f |\n", name, median(ns), median(allocs))
				continue
			}
			ratios := make([]float64, len(ss))
			for i := range ss {
				ratios[i] = ss[i].ns / base[i].ns // the same round
			}
			fmt.Fprintf(w, "| %s | %.1f | %.2f | %.2f–%.2f | %.0f |\n", name, median(ns), median(ratios),
				slices.Min(ratios), slices.Max(ratios), median(allocs))
		}
	}
}
