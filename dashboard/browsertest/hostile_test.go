package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// js returns s as a JavaScript string literal.
func js(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// dialogs records the messages of the dialogs the page opens (alert,
// confirm, prompt), and dismisses each.
type dialogs struct {
	mu   sync.Mutex
	msgs []string
}

func watchDialogs(t *testing.T, ctx context.Context) *dialogs {
	t.Helper()
	d := &dialogs{}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			d.mu.Lock()
			d.msgs = append(d.msgs, e.Message)
			d.mu.Unlock()
			go func() { _, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{}) }()
		}
	}))
	return d
}

func (d *dialogs) opened() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.msgs)
}

// utf16Less orders strings as JavaScript's < does: by UTF-16 code units.
func utf16Less(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// shownNames is an expression of the names of the tiles shown, in the
// page's order.
const shownNames = "[...document.querySelectorAll('.tile:not(.hidden)')].map(t => t.dataset.name)"

// setFilter types q into the filter as a paste would: the value, then an
// input event.
func setFilter(t *testing.T, ctx context.Context, q string) {
	t.Helper()
	eval[any](t, ctx, "(() => { const f = document.getElementById('filter'); f.value = "+js(q)+"; f.dispatchEvent(new Event('input')); })()")
}

// setSort picks the sort of value v.
func setSort(t *testing.T, ctx context.Context, v string) {
	t.Helper()
	eval[any](t, ctx, "(() => { const s = document.getElementById('sort'); s.value = "+js(v)+"; s.dispatchEvent(new Event('change')); })()")
}

// Breakers and pipelines with hostile names show as text, exactly, run
// nothing, and filter, sort and the controls work for them: a control on
// one acts on that breaker only.
func TestHostileNamesShowAsTextAndControlTheirBreakerOnly(t *testing.T) {
	ctx := browser(t)
	dlg := watchDialogs(t, ctx)
	reg := registry.New()
	all := append([]string{"payments"}, hostileNames...)
	bs := map[string]*breaker.Breaker{}
	var keep []any
	for _, name := range all {
		b := breaker.New(name, breaker.ConsecutiveFailures(1))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
		require.NoError(t, err, "%.40q", name)
		bs[name] = b
		keep = append(keep, p)
	}
	defer runtime.KeepAlive(keep)
	url := serve(t, reg, dashboard.WithAuthorizer(lead))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
	waitFor(t, ctx, fmt.Sprintf("document.querySelectorAll('.tile').length === %d && document.querySelectorAll('table').length === %d", len(all), len(all)), 5*time.Second)

	// Each name as text, exactly, in its tile and its pipeline's table.
	names, err := json.Marshal(all)
	require.NoError(t, err)
	wrong := eval[[]string](t, ctx, `(() => {
		const wrong = [];
		for (const n of `+string(names)+`) {
			const t = [...document.querySelectorAll('.tile')].filter(t => t.dataset.name === n);
			if (t.length !== 1 || t[0].querySelector('.name').textContent !== n) wrong.push("tile " + JSON.stringify(n));
			const p = [...document.querySelectorAll('table')].filter(p => p.dataset.name === n);
			if (p.length !== 1 || p[0].querySelector('caption').textContent !== n + " (breaker " + n + ")") wrong.push("table " + JSON.stringify(n));
		}
		return wrong;
	})()`)
	assert.Empty(t, wrong, "not shown exactly as text")
	assert.Equal(t, 1, eval[int](t, ctx, "document.scripts.length"), "a name became a script")
	assert.Zero(t, eval[int](t, ctx, "document.querySelectorAll('img, iframe, object, embed, a, form, link, meta[http-equiv]').length"), "a name became markup")
	assert.Zero(t, eval[int](t, ctx, "document.querySelectorAll('#tiles svg *:not(polyline)').length"), "a name became markup in a sparkline")

	// Filter: the tiles whose names hold the filter's text, trimmed, any
	// case. A text field drops the newlines of its value.
	for _, q := range all {
		setFilter(t, ctx, q)
		var want []string
		needle := strings.ToLower(strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(q)))
		for _, n := range all {
			if strings.Contains(strings.ToLower(n), needle) {
				want = append(want, n)
			}
		}
		assert.ElementsMatch(t, want, eval[[]string](t, ctx, shownNames), "filter %.40q", q)
	}
	setFilter(t, ctx, "")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), `<script>alert(1)</script>`)))
	assert.ElementsMatch(t, []string{`<script>alert(1)</script>`, `</script><script>alert(1)</script>`}, eval[[]string](t, ctx, shownNames), "typed")
	setFilter(t, ctx, "")

	// Sort by name, as JavaScript compares strings.
	setSort(t, ctx, "name")
	byName := slices.SortedFunc(slices.Values(all), utf16Less)
	assert.Equal(t, byName, eval[[]string](t, ctx, shownNames), "sorted by name")

	// Controls: each acts on its own breaker only, and the page shows it.
	for i, name := range all {
		click(t, ctx, name, breaker.ForcedOpen)
		deadline := time.Now().Add(2 * time.Second)
		for bs[name].Mode().Mode != breaker.ForcedOpen && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for other, b := range bs {
			want := breaker.Normal
			if other == name {
				want = breaker.ForcedOpen
			}
			assert.Equal(t, want, b.Mode().Mode, "%.40q forced open from the page: %.40q", name, other)
		}
		if i%5 == 0 {
			waitFor(t, ctx, tile(name)+".dataset.mode === 'forced-open'", 2*time.Second)
			setSort(t, ctx, "severity")
			assert.True(t, name == eval[string](t, ctx, "document.querySelector('.tile').dataset.name"), "%.40q forced open is not first, open first", name)
			click(t, ctx, name, breaker.ForcedClosed)
			refused := "“" + name + "” forced-closed refused: not allowed: forcing closed needs the lead on call"
			waitFor(t, ctx, "document.getElementById('msg').textContent === "+js(refused), time.Second)
			assert.True(t, refused == eval[string](t, ctx, tile(name)+".querySelector('.err').textContent"), "%.40q: the tile does not say why", name)
		}
		click(t, ctx, name, breaker.Normal)
		deadline = time.Now().Add(2 * time.Second)
		for bs[name].Mode().Mode != breaker.Normal && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		assert.Equal(t, breaker.Normal, bs[name].Mode().Mode, "%.40q back to normal from the page", name)
		if i%5 == 0 {
			setSort(t, ctx, "name")
		}
	}
	assert.Empty(t, dlg.opened(), "a dialog opened: a name ran as a script")

	// The watch sees a dialog when there is one.
	eval[any](t, ctx, "setTimeout(() => alert('probe'), 0)")
	waitFor(t, ctx, "true", 0)
	deadline := time.Now().Add(2 * time.Second)
	for len(dlg.opened()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, []string{"probe"}, dlg.opened())
}

// Two names that a join with a null byte cannot tell apart in either
// order ("twin" then "twin\x00twin", or the other way round) are still
// sorted: the page compares orders, not strings of names.
func TestNamesWithANullByteAreSorted(t *testing.T) {
	ctx := browser(t)
	reg := registry.New()
	twin, twins := breaker.New("twin"), breaker.New("twin\x00twin", breaker.ConsecutiveFailures(1))
	require.NoError(t, reg.AddBreaker(twin))
	require.NoError(t, reg.AddBreaker(twins))
	defer runtime.KeepAlive([]any{twin, twins})
	_ = twins.Execute(ctx, func(context.Context) error { return errDown })
	url := serve(t, reg)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
	waitFor(t, ctx, "document.querySelectorAll('.tile').length === 2", 5*time.Second)
	assert.Equal(t, []string{"twin\x00twin", "twin"}, eval[[]string](t, ctx, shownNames), "open first")
	setSort(t, ctx, "name")
	assert.Equal(t, []string{"twin", "twin\x00twin"}, eval[[]string](t, ctx, shownNames), "by name")
}

// hostileNames are breaker and pipeline names that try to become markup,
// script, a selector, JSON, a template or a form field on their way to the
// page; package dashboard's tests send the same names through the handler.
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
