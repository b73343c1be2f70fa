package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// releaseVersion is the version the nested modules require of the root
// module (and of each other), which the workspace (go.work) replaces with
// the working tree. docs/releasing.md says how it moves.
const releaseVersion = "v0.1.0"

// nestedModules are the repository's modules a user may import, by
// directory: each must build outside this repository.
var nestedModules = []string{"redis", "sql", "otelevents", "grpc"}

// TestConsumerModule builds the program a user outside this repository
// writes: a file-system module proxy is made from the working tree (the
// root module and the redis module at releaseVersion, zipped as the real
// proxy would serve them), and a scratch module, with no workspace and
// GOPROXY pointing at it first, runs `go get` for both and builds a program
// importing pipeline, breaker and redis/breakerstore. It fails if a nested
// go.mod needs a replace directive (which a consumer's build ignores) or
// requires a version of the root module that the release would not have.
func TestConsumerModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module with the go command (seconds with a warm build cache, about 2 min cold); not in -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on the PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const rootPath = "github.com/resiliencekit/resiliencekit"

	// The go.mod files a consumer's build reads: no replace, and the root
	// module at the release version.
	for _, dir := range nestedModules {
		data, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(dir+"/go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Replace {
			t.Errorf("%s/go.mod: replace %s => %s: a consumer's build ignores it; the workspace (go.work) ties the repository together", dir, r.Old.Path, r.New.Path)
		}
		for _, r := range f.Require {
			if strings.HasPrefix(r.Mod.Path, rootPath) && r.Mod.Version != releaseVersion {
				t.Errorf("%s/go.mod requires %s %s, want %s", dir, r.Mod.Path, r.Mod.Version, releaseVersion)
			}
		}
	}

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	publish := func(path, dir string) {
		t.Helper()
		escaped, err := module.EscapePath(path)
		if err != nil {
			t.Fatal(err)
		}
		at := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		z, err := os.Create(filepath.Join(at, releaseVersion+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		if err := zip.CreateFromDir(z, module.Version{Path: path, Version: releaseVersion}, dir); err != nil {
			t.Fatalf("zip %s: %v", path, err)
		}
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := json.Marshal(map[string]any{"Version": releaseVersion, "Time": time.Now().UTC().Format(time.RFC3339)})
		for name, data := range map[string][]byte{
			releaseVersion + ".mod":  mod,
			releaseVersion + ".info": info,
			"list":                   []byte(releaseVersion + "\n"),
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	publish(rootPath, root)
	publish(rootPath+"/redis", filepath.Join(root, "redis"))
	t.Logf("proxy made in %v", time.Since(start).Round(time.Millisecond))

	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(consumer, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/consumer\n\ngo 1.26.0\n")
	write("main.go", consumerProgram)

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute) // a cold build cache: about 2 min
	defer cancel()
	env := func(name string) string {
		out, err := exec.CommandContext(ctx, goBin, "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	// Third-party modules come from this machine's module cache (a valid
	// file proxy) and then from the proxy the go command is set to use;
	// ours only from the proxy made above. The module cache is the test's
	// own, so that a stale v0.1.0 never lingers in the shared one.
	goproxy := "file://" + filepath.ToSlash(proxy) +
		",file://" + filepath.ToSlash(filepath.Join(env("GOMODCACHE"), "cache", "download"))
	if p := env("GOPROXY"); p != "" && p != "off" {
		goproxy += "," + p
	}
	cmdEnv := append(os.Environ(),
		"GOPROXY="+goproxy,
		"GOFLAGS=-mod=mod -modcacherw",
		"GOWORK=off",
		"GONOSUMDB="+rootPath, // not published: no checksum database knows it
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOTOOLCHAIN=local",
	)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = consumer
		cmd.Env = cmdEnv
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("go %s: %v", args[0], time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("get", rootPath+"@"+releaseVersion, rootPath+"/redis@"+releaseVersion)
	// -trimpath: the packages of the test's own module cache then share
	// the build cache with earlier runs.
	run("build", "-trimpath", "-o", filepath.Join(tmp, "consumer.bin"), ".")
}

const consumerProgram = `package main

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func main() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	payments := breaker.New("payments", breaker.Shared(breakerstore.New(rdb, "consumer")))
	p := pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(payments),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	)
	got, err := pipeline.Do(context.Background(), p, func(context.Context) (string, error) { return "ok", nil })
	fmt.Println(got, err)
}
`
