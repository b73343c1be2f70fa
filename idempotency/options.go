package idempotency

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Option configures [Middleware] and [NewGuard]. Each option says which it
// applies to: [NewGuard] panics if given one of the middleware's, which
// would do nothing to a Guard.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// middlewareOption is an option of the HTTP middleware only, which
// [NewGuard] refuses.
type middlewareOption struct {
	name string // the option's
	grpc string // grpcidempotency's option to use instead, if any
	f    func(*config)
}

func (o middlewareOption) apply(c *config) {
	o.f(c)
	if c.middlewareOnly == nil {
		c.middlewareOnly = &o
	}
}

type config struct {
	// The guard's.
	ttl          time.Duration
	lease        time.Duration
	storeTimeout time.Duration
	maxResponse  int
	release      map[int]bool
	listener     *safe.Listener
	log          *slog.Logger
	failOpen     time.Duration // < 0: never
	// The middleware's.
	required bool
	methods  []string
	maxBody  int64
	scope    func(*http.Request) string
	shared   bool // SharedKeys applies: "" is the one namespace
	exclude  map[string]bool
	// middlewareOnly is the first option given that only the middleware
	// applies.
	middlewareOnly *middlewareOption
}

// newConfig returns the defaults with opts applied. It panics if the lease
// is under three store timeouts.
func newConfig(opts []Option) config {
	cfg := config{
		ttl:          24 * time.Hour,
		lease:        30 * time.Second,
		methods:      []string{http.MethodPost, http.MethodPatch},
		maxBody:      1 << 20,
		maxResponse:  1 << 20,
		storeTimeout: 500 * time.Millisecond,
		failOpen:     10 * time.Second,
		exclude: headerSet("Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
			"Transfer-Encoding", "Upgrade", "Date", "Set-Cookie"),
	}
	ReleaseStatus(http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout).apply(&cfg)
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.lease/3 < cfg.storeTimeout { // not 3*storeTimeout, which overflows for one near MaxInt64
		panic(fmt.Sprintf("idempotency: Lease(%v) is under 3 StoreTimeout(%v): a renewal could not reach the store in time", cfg.lease, cfg.storeTimeout))
	}
	return cfg
}

// guardOnly panics, naming it, if cfg was given an option that only the
// middleware applies: on a Guard it would do nothing, and the calls it was
// to refuse or scope would run unprotected.
func (c *config) guardOnly() {
	o := c.middlewareOnly
	if o == nil {
		return
	}
	msg := "idempotency: NewGuard: option " + o.name + " applies only to Middleware"
	if o.grpc != "" {
		msg += "; for gRPC, grpcidempotency." + o.grpc
	}
	panic(msg)
}

func (c *config) logger() *slog.Logger {
	if c.log == nil {
		return slog.Default()
	}
	return c.log
}

// positive panics unless d > 0.
func positive(name string, d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("idempotency: %s(%v): d must be more than 0", name, d))
	}
}

// TTL sets how long a result is kept for replay. Default 24 h. For the
// guard. It panics if d is not positive.
func TTL(d time.Duration) Option {
	positive("TTL", d)
	return optionFunc(func(c *config) { c.ttl = d })
}

// Lease sets how long a claim holds its key without a renewal; the guard
// renews it every third of it while the handler runs and while its result
// is saved, so a handler may run longer. A key held by a crashed process
// is free again after one lease. It is also the outage budget: a request
// runs once if the store answers again before the lease granted by the
// last successful renewal runs out, so any store outage shorter than two
// thirds of the lease (see [Claim.Complete]). Make it long against the
// store's longest restart or failover (if it runs out, the request learns
// it, its context canceled, and a repeat may run; with the default
// [FailOpenAfter], shorter than two thirds of the default lease, it is
// not canceled but runs on under its claim on this process's records,
// while a repeat sent to another replica may run too; only the SQL
// store's transactional completion fences the effect itself). Default 30 s. For the guard. It panics if d
// is not positive.
func Lease(d time.Duration) Option {
	positive("Lease", d)
	return optionFunc(func(c *config) { c.lease = d })
}

