package httpclient

import (
	"net/url"
	"testing"
)

func TestSameNetwork(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://127.0.0.1:8080/":                 true,
		"http://[::1]/":                          true,
		"http://10.1.2.3/":                       true,
		"http://192.168.0.7/":                    true,
		"http://172.16.0.1/":                     true,
		"http://[fd00::1]/":                      true,
		"http://localhost/":                      true,
		"http://orders/":                         true,
		"http://orders.shop.svc.cluster.local/":  true,
		"http://db.internal/":                    true,
		"http://printer.local/":                  true,
		"https://api.example.com/":               false,
		"http://8.8.8.8/":                        false,
		"http://10.0.0.1.evil.com/":              false,
		"http://[2001:db8::1]/":                  false,
		"http://169.254.169.254/":                false,
		"http://internal.evil.com/":              false,
		"http://cluster.local.evil.com/":         false,
		"http://ORDERS.SHOP.SVC.CLUSTER.LOCAL./": true,
		"http://localhost./":                     true,
		"http://[fe80::1%25eth0]/":               false,
		"http://[2001:4860:4860::8888%25eth0]/":  false,
		"http://[fd00::1%25eth0]/":               true,
		"http://134744072/":                      false, // 8.8.8.8 to inet_aton, as glibc's resolver reads it
		"http://0x8080808/":                      false,
		"http://0X8080808/":                      false,
		"http://0x/":                             true, // a name
		"http://42x/":                            true,
		"http://orders2/":                        true,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := sameNetwork(u); got != want {
			t.Errorf("sameNetwork(%s) = %v, want %v", raw, got, want)
		}
	}
}
