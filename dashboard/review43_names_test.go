package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

var review43Hostile = []string{
	"a\n\ndata: {\"breakers\":[]}\n\n",
	"b\r\nevent: x\r\n\r\n",
	"c\rdata: y",
	"</script><script>alert(1)</script>",
	"<img src=x onerror=alert(1)>",
	"\u2028\u2029line seps",
	"\u202egnp.exe",
	"nul\x00byte",
	"' \" ` ${x} {{.Token}}",
	"e" + strings.Repeat("é", 200_000), // 400 KB
	"🙂 emoji",
	"id: 5\nretry: 1",
	":comment",
}

// Hostile names through api/events: each event is one data line holding
// valid JSON in which every name comes back as it was; the page holds
// none of them; api/state is JSON with its markup escaped.
func TestReview43HostileNamesStayData(t *testing.T) {
	reg := registry.New()
	var keep []any
	for _, n := range review43Hostile {
		b := breaker.New(n)
		if err := reg.AddBreaker(b); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("p "+n), pipeline.WithBreaker(b)))
		if err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		keep = append(keep, b, p)
	}
	who := "mallory\n\ndata: {}\n\n</script>"
	h := dashboard.New(reg, dashboard.Title("</title><script>alert(1)</script>{{.Token}}"),
		dashboard.WithAuthorizer(func(*http.Request, dashboard.Action) (string, error) { return who, nil }))
	for _, n := range review43Hostile[:3] {
		if err := reg.SetMode(context.Background(), n, breaker.ForcedOpen, who); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&page)
	resp.Body.Close()
	if strings.Contains(page.String(), "<script>alert") || strings.Contains(page.String(), "</title><script>") {
		t.Error("the title is markup on the page")
	}
	for _, n := range review43Hostile {
		if len(n) < 100 && strings.Contains(page.String(), n) {
			t.Errorf("the page holds the name %q", n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 1<<16)
	for ev := 0; ev < 3; ev++ {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line == "\n" {
				break
			}
			lines = append(lines, line)
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "data: ") {
			t.Fatalf("event %d is %d lines: %q", ev, len(lines), lines)
		}
		if strings.ContainsAny(lines[0][:len(lines[0])-1], "\r\u2028\u2029<>") {
			t.Errorf("event %d holds a raw CR, line separator or markup character", ev)
		}
		var s struct {
			Pipelines []struct{ Name string } `json:"pipelines"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[0], "data: ")), &s); err != nil {
			t.Fatal(err)
		}
		var raw struct {
			Breakers []struct {
				Name   string `json:"name"`
				ModeBy string `json:"mode_by"`
			} `json:"breakers"`
		}
		_ = json.Unmarshal([]byte(strings.TrimPrefix(lines[0], "data: ")), &raw)
		got := map[string]bool{}
		for _, b := range raw.Breakers {
			got[b.Name] = true
			if b.ModeBy != "" && b.ModeBy != who {
				t.Errorf("mode_by %q", b.ModeBy)
			}
		}
		for _, n := range review43Hostile {
			if !got[n] {
				t.Errorf("event %d: breaker %.40q missing or altered", ev, n)
			}
		}
		if len(s.Pipelines) != len(review43Hostile) {
			t.Errorf("pipelines: %d", len(s.Pipelines))
		}
	}
	runtime.KeepAlive(keep)
}

// Names that are not valid UTF-8 are refused, by the registry, so that
// two cannot collapse into one name in JSON.
func TestReview43InvalidUTF8Refused(t *testing.T) {
	reg := registry.New()
	for _, n := range []string{"\xff", "a\xc3", "\xed\xa0\x80"} {
		if err := reg.AddBreaker(breaker.New(n)); err == nil {
			t.Errorf("%q registered", n)
		}
		if _, err := reg.AddPipeline(pipeline.New(pipeline.WithName(n))); err == nil {
			t.Errorf("pipeline %q registered", n)
		}
		if _, err := reg.AddPipeline(pipeline.New(pipeline.WithName("ok"+n[:0]), pipeline.WithBreaker(breaker.New(n)))); err == nil {
			t.Errorf("pipeline with breaker %q registered", n)
		}
	}
	if bs, ps := reg.Names(); len(bs)+len(ps) != 0 {
		t.Errorf("left registered: %q %q", bs, ps)
	}
}
