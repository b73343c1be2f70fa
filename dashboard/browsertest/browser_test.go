package browsertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

const evil = `<script>alert(1)</script>`

var errDown = errors.New("connection refused")

// browser returns a context of a new headless Chromium tab, or skips the
// test if the machine has no chromium.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("no chromium on this machine: apt-get install chromium (.ci/run does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// serve mounts a dashboard of reg as net/http/pprof would be, and returns
// the page's address.
func serve(t *testing.T, reg *registry.Registry, opts ...dashboard.Option) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/debug/resilience/", dashboard.New(reg, opts...))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections() // the page's event stream, still open
		srv.Close()
	})
	return srv.URL + "/debug/resilience/"
}

// tile returns an expression of the tile of breaker name.
func tile(name string) string {
	return "[...document.querySelectorAll('.tile')].find(t => t.dataset.name === " + js(name) + ")"
}

// eval evaluates expr in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return out
}

// waitFor polls expr in the page until it is true, and returns how long
// that took; it fails the test after limit.
func waitFor(t *testing.T, ctx context.Context, expr string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("Boolean("+expr+")"))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, expr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dependency is a fake that fails while down and counts its calls.
type dependency struct {
	calls atomic.Int64
	down  atomic.Bool
}

func (d *dependency) call(context.Context) (string, error) {
	d.calls.Add(1)
	if d.down.Load() {
		return "", errDown
	}
	return "ok", nil
}

func TestABreakerOpeningShowsWithinASecond(t *testing.T) {
	ctx := browser(t)
	reg := registry.New()
	// Open for longer than the test: with the default 100 ms it would be
	// half-open before the page looked.
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("payments", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour)))))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(p)
	url := serve(t, reg)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, tile("payments")+"?.dataset.state === 'closed'", 5*time.Second)

	d := &dependency{}
	d.down.Store(true)
	for range 3 {
		_, _ = pipeline.Do(ctx, p, d.call)
	}
	took := waitFor(t, ctx, tile("payments")+"?.dataset.state === 'open'", 2*time.Second)
	if took > time.Second {
		t.Errorf("the page showed the breaker open %v after it opened, over 1 s", took)
	}
	why := eval[string](t, ctx, tile("payments")+".querySelector('.why').textContent")
	if !strings.Contains(why, "3 consecutive failures") {
		t.Errorf("the tile does not say why it opened: %q", why)
	}
	t.Logf("shown open after %v", took)
}

// lead refuses to force closed: only the lead on call may.
func lead(_ *http.Request, a dashboard.Action) (string, error) {
	if a.Mode == breaker.ForcedClosed {
		return "", errors.New("forcing closed needs the lead on call")
	}
	return "alice", nil
}

// click clicks the button of mode in the tile of breaker name, as a user
// would: the page posts the control with its token.
func click(t *testing.T, ctx context.Context, name string, mode breaker.Mode) {
	t.Helper()
	eval[any](t, ctx, fmt.Sprintf("%s.querySelector('button[data-mode=%q]').click()", tile(name), mode.String()))
}

