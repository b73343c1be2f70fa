package httpclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"testing"
)

// A host written with an ideographic or full-width full stop has no ASCII
// dot, so sameNetwork takes it for a one-label local name; net/http maps
// it (IDNA) to the dotted internet name it dials.
func TestReview96TrustNoRetryIDNADots(t *testing.T) {
	for _, raw := range []string{"http://example\u3002com/", "http://example\uff0ecom/", "http://example\uff61com/", "http://ai\u3002/"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Logf("%q: parse: %v", raw, err)
			continue
		}
		trusted := sameNetwork(u)
		var dialed string
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed = addr
			return nil, errors.New("no dial in test")
		}}
		_, _ = (&http.Client{Transport: tr}).Get(raw)
		t.Logf("%q: trusted=%v dialed=%q", raw, trusted, dialed)
		if trusted && dialed != "" && !sameNetwork(&url.URL{Host: dialed}) {
			t.Errorf("%q trusted as same network, but net/http dials %q", raw, dialed)
		}
	}
}

func TestReview96TrustEdges(t *testing.T) {
	for host, want := range map[string]bool{
		"ai.": false, "ai..": false, "localhost.": true, "LOCALHOST": true, "printer": true,
		"0x": true, "4294967296": false, "[::1]": true, "[fe80::1%25eth0]": false, "[::ffff:8.8.8.8]": false,
		"": false, "x.internal.": true, "127.1": false,
	} {
		got := sameNetwork(&url.URL{Host: host})
		if got != want {
			t.Errorf("host %q: trusted=%v, want %v", host, got, want)
		}
	}
}
