package edge

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7:5000":                 "203.0.113.7",
		"203.0.113.7":                      "203.0.113.7",
		"[::ffff:203.0.113.7]:1":           "203.0.113.7",
		"[2001:db8:1:2:3:4:5:6]:443":       "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:ffff:ffff:ffff": "2001:db8:1:2::/64",
		"not an address":                   "not an address",
	} {
		if got := AddrKey(in); got != want {
			t.Errorf("AddrKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseProxies(t *testing.T) {
	ps, err := ParseProxies(" 10.0.0.0/8, 192.0.2.7 ,fd00::/8,,")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[1].String() != "192.0.2.7/32" {
		t.Fatalf("ParseProxies = %v", ps)
	}
	if ps, err := ParseProxies(""); err != nil || len(ps) != 0 {
		t.Fatalf("ParseProxies(\"\") = %v, %v", ps, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8;"} {
		if _, err := ParseProxies(bad); err == nil || !strings.Contains(err.Error(), "CIDR") {
			t.Errorf("ParseProxies(%q) err = %v", bad, err)
		}
	}
}

func TestClientAddr(t *testing.T) {
	ps, err := ParseProxies("10.0.0.0/8,2001:db8:ff::/48")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		peer string
		xff  []string
		want string
	}{
		{"10.1.1.1:5", nil, "10.1.1.1:5"},                                               // no header: the proxy itself
		{"10.1.1.1:5", []string{"203.0.113.7"}, "203.0.113.7"},                          // one proxy
		{"10.1.1.1:5", []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},            // a forged entry on the left
		{"10.1.1.1:5", []string{"203.0.113.7, 10.2.2.2"}, "203.0.113.7"},                // two proxies
		{"10.1.1.1:5", []string{"198.51.100.1", "203.0.113.7,10.2.2.2"}, "203.0.113.7"}, // several headers
		{"10.1.1.1:5", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},                      // every hop trusted: the leftmost
		{"10.1.1.1:5", []string{"garbage, 10.2.2.2"}, "10.2.2.2"},                       // not an address: the hop that passed it
		{"10.1.1.1:5", []string{"garbage"}, "10.1.1.1:5"},
		{"10.1.1.1:5", []string{"203.0.113.7:4711"}, "203.0.113.7"}, // with a port
		{"10.1.1.1:5", []string{"[2001:db8::1]:80"}, "2001:db8::1"},
		{"10.1.1.1:5", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"[2001:db8:ff::9]:443", []string{"2001:db8::1"}, "2001:db8::1"}, // an IPv6 proxy
		{"203.0.113.9:5", []string{"198.51.100.1"}, "203.0.113.9:5"},     // the peer is not trusted
		{"[::ffff:10.1.1.1]:5", []string{"203.0.113.7"}, "203.0.113.7"},  // a mapped peer address
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := ps.ClientAddr(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %q, want %q", c.peer, c.xff, got, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.1.1:5"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	if got := Proxies(nil).ClientAddr(r); got != "10.1.1.1:5" {
		t.Errorf("no proxies: client %q, want the peer", got)
	}
}

// Once the body has been read to its end, its deadline no longer applies
// (net/http lifts it): the request goes on as long as it needs, and its
// context is not ended when the server's watch for a departing client reads
// past the deadline.
func TestBodyDeadlineLiftedAtItsEnd(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		select {
		case <-time.After(4 * timeout):
			_, _ = io.WriteString(w, "done")
		case <-r.Context().Done():
			// The client is still there: nothing but the deadline ended it.
			t.Errorf("request ended %v after its body was read", r.Context().Err())
		}
	}), nil, timeout))
	defer srv.Close()
	for range 2 { // the second on the same connection
		req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL, strings.NewReader("hello"))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Fatalf("answer %d %q", resp.StatusCode, b)
		}
	}
}

// A body that does not arrive in time reads as a *BodyTimeoutError.
func TestBodyTimeoutError(t *testing.T) {
	const timeout = 100 * time.Millisecond
	got := make(chan error, 1)
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		got <- err
	}), nil, timeout))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	select {
	case err := <-got:
		var bt *BodyTimeoutError
		if !errors.As(err, &bt) || bt.Timeout != timeout {
			t.Fatalf("err = %#v, want a BodyTimeoutError of %s", err, timeout)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body read did not end")
	}
}
