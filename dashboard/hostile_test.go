package dashboard_test

import (
	"bufio"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// hostileRegistry holds a breaker named payments and a breaker and a
// pipeline of each hostile name.
func hostileRegistry(t *testing.T) (*registry.Registry, map[string]*breaker.Breaker) {
	t.Helper()
	reg := registry.New()
	bs := map[string]*breaker.Breaker{}
	var keep []any
	for _, name := range append([]string{"payments"}, hostileNames...) {
		b := breaker.New(name)
		require.NoError(t, reg.AddBreaker(b), "%q", name)
		bs[name] = b
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(name)))
		require.NoError(t, err, "%q", name)
		keep = append(keep, b, p)
	}
	t.Cleanup(func() { runtime.KeepAlive(keep) }) // the registry holds them weakly
	return reg, bs
}

// names reads the breakers' and pipelines' names of a state in JSON.
func names(t *testing.T, data []byte) (breakers, pipelines []string) {
	t.Helper()
	var s struct {
		Breakers, Pipelines []struct{ Name string }
	}
	require.NoError(t, json.Unmarshal(data, &s))
	for _, b := range s.Breakers {
		breakers = append(breakers, b.Name)
	}
	for _, p := range s.Pipelines {
		pipelines = append(pipelines, p.Name)
	}
	return breakers, pipelines
}

// Hostile names reach the page's JSON and event stream intact, never as
// markup, and one event stays one line whatever the names hold.
func TestHostileNamesAreDataIntact(t *testing.T) {
	reg, _ := hostileRegistry(t)
	want := slices.Sorted(slices.Values(append([]string{"payments"}, hostileNames...)))
	h := dashboard.New(reg)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://dash/api/state", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.NotContains(t, rec.Body.String(), "<", "encoding/json escapes < and >")
	bs, ps := names(t, rec.Body.Bytes())
	assert.Equal(t, want, bs)
	assert.Equal(t, want, ps)

	h.Close() // the stream ends after its first event
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://dash/api/events", nil))
	sc := bufio.NewScanner(strings.NewReader(rec.Body.String()))
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 2, "one data line and the blank line that ends the event")
	data, ok := strings.CutPrefix(lines[0], "data: ")
	require.True(t, ok)
	assert.Empty(t, lines[1])
	bs, ps = names(t, []byte(data))
	assert.Equal(t, want, bs)
	assert.Equal(t, want, ps)
}

// A hostile title is escaped as text: never markup, never a template.
func TestAHostileTitleIsText(t *testing.T) {
	for _, name := range hostileNames {
		h := dashboard.New(registry.New(), dashboard.Title(name))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://dash/", nil))
		page := rec.Body.String()
		_, rest, _ := strings.Cut(page, "<title>")
		title, _, ok := strings.Cut(rest, "</title>")
		require.True(t, ok, "%.40q: the title ends where the page's does", name)
		// html/template writes a null byte as U+FFFD, as an HTML parser reads it.
		assert.Equal(t, strings.ReplaceAll(name, "\x00", "\uFFFD"), html.UnescapeString(title), "%.40q", name)
		if strings.ContainsAny(name, `<>"'&`) {
			assert.NotContains(t, page, name, "%.40q: escaped", name)
		}
		assert.Equal(t, 1, strings.Count(page, "<script"), "%.40q", name)
	}
}

// A control on a breaker of a hostile name acts on that breaker only.
func TestAControlOnAHostileNameActsOnItOnly(t *testing.T) {
	reg, bs := hostileRegistry(t)
	h := dashboard.New(reg, dashboard.WithAuthorizer(alice))
	tok := tokenOf(t, h, httptest.NewRequest(http.MethodGet, "http://dash/", nil))
	for _, name := range hostileNames {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, post("http://dash/api/mode", url.Values{"name": {name}, "mode": {"forced-open"}}.Encode(), tok))
		require.Equal(t, http.StatusOK, rec.Code, "%.40q: %s", name, rec.Body.String())
		for other, b := range bs {
			want := breaker.Normal
			if other == name {
				want = breaker.ForcedOpen
			}
			assert.Equal(t, want, b.Mode().Mode, "%.40q forced open: %.40q", name, other)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, post("http://dash/api/mode", url.Values{"name": {name}, "mode": {"normal"}}.Encode(), tok))
		require.Equal(t, http.StatusOK, rec.Code, "%.40q: %s", name, rec.Body.String())
		assert.Equal(t, breaker.Normal, bs[name].Mode().Mode)
	}
}

// hostileNames are breaker and pipeline names that try to become markup,
// script, a selector, JSON, a template or a form field on their way to the
// page; dashboard/browsertest shows the same names in a browser.
var hostileNames = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`'><svg onload=alert(1)>`,
	`javascript:alert(1)`,
	`</script><script>alert(1)</script>`,
	`it's "quoted"`,
	`'; alert(1); '`,
	`back\slash \" \\ \u0041`,
	"\u202Egnp.exe",   // a right-to-left override
	"nul\x00byte",     // a null byte
	"line\nbreak\r\n", // newlines, which end a server-sent event
	"data: {\"injected\":true}",
	`{{.}}`,
	`{{template "page"}}`,
	`.tile`,
	`#filter`,
	`[data-name="payments"]`,
	`*`,
	`{"name":"payments","mode":"normal"}`,
	`]}`,
	`payments&mode=disabled`,
	`&amp; &lt;b&gt;`,
	" payments ",
	"😀 \u0301combining",
	"long-" + strings.Repeat("x", 10<<10),
}
