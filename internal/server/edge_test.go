package server_test

// The node's edge: slow clients are cut, long polls are not, one address
// cannot hold every connection, and behind trusted proxies the token
// service's failure limit counts each client, not the proxy.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server"
	"github.com/sombus/sombus/internal/server/servertest"
)

// startEdge starts a node with cfg's edge settings on a fresh SQLite store.
func startEdge(t *testing.T, cfg server.Config) *servertest.Node {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Store = "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db")
	cfg.BootstrapKey = servertest.BootstrapKey
	cfg.ShutdownGrace = 2 * time.Second
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	n := &servertest.Node{T: t, Server: srv, URL: srv.URL, Clock: bus.SystemClock{}, HTTP: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(n.Close)
	return n
}

// dial opens a raw connection to the node.
func dial(t *testing.T, n *servertest.Node) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(n.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readToClose reads c until the node closes it, failing the test when it is
// still open after limit. It returns what the node wrote and how long the
// close took.
func readToClose(t *testing.T, c net.Conn, start time.Time, limit time.Duration) (string, time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s (read so far: %q)", limit, b)
	}
	return string(b), time.Since(start)
}

// Headers that announce a body which never comes hold the connection no
// longer than the body timeout, on every route: refused before the body is
// read (no credential, unknown route), on the token endpoint whose body is
// the credential, and on a route that reads it.
func TestSilentBodyIsCut(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	n := startEdge(t, server.Config{BodyTimeout: timeout})
	cases := []struct {
		name, head, status, says string
	}{
		{"unauthenticated management", "POST /v1/manage/users HTTP/1.1\r\nContent-Type: application/json\r\n", "401", ""},
		{"unauthenticated publish", "POST /v1/tenants/w0/messages HTTP/1.1\r\nContent-Type: application/json\r\n", "401", ""},
		{"token endpoint", "POST /v1/oauth/token HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n", "400", ""},
		{"unknown route", "POST /nowhere HTTP/1.1\r\n", "404", ""},
		{"authenticated management", "POST /v1/manage/users HTTP/1.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " + servertest.BootstrapKey + "\r\n",
			"400", "did not arrive within 300ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, n)
			start := time.Now()
			if _, err := io.WriteString(c, tc.head+"Host: sombus\r\nContent-Length: 100\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			got, took := readToClose(t, c, start, 5*time.Second)
			if took < timeout-50*time.Millisecond {
				t.Errorf("closed after %s, before the body timeout of %s", took, timeout)
			}
			if got != "" && !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") {
				t.Errorf("answer %q, want status %s or none", got, tc.status)
			}
			if tc.says != "" && !strings.Contains(got, tc.says) {
				t.Errorf("answer %q does not say %q", got, tc.says)
			}
		})
	}
}

// Clients dripping their headers or their body a byte at a time are cut at
// the header and body timeouts, however steadily they drip.
func TestDrippingClientsAreCut(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	n := startEdge(t, server.Config{HeaderTimeout: timeout, BodyTimeout: timeout})
	body := "POST /v1/manage/users HTTP/1.1\r\nHost: sombus\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
		servertest.BootstrapKey + "\r\nContent-Length: 1000\r\n\r\n"
	cases := []struct{ name, first, drip string }{
		{"headers", "", "GET /healthz HTTP/1.1\r\nHost: sombus\r\nX-Slow: " + strings.Repeat("a", 200)},
		{"body", body, `{"name":"` + strings.Repeat("a", 200)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			for range 10 {
				c := dial(t, n)
				start := time.Now()
				if _, err := io.WriteString(c, tc.first); err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < len(tc.drip); i++ {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						if _, err := c.Write([]byte{tc.drip[i]}); err != nil {
							return
						}
					}
				}()
				_, took := readToClose(t, c, start, 3*time.Second)
				close(stop)
				if took < timeout-50*time.Millisecond {
					t.Errorf("closed after %s, before the timeout of %s", took, timeout)
				}
			}
			wg.Wait()
		})
	}
}

// A long poll has no body: it waits its whole wait, longer than the body
// timeout, and answers normally, also on a connection that sent a body
// before.
func TestLongPollOutlivesBodyTimeout(t *testing.T) {
	t.Parallel()
	n := startEdge(t, server.Config{BodyTimeout: 200 * time.Millisecond, HeaderTimeout: 200 * time.Millisecond})
	p := n.NewPair(nil)
	for round := range 2 {
		start := time.Now()
		msgs := n.Receive(p, "wait=1")
		if took := time.Since(start); len(msgs) != 0 || took < 900*time.Millisecond {
			t.Fatalf("round %d: long poll answered %d messages after %s, want none after its 1 s wait", round, len(msgs), took)
		}
		// A body on the same keep-alive connection, then the next long poll.
		n.Publish(p, servertest.Envelope(fmt.Sprintf("m%d", round), "s", nil)).Must(t, 202)
		msgs = n.Receive(p, "wait=1")
		if len(msgs) != 1 {
			t.Fatalf("round %d: got %d messages", round, len(msgs))
		}
		n.Settle(p, "ack", []string{msgs[0].ReceiptHandle}, nil).Must(t, 200)
	}
}

