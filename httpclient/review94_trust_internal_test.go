package httpclient

import (
	"net/url"
	"testing"
)

// Hosts that the default TrustNoRetry takes for the same network though
// they name (or may name) a server on the internet.
func TestReview94_SameNetworkTrustsInternetNames(t *testing.T) {
	for _, h := range []string{"http://ai./", "http://ai/", "http://tk./", "http://com./", "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/", "http://[::]/"} {
		u, _ := url.Parse(h)
		t.Logf("%-30s trusted=%v", h, sameNetwork(u))
	}
	// A single label with the root's dot is an absolute name, a top-level
	// domain ("ai." has served a web site from its apex): never a short
	// name of the same network, but the dot is trimmed and it is trusted.
	for _, h := range []string{"http://ai./", "http://com./"} {
		u, _ := url.Parse(h)
		if sameNetwork(u) {
			t.Errorf("%s, an absolute internet name, is trusted by default", h)
		}
	}
}

// A URL without a host is no service of the same network (review96).
func TestNoHostIsNotTrusted(t *testing.T) {
	for _, h := range []string{""} {
		if sameNetwork(&url.URL{Scheme: "http", Host: h}) {
			t.Errorf("%q trusted", h)
		}
	}
}
