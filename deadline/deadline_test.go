package deadline_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1500", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{" 42\t", 42 * time.Millisecond, true},
		{"999999999", 999999999 * time.Millisecond, true},
		{"1000000000", 0, false},
		{"", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"١٢", 0, false},
		{"0x10", 0, false},
	}
	for _, tt := range tests {
		got, ok := deadline.Parse(tt.in)
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1500", "0", " 7 ", "", "-1", "1e3", "99999999999", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := deadline.Parse(s)
		if !ok {
			assert.Zero(t, d)
			return
		}
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.Less(t, d, 1e9*time.Millisecond)
		h := http.Header{}
		ctx, cancel := context.WithTimeout(context.Background(), d+time.Hour)
		defer cancel()
		assert.True(t, deadline.Inject(ctx, h))
		back, ok := deadline.Parse(h.Get(deadline.Header))
		assert.True(t, ok, "what Inject writes, Parse reads")
		assert.LessOrEqual(t, back, d+time.Hour)
	})
}

// FuzzInjectParse: whatever the deadline, what Inject writes Parse reads,
// as the time left (or MaxBudget, or 0).
func FuzzInjectParse(f *testing.F) {
	for _, d := range []int64{0, -1, 1, int64(time.Second), int64(12 * 24 * time.Hour), int64(deadline.MaxBudget), math.MaxInt64, math.MinInt64} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, left int64) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Duration(left)))
			defer cancel()
			h := http.Header{}
			require.True(t, deadline.Inject(ctx, h))
			back, ok := deadline.Parse(h.Get(deadline.Header))
			require.True(t, ok, "Parse reads %q", h.Get(deadline.Header))
			want := min(max(time.Until(time.Now().Add(time.Duration(left))), 0), deadline.MaxBudget)
			if want%time.Millisecond != 0 {
				want = want.Truncate(time.Millisecond) + time.Millisecond // rounded up
			}
			assert.Equal(t, want, back)
		})
	})
}

func TestInject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.Header{}
		h.Set(deadline.Header, "stale")
		assert.False(t, deadline.Inject(t.Context(), h))
		assert.Empty(t, h.Get(deadline.Header), "no deadline: nothing forwarded")

		ctx, cancel := context.WithTimeout(t.Context(), 1234567*time.Microsecond)
		defer cancel()
		assert.True(t, deadline.Inject(ctx, h))
		assert.Equal(t, "1235", h.Get(deadline.Header), "rounded up")

		time.Sleep(2 * time.Second)
		deadline.Inject(ctx, h)
		assert.Equal(t, "0", h.Get(deadline.Header))
	})
}

func TestMiddleware(t *testing.T) {
	tests := []struct {
		name     string
		values   []string
		existing time.Duration
		want     time.Duration // 0: no deadline
	}{
		{"sets the deadline", []string{"1500"}, 0, 1500 * time.Millisecond},
		{"keeps an earlier one", []string{"1500"}, time.Second, time.Second},
		{"shortens a later one", []string{"1500"}, time.Minute, 1500 * time.Millisecond},
		{"ignores garbage", []string{"soon"}, 0, 0},
		{"ignores a repeated header", []string{"10", "20"}, 0, 0},
		{"ignores a missing header", nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var got time.Duration
				h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if d, ok := r.Context().Deadline(); ok {
						got = d.Sub(start)
					}
				}))
				ctx := t.Context()
				if tt.existing > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.existing)
					defer cancel()
				}
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				for _, v := range tt.values {
					r.Header.Add(deadline.Header, v)
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
				assert.Equal(t, tt.want, got)
			})
		})
	}
}

// Inject again, the budget unchanged (as httpclient sets it again when
// the request gets its connection, mostly within the same millisecond),
// allocates nothing; a budget that changed is set.
func TestInjectAgainUnchangedAllocatesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		h := http.Header{}
		require.True(t, deadline.Inject(ctx, h))
		assert.Zero(t, testing.AllocsPerRun(100, func() { deadline.Inject(ctx, h) }))
		assert.Equal(t, "1500", h.Get(deadline.Header))
		time.Sleep(200 * time.Millisecond)
		deadline.Inject(ctx, h)
		assert.Equal(t, []string{"1300"}, h[deadline.Header])
	})
}