// openHealthy opens a connection and has one request answered on it, so
// that the node has accepted it and it stays open (keep-alive).
func openHealthy(t *testing.T, n *servertest.Node) (net.Conn, error) {
	t.Helper()
	c := dial(t, n)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: sombus\r\n\r\n"); err != nil {
		return c, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return c, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c, nil
}

// One address holds at most MaxConnsPerAddr connections; the next is closed
// unanswered, and a slot frees when one of them closes.
func TestConnectionCapPerAddress(t *testing.T) {
	t.Parallel()
	n := startEdge(t, server.Config{MaxConnsPerAddr: 3})
	var open []net.Conn
	for i := range 3 {
		c, err := openHealthy(t, n)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	if _, err := openHealthy(t, n); err == nil {
		t.Fatal("a 4th connection from one address was served; want it closed")
	}
	_ = open[0].Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := openHealthy(t, n)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection after one of three closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A trusted proxy's own connections are not capped: it carries many clients.
func TestConnectionCapSparesTrustedProxies(t *testing.T) {
	t.Parallel()
	n := startEdge(t, server.Config{MaxConnsPerAddr: 1, TrustedProxies: "10.0.0.0/8, 127.0.0.1/32"})
	for i := range 4 {
		if _, err := openHealthy(t, n); err != nil {
			t.Fatalf("connection %d from a trusted proxy: %v", i+1, err)
		}
	}
}

// failToken makes one failed token request for an unknown client id with
// the given X-Forwarded-For ("" sends none) and returns the status.
func failToken(t *testing.T, n *servertest.Node, xff string) int {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {bus.NewID(bus.PrefixConnection)}, "client_secret": {"wrong"}}
	req, err := http.NewRequest("POST", n.URL+"/v1/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := n.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Behind a trusted proxy, the failure limit per address counts the client
// X-Forwarded-For names (the rightmost address that is not a trusted
// proxy): one client blocked does not block another.
func TestTrustedProxiesCountClientsApart(t *testing.T) {
	t.Parallel()
	n := startEdge(t, server.Config{TrustedProxies: "127.0.0.0/8,192.0.2.0/24"})
	for i := 0; i < auth.FailuresPerRemoteAddr; i++ {
		if got := failToken(t, n, "203.0.113.7"); got != 401 {
			t.Fatalf("failure %d: status %d, want 401", i+1, got)
		}
	}
	for _, xff := range []string{
		"203.0.113.7",
		"203.0.113.7, 192.0.2.1",                // through a second trusted proxy
		"198.51.100.9, 203.0.113.7",             // a forged entry on the left changes nothing
		"198.51.100.9, 203.0.113.7, 192.0.2.44", // both
	} {
		if got := failToken(t, n, xff); got != 429 {
			t.Errorf("X-Forwarded-For %q: status %d, want 429 (the blocked client)", xff, got)
		}
	}
	for _, xff := range []string{"198.51.100.9", "2001:db8::1", "198.51.100.9, 192.0.2.1"} {
		if got := failToken(t, n, xff); got != 401 {
			t.Errorf("X-Forwarded-For %q: status %d, want 401 (another client, not blocked)", xff, got)
		}
	}
}

// Without --trusted-proxies, or from a peer outside them, X-Forwarded-For
// is ignored: a forged one cannot dodge the limit of the real address.
func TestForwardedForIgnoredFromUntrustedPeers(t *testing.T) {
	t.Parallel()
	for _, proxies := range []string{"", "10.0.0.0/8"} {
		t.Run("proxies="+proxies, func(t *testing.T) {
			t.Parallel()
			n := startEdge(t, server.Config{TrustedProxies: proxies})
			for i := 0; i < auth.FailuresPerRemoteAddr; i++ {
				if got := failToken(t, n, fmt.Sprintf("203.0.113.%d", i)); got != 401 {
					t.Fatalf("failure %d: status %d, want 401", i+1, got)
				}
			}
			if got := failToken(t, n, "198.51.100.9"); got != 429 {
				t.Errorf("a new forged X-Forwarded-For: status %d, want 429", got)
			}
		})
	}
}

// A --trusted-proxies value that is not a list of CIDRs stops the start.
func TestTrustedProxiesRefusesBadRanges(t *testing.T) {
	t.Parallel()
	_, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(t.TempDir(), "s.db"), TrustedProxies: "10.0.0.0/8,not-a-range",
	})
	if err == nil || !strings.Contains(err.Error(), "--trusted-proxies") || !strings.Contains(err.Error(), "not-a-range") {
		t.Fatalf("err = %v", err)
	}
}

// Over HTTP/2 a body that stops coming is cut at the body timeout too,
// while the connection's other streams go on.
func TestSilentBodyIsCutOverHTTP2(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	certFile, keyFile, pool := selfSigned(t)
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"),
		TLSCert: certFile, TLSKey: keyFile, BootstrapKey: servertest.BootstrapKey, BodyTimeout: timeout, ShutdownGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, `{"name":`) }() // and nothing more
	req, _ := http.NewRequest("POST", srv.URL+"/v1/manage/users", pr)
	req.Header.Set("Authorization", "Bearer "+servertest.BootstrapKey)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 400 || !strings.Contains(string(b), "did not arrive within 300ms") {
		t.Fatalf("%s %d %q, want HTTP/2 400 naming the body timeout", resp.Proto, resp.StatusCode, b)
	}
	if took := time.Since(start); took < timeout-50*time.Millisecond {
		t.Fatalf("answered after %s, before the body timeout", took)
	}
	// The connection goes on serving other streams.
	req, _ = http.NewRequest("GET", srv.URL+"/v1/manage/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+servertest.BootstrapKey)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("whoami after a cut stream: %d", resp.StatusCode)
	}
}