// StoreTimeout bounds each call to the store. Default 500 ms, so that a
// frozen store gets a request refused within about a second. A call
// carries a whole record, so it must also cover moving [MaxResponse]
// bytes each way: a record saved or read back slower than d fails as the
// store would, counted toward [FailOpenAfter] (on loopback Redis, 1 MiB
// took 67 ms, 8 MiB 452 ms, 16 MiB 4 to 5 s). For the guard. It panics
// if d is not positive.
func StoreTimeout(d time.Duration) Option {
	positive("StoreTimeout", d)
	return optionFunc(func(c *config) { c.storeTimeout = d })
}

// FailOpenAfter sets how long the store may fail before keyed requests
// run on this process's own records. A request whose claim the store
// fails gets an error (503 over HTTP, UNAVAILABLE over gRPC), and the
// handler does not run, until the store has failed at least half of the
// guard's claims, without a break, for d (half as the mean, over the
// seconds of the last 10 that saw a claim, of each second's share: so at
// most 5 s more after a spell in which it answered most, whatever the
// rate of claims). From the store's first failure, the guard asks it
// once a second with a claim of its own until it answers or the guard
// fails open (holding the guard meanwhile), so that requests that come
// rarely (ten seconds apart or more) count the same outage, and a
// transient error, which the next question finds over, ends its run of
// failures, and does not add up with another long after it; from then on, each keyed request is claimed, renewed
// and saved in this process's memory ([MemoryStore]), so that it runs,
// and its repeats to this process get 409, then its replay, then and
// after. A request running
// with its claim on the store whose renewals fail goes on too: once its
// lease runs out, the guard failed open or its renewals failing for d,
// its claim moves to the process's records rather than its context be
// canceled. One request a second asks the store, with a claim of its own,
// whether it is back; three answers in a row end this. Both are reported
// ([resilience.EventSharedStateUnavailable], then
// [resilience.EventSharedStateRestored]). Meanwhile a repeat sent to
// another process, or of a request whose first run the store held, runs
// again: the store's outage, not this toolkit, is then what costs exactly
// once, rather than every keyed request failing until the store is back.
// A store that still reads but refuses writes (out of memory, read-only:
// [ErrWritesRefused]) is asked first even then: a repeat of a key it holds
// is replayed, or answered 409, and only a key it has no record of runs on
// this process's records.
// d < 0: never; every keyed request the store fails fails, and a request
// whose renewals fail is canceled at its lease's end, as long as it
// lasts. d == 0: at the store's first failure, however transient (a key
// the store holds may then run again here, until three questions a second
// apart have been answered). Default 10 s. A [MemoryStore] guard has nothing to fail over to.
// For the guard.
func FailOpenAfter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.failOpen = d })
}

// MaxResponse sets the largest result body stored for replay. A larger
// response is sent in full, but a repeat of its key is refused
// ([ErrNotReplayable]; 500 over HTTP) rather than running the handler
// again. Default 1 MiB; raise [StoreTimeout] with it. For the guard. It
// panics if n < 1.
func MaxResponse(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("idempotency: MaxResponse(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxResponse = n })
}

// ReleaseStatus sets the result statuses that are not stored: the key is
// freed, so that the client's retry runs the handler again. They are the
// statuses that tell a client to retry because the request was not
// processed, and the way, with [Claim.Abandon], for a handler to say that
// it committed nothing (one that stops for its canceled context before
// committing answers 503). Any other status is stored, whether or not the
// client is still there. Default 429, 502, 503, 504. For the guard.
func ReleaseStatus(codes ...int) Option {
	return optionFunc(func(c *config) {
		c.release = make(map[int]bool, len(codes))
		for _, code := range codes {
			c.release[code] = true
		}
	})
}

// WithListener reports to l what the guard cannot put in a response: a
// store failure ([resilience.EventStoreFailed]), a lost lease
// ([resilience.EventLeaseLost]) and a result that could not be stored
// ([resilience.EventNotStored]), each named "idempotency". Default none;
// each is logged too (see [WithLogger]). For the guard.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) { c.listener = safe.New("idempotency", c.listener, l) })
}

