package idempotency_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// subjectKey is where the example's authentication puts the caller.
type subjectKey struct{}

// Scope by bearer token, by the token's subject: authentication runs
// first and puts the verified subject in the request's context, and the
// scope reads it, so that a caller whose token is refreshed between
// retries keeps its keys, and two callers never share them.
func Example_scopeByBearerSubject() {
	tokens := map[string]string{"tok-alice-1": "alice", "tok-alice-2": "alice", "tok-bob": "bob"} // verified tokens and their subjects
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sub, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			if !ok {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, sub)))
		})
	}
	bySubject := idempotency.Scope(func(r *http.Request) string { return "sub:" + r.Context().Value(subjectKey{}).(string) })
	runs := 0
	h := authenticate(idempotency.Middleware(nil, bySubject)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	})))
	for _, token := range []string{"tok-alice-1", "tok-alice-2", "tok-bob"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set(idempotency.Header, "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(token, " ", w.Code, " ", w.Header().Get(idempotency.ReplayedHeader))))
	}
	fmt.Println("runs:", runs)
	// Output:
	// tok-alice-1 201
	// tok-alice-2 201 true
	// tok-bob 201
	// runs: 2
}

// Scope by session cookie, by the session's user (not the Cookie header,
// which carries other cookies too, nor the session ID, which a login
// renews).
func Example_scopeBySession() {
	sessions := map[string]string{"s1": "alice", "s2": "bob"} // the service's session store
	bySession := idempotency.Scope(func(r *http.Request) string {
		c, err := r.Cookie("session")
		if err != nil {
			return "anonymous"
		}
		return "user:" + sessions[c.Value]
	})
	runs := 0
	h := idempotency.Middleware(nil, bySession)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	for _, session := range []string{"s1", "s2", "s1"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.AddCookie(&http.Cookie{Name: "session", Value: session})
		r.Header.Set(idempotency.Header, "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(session, " ", w.Code, " ", w.Header().Get(idempotency.ReplayedHeader))))
	}
	fmt.Println("runs:", runs)
	// Output:
	// s1 201
	// s2 201
	// s1 201 true
	// runs: 2
}

// Scope by mTLS, by the client certificate the TLS handshake verified: a
// digest of it (or its subject, if certificates are renewed under one).
func Example_scopeByClientCertificate() {
	byCertificate := idempotency.Scope(func(r *http.Request) string {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return "anonymous" // or refuse such requests before the middleware
		}
		sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
		return "cert:" + hex.EncodeToString(sum[:])
	})
	runs := 0
	h := idempotency.Middleware(nil, byCertificate)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	for _, cert := range []string{"alice's certificate", "bob's certificate", "alice's certificate"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte(cert)}}} // as the server's handshake sets it
		r.Header.Set(idempotency.Header, "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Header().Get(idempotency.ReplayedHeader))))
	}
	fmt.Println("runs:", runs)
	// Output:
	// 201
	// 201
	// 201 true
	// runs: 2
}