func TestForceOpenFromThePageAndBack(t *testing.T) {
	ctx := browser(t)
	reg := registry.New()
	b := breaker.New("payments")
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(p)
	url := serve(t, reg, dashboard.WithAuthorizer(lead))
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, tile("payments")+"?.dataset.state === 'closed'", 5*time.Second)

	click(t, ctx, "payments", breaker.ForcedOpen)
	waitFor(t, ctx, tile("payments")+".dataset.mode === 'forced-open' && "+tile("payments")+".dataset.state === 'open'", time.Second)
	if st := eval[string](t, ctx, tile("payments")+".querySelector('.st').textContent"); !strings.Contains(st, "forced-open by alice") {
		t.Errorf("the tile says %q, not who forced it", st)
	}
	d := &dependency{}
	start := time.Now()
	_, err = pipeline.Do(ctx, p, d.call)
	if !errors.Is(err, breaker.ErrOpen) || !strings.Contains(err.Error(), "forced open by alice") {
		t.Errorf("a call to the breaker forced open returned %v", err)
	}
	if d.calls.Load() != 0 || time.Since(start) > 100*time.Millisecond {
		t.Errorf("not failing fast: %d calls made, %v", d.calls.Load(), time.Since(start))
	}

	// A refused control says why, on the page.
	click(t, ctx, "payments", breaker.ForcedClosed)
	waitFor(t, ctx, "document.getElementById('msg').textContent.includes('forcing closed needs the lead on call')", time.Second)
	if b.Mode().Mode != breaker.ForcedOpen {
		t.Errorf("the refused control changed the mode to %v", b.Mode().Mode)
	}

	click(t, ctx, "payments", breaker.Normal)
	waitFor(t, ctx, tile("payments")+".dataset.mode === 'normal' && "+tile("payments")+".dataset.state === 'closed'", time.Second)
	if _, err := pipeline.Do(ctx, p, d.call); err != nil || d.calls.Load() != 1 {
		t.Errorf("back to normal, a call returned %v after %d calls", err, d.calls.Load())
	}
}

func TestFiveHundredBreakersRenderUpdateAndFilter(t *testing.T) {
	ctx := browser(t)
	dlg := watchDialogs(t, ctx)
	reg := registry.New()
	var keep []*breaker.Breaker
	for i := range 500 {
		b := breaker.New(fmt.Sprintf("host-%03d.example", i), breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		keep = append(keep, b)
		if err := reg.AddBreaker(b); err != nil {
			t.Fatal(err)
		}
	}
	eb := breaker.New(evil)
	keep = append(keep, eb)
	if err := reg.AddBreaker(eb); err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(keep)
	url := serve(t, reg)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "document.querySelectorAll('.tile').length === 501", 5*time.Second)
	first := eval[float64](t, ctx, "window.dashboardFirstRender - performance.timing.responseEnd + performance.timing.navigationStart")
	if first > 1000 {
		t.Errorf("the first render of 501 tiles came %.0f ms after the page", first)
	}
	t.Logf("501 tiles rendered %.0f ms after the page arrived", first)

	_ = keep[250].Execute(ctx, func(context.Context) error { return errDown })
	took := waitFor(t, ctx, tile("host-250.example")+".dataset.state === 'open'", 2*time.Second)
	if took > time.Second {
		t.Errorf("with 501 breakers the page showed one open %v after it opened", took)
	}
	t.Logf("with 501 breakers, one shown open %v after it opened", took)
	if got := eval[string](t, ctx, "document.querySelector('.tile').dataset.name"); got != "host-250.example" {
		t.Errorf("sorted open first, the first tile is %q", got)
	}

	// Filter: the tiles of host-250 to host-259 stay.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "host-25")); err != nil {
		t.Fatal(err)
	}
	if n := eval[int](t, ctx, "document.querySelectorAll('.tile:not(.hidden)').length"); n != 10 {
		t.Errorf("the filter left %d tiles, want 10", n)
	}
	if s := eval[string](t, ctx, "document.getElementById('summary').textContent"); !strings.Contains(s, "501 breakers · 1 open") {
		t.Errorf("summary %q", s)
	}

	// The breaker named as a script shows as text, and runs nothing.
	if got := eval[string](t, ctx, tile(evil)+".querySelector('.name').textContent"); got != evil {
		t.Errorf("the name shows as %q", got)
	}
	if n := eval[int](t, ctx, "document.scripts.length"); n != 1 {
		t.Errorf("%d scripts in the page: a name became markup", n)
	}
	if d := dlg.opened(); len(d) != 0 {
		t.Errorf("a dialog opened: a name ran as a script: %q", d)
	}
}