// WithLogger sets where the guard logs what goes wrong with its store.
// Default slog.Default(). For the guard.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = l })
}

// Required makes a key mandatory on the covered methods: a request without
// one gets 400. Default: requests without a key pass through unprotected.
// For the middleware; [NewGuard] panics if given it (for gRPC, pass
// grpcidempotency.Required to the interceptor).
func Required() Option {
	return middlewareOption{"Required", "Required", func(c *config) { c.required = true }}
}

// Methods sets the methods the middleware covers; others pass through.
// Default POST and PATCH. For the middleware; [NewGuard] panics if given
// it.
func Methods(methods ...string) Option {
	return middlewareOption{"Methods", "", func(c *config) { c.methods = methods }}
}

// MaxBody sets the largest request body fingerprinted; a larger one gets
// 413. Default 1 MiB. For the middleware; [NewGuard] panics if given it
// (for gRPC, see grpcidempotency.MaxRequest). It panics if n < 1.
func MaxBody(n int64) Option {
	if n < 1 {
		panic(fmt.Sprintf("idempotency: MaxBody(%d): n must be 1 or more", n))
	}
	return middlewareOption{"MaxBody", "MaxRequest", func(c *config) { c.maxBody = n }}
}

// Scope sets a function that returns who the caller is, by identity
// (the authenticated account or subject, the session, the client
// certificate), whose result namespaces keys, so that two callers cannot
// collide or read each other's responses, and one caller's keys stay its
// own across credential refreshes. It runs after authentication: put the
// middleware inside it. Return the identity, not a credential (a bearer
// token changes when refreshed, a cookie header carries more than the
// session); the guard hashes it. There is no default: [Middleware] panics
// unless given Scope or [SharedKeys] (the one given last applies), since
// any header it could guess would silently share keys between callers
// authenticated otherwise, or split one caller's. A keyed request for
// which fn returns "" (no identity: the caller is not authenticated, or
// the middleware runs before authentication) is refused with 401
// "no caller identity", and the handler does not run: an empty scope is
// never a shared namespace, only SharedKeys is. See the package's
// examples. For the middleware;
// [NewGuard] panics if given it (for gRPC, see grpcidempotency.Scope).
func Scope(fn func(r *http.Request) string) Option {
	return middlewareOption{"Scope", "Scope", func(c *config) {
		if fn == nil {
			panic("idempotency: Scope(nil): use SharedKeys for one namespace")
		}
		c.scope, c.shared = fn, false
	}}
}

// SharedKeys puts every caller's keys in one namespace: a caller that
// reuses another's key gets its response. For services whose callers are
// one trusted party. [Middleware] needs it or [Scope]: there is no
// default. For the middleware; [NewGuard] panics if given it (for gRPC, see
// grpcidempotency.SharedKeys).
func SharedKeys() Option {
	return middlewareOption{"SharedKeys", "SharedKeys", func(c *config) { c.scope, c.shared = func(*http.Request) string { return "" }, true }}
}

// ReplayExclude sets the response headers that are neither stored nor
// replayed. Default: the hop-by-hop headers (Connection, Keep-Alive,
// Proxy-Authenticate, Proxy-Authorization, TE, Trailer, Transfer-Encoding,
// Upgrade), Date and Set-Cookie. Headers that outer middleware set on the
// repeat are kept whatever the stored response had. For the middleware;
// [NewGuard] panics if given it.
func ReplayExclude(headers ...string) Option {
	return middlewareOption{"ReplayExclude", "", func(c *config) { c.exclude = headerSet(headers...) }}
}

// headerSet returns the set of headers, by their canonical names.
func headerSet(headers ...string) map[string]bool {
	set := make(map[string]bool, len(headers))
	for _, h := range headers {
		set[http.CanonicalHeaderKey(h)] = true
	}
	return set
}