// A body declared (Content-Length) over its route's limit is refused 413
// at once, on every route with a limit, while the client still holds the
// rest of the body back: not when the body timeout runs out, which is when
// net/http would stop waiting for a body under 256 KiB that it reads
// before answering, to keep the connection. The answer closes the
// connection, as nothing read the body.
func TestDeclaredOversizeBodyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Second
	n := startEdge(t, server.Config{BodyTimeout: timeout})
	p := n.NewPair(nil)
	const form, jsonType = "Content-Type: application/x-www-form-urlencoded\r\n", "Content-Type: application/json\r\n"
	consumer := "POST /v1/tenants/" + p.WS + "/consumers/" + p.Consumer
	cases := []struct {
		name, head string
		length     int
		says       string
	}{
		{"ack", consumer + "/ack HTTP/1.1\r\n" + jsonType + "Authorization: Bearer " + p.ConsumTok + "\r\n", 64<<10 + 1, `"` + bus.RulePullBadRequest + `"`},
		{"nack", consumer + "/nack HTTP/1.1\r\n" + jsonType + "Authorization: Bearer " + p.ConsumTok + "\r\n", 100000, `"` + bus.RulePullBadRequest + `"`},
		{"token", "POST /v1/oauth/token HTTP/1.1\r\n" + form, 70000, `"invalid_request"`},
		{"publish", "POST /v1/tenants/" + p.WS + "/messages HTTP/1.1\r\n" + jsonType + "Authorization: Bearer " + p.ProducerTok + "\r\n", 256<<10 + 1, `"` + bus.RuleEnvelopeTooLarge + `"`},
		{"batch", "POST /v1/tenants/" + p.WS + "/messages/batch HTTP/1.1\r\n" + jsonType + "Authorization: Bearer " + p.ProducerTok + "\r\n", 1<<20 + 1, `"` + bus.RuleEnvelopeTooLarge + `"`},
		{"management", "POST /v1/manage/users HTTP/1.1\r\n" + jsonType + "Authorization: Bearer " + servertest.BootstrapKey + "\r\n", 1<<20 + 1, `"` + bus.RuleManageBadRequest + `"`},
		{"portal form", "POST /portal/signin HTTP/1.1\r\n" + form, 64<<10 + 1, "Form too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, n)
			start := time.Now()
			// One byte of the body; the rest is held back until the answer.
			if _, err := fmt.Fprintf(c, "%sHost: sombus\r\nContent-Length: %d\r\n\r\n{", tc.head, tc.length); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(start.Add(timeout / 2))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer within half the body timeout while the body is held back: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), tc.says) {
				t.Errorf("answer %d %s, want 413 saying %s", resp.StatusCode, b, tc.says)
			}
			if !resp.Close {
				t.Errorf("the answer keeps the connection open with an unread body")
			}
		})
	}
}