// TestScreenshot writes the picture of docs/dashboard.md to the file that
// RESILIENCEKIT_DASHBOARD_SCREENSHOT names, from a scene of breakers in
// every state and pipelines with traffic. Without it, as in CI, which
// leaves the checkout as it found it, it writes to a temporary file: the
// picture can always be made again.
func TestScreenshot(t *testing.T) {
	out := os.Getenv("RESILIENCEKIT_DASHBOARD_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "dashboard.png")
	}
	ctx := browser(t)
	reg := registry.New(registry.Interval(250*time.Millisecond, 40))
	mk := func(name string, opts ...breaker.Option) *breaker.Breaker {
		b := breaker.New(name, opts...)
		if err := reg.AddBreaker(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	var keep []any
	for i := range 14 {
		keep = append(keep, mk(fmt.Sprintf("api-%02d.internal:443", i)))
	}
	inventory := mk("inventory", breaker.ConsecutiveFailures(4), breaker.OpenTimeout(time.Hour))
	search := mk("search", breaker.OpenTimeout(300*time.Millisecond))
	geo := mk("geo")
	payments := mk("payments", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 20))
	keep = append(keep, inventory, search, geo, payments)
	pipe := func(b *breaker.Breaker, opts ...pipeline.Option) *pipeline.Pipeline {
		p, err := reg.AddPipeline(pipeline.New(append([]pipeline.Option{pipeline.WithBreaker(b)}, opts...)...))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, p)
		return p
	}
	pPay := pipe(payments, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond),
		retrypolicy.WithQuota(retrypolicy.NewQuota(0.2, 20, 10*time.Second)))))
	pInv := pipe(inventory)
	pSearch := pipe(search, pipeline.WithThrottle(throttle.New()), pipeline.WithLimit(limit.NewAIMD(limit.Initial(20))))
	defer runtime.KeepAlive(keep)
	url := serve(t, reg)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	// Traffic, until the screenshot is taken: payments healthy with a few
	// failures that its retries absorb, inventory failing until it opens,
	// search flapping.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = pipeline.Do(context.Background(), pPay, func(context.Context) (int, error) {
				time.Sleep(time.Duration(500+i%7*300) * time.Microsecond)
				if i%9 == 0 {
					return 0, errDown
				}
				return 1, nil
			})
			_, _ = pipeline.Do(context.Background(), pInv, func(context.Context) (int, error) {
				if i > 2000 {
					return 0, errDown
				}
				return 1, nil
			})
			_, _ = pipeline.Do(context.Background(), pSearch, func(context.Context) (int, error) {
				if (i/700)%3 == 2 {
					return 0, resilience.Terminal(errDown)
				}
				return 1, nil
			})
		}
	}()
	time.Sleep(6 * time.Second)
	_ = geo.SetMode(ctx, breaker.ForcedOpen, "alice")
	time.Sleep(time.Second)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w != 1280 {
		t.Errorf("the screenshot is %d px wide, want 1280", w)
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

func TestReadableOnAPhone(t *testing.T) {
	ctx := browser(t)
	reg := registry.New()
	b := breaker.New("a-breaker-with-a-rather-long-name.eu-west-1.internal.example.com:443")
	defer runtime.KeepAlive(b)
	if err := reg.AddBreaker(b); err != nil {
		t.Fatal(err)
	}
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("checkout"), pipeline.WithBreaker(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(p)
	url := serve(t, reg, dashboard.WithAuthorizer(lead))
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile), chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "document.querySelectorAll('.tile').length === 1 && document.querySelectorAll('table').length === 1", 5*time.Second)
	if w := eval[int](t, ctx, "document.documentElement.scrollWidth"); w > 390 {
		t.Errorf("the page is %d px wide on a 390 px phone: it scrolls sideways", w)
	}
	if w := eval[int](t, ctx, "document.querySelector('.tile').getBoundingClientRect().width"); w < 300 {
		t.Errorf("a tile is %d px wide on a phone", w)
	}
}
