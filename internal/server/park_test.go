package server_test

// Long polls over HTTP/1.1 park: they wait without a goroutine, are
// answered by the node when a message comes, their deadline runs out or
// the node stops, and their connection is served again afterwards.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server"
	"github.com/sombus/sombus/internal/server/servertest"
)

var waitingRE = regexp.MustCompile(`(?m)^sombus_long_polls_waiting (\S+)$`)

// waitingPolls reads the node's gauge of waiting long polls.
func waitingPolls(t *testing.T, n *servertest.Node) int {
	t.Helper()
	r := n.Do("GET", "/metrics", "", nil)
	m := waitingRE.FindStringSubmatch(r.String())
	if m == nil {
		t.Fatalf("no sombus_long_polls_waiting in /metrics")
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(f)
}

// eventually waits until cond holds, failing after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pollRequest is a raw long poll of p's queue.
func pollRequest(n *servertest.Node, p *servertest.Pair, wait int) string {
	host := strings.TrimPrefix(n.URL, "http://")
	return fmt.Sprintf("GET /v1/tenants/%s/consumers/%s/messages?max=10&wait=%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", p.WS, p.Consumer, wait, host, p.ConsumTok)
}

func startParkNode(t *testing.T) *servertest.Node {
	return startEdge(t, server.Config{Clock: bus.SystemClock{}})
}

func TestParkedPollsHoldNoGoroutine(t *testing.T) {
	n := startParkNode(t)
	p := n.NewPair(nil)
	const polls = 60
	before := runtime.NumGoroutine()
	conns := make([]net.Conn, polls)
	readers := make([]*bufio.Reader, polls)
	// Each consumer connection holds a few long polls at once: use one
	// pair per few polls.
	pairs := []*servertest.Pair{p}
	for len(pairs)*4 < polls {
		pairs = append(pairs, n.NewPair(nil))
	}
	for i := range conns {
		conns[i] = dial(t, n)
		readers[i] = bufio.NewReader(conns[i])
		if _, err := io.WriteString(conns[i], pollRequest(n, pairs[i%len(pairs)], 20)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "all polls waiting", func() bool { return waitingPolls(t, n) == polls })
	// Let the handlers' goroutines end.
	time.Sleep(200 * time.Millisecond)
	if grown := runtime.NumGoroutine() - before; grown > polls/4 {
		t.Errorf("%d waiting polls grew the goroutines by %d; parked polls should hold none", polls, grown)
	}
	// A message wakes one of the first pair's polls, answered on its
	// connection with the message.
	n.Publish(p, servertest.Envelope("m-1", "story-1", nil)).Must(t, 202)
	got := make(chan int, polls)
	for i := 0; i < polls; i += len(pairs) {
		go func() {
			_ = conns[i].SetReadDeadline(time.Now().Add(5 * time.Second))
			res, err := http.ReadResponse(readers[i], nil)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode == 200 && strings.Contains(string(body), `"m-1"`) {
				got <- i
			}
		}()
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no waiting poll was answered with the published message")
	}
	eventually(t, 5*time.Second, "one poll fewer waiting", func() bool { return waitingPolls(t, n) == polls-1 })
}

func TestParkedPollKeepsItsConnection(t *testing.T) {
	n := startParkNode(t)
	p := n.NewPair(nil)
	tr := &http.Transport{MaxConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := n.URL + "/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/messages?max=10&wait="
	var conns []string
	get := func(wait int) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url+strconv.Itoa(wait), nil)
		req.Header.Set("Authorization", "Bearer "+p.ConsumTok)
		req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn.LocalAddr().String()) },
		}))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	// The wait runs out: an empty answer, after the wait, with the usual
	// headers.
	start := time.Now()
	res, body := get(1)
	if took := time.Since(start); res.StatusCode != 200 || body != `{"messages":[]}`+"\n" && body != `{"messages":[]}` || took < 900*time.Millisecond {
		t.Fatalf("empty long poll: %d %q after %v", res.StatusCode, body, took)
	}
	if res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("Date") == "" {
		t.Errorf("headers of a parked answer: %v", res.Header)
	}
	// Then a message published while the next poll waits.
	go func() {
		time.Sleep(300 * time.Millisecond)
		n.Publish(p, servertest.Envelope("m-2", "story-2", nil)).Must(t, 202)
	}()
	res, body = get(10)
	if res.StatusCode != 200 || !strings.Contains(body, `"m-2"`) {
		t.Fatalf("woken long poll: %d %q", res.StatusCode, body)
	}
	// An immediate answer, and a later one after the connection waited
	// idle between requests.
	time.Sleep(300 * time.Millisecond)
	if res, body = get(1); res.StatusCode != 200 {
		t.Fatalf("third poll: %d %q", res.StatusCode, body)
	}
	for i, a := range conns {
		if a != conns[0] {
			t.Fatalf("poll %d came on another connection (%s, first %s): a parked connection should be served again", i, a, conns[0])
		}
	}
}

func TestParkedPollClientGoesAway(t *testing.T) {
	n := startParkNode(t)
	p := n.NewPair(nil)
	// More polls, one after the other, than a consumer connection may
	// hold at once: each must give its place back when its client goes.
	for i := 0; i < 12; i++ {
		c := dial(t, n)
		if _, err := io.WriteString(c, pollRequest(n, p, 20)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the poll waiting", func() bool { return waitingPolls(t, n) == 1 })
		_ = c.Close()
		eventually(t, 5*time.Second, "the poll ended", func() bool { return waitingPolls(t, n) == 0 })
	}
	// Nothing was taken for the polls that went away.
	n.Publish(p, servertest.Envelope("m-3", "story-3", nil)).Must(t, 202)
	if ms := n.Receive(p, "max=10&wait=0"); len(ms) != 1 || ms[0].ReceiveCount != 1 {
		t.Fatalf("after polls that went away: %+v", ms)
	}
}

func TestParkedPollPipelined(t *testing.T) {
	n := startParkNode(t)
	p := n.NewPair(nil)
	c := dial(t, n)
	host := strings.TrimPrefix(n.URL, "http://")
	if _, err := io.WriteString(c, pollRequest(n, p, 2)+"GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"messages":[]`) {
		t.Fatalf("pipelined poll: %d %q", res.StatusCode, body)
	}
	// The connection is closed after the poll's answer: the pipelined
	// request is not served on it.
	if !res.Close {
		t.Fatal("a poll followed by a pipelined request was answered without Connection: close")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the node wrote after Connection: close")
	}
}

func TestParkedPollsAnswerAtShutdown(t *testing.T) {
	n := startParkNode(t)
	p := n.NewPair(nil)
	c := dial(t, n)
	if _, err := io.WriteString(c, pollRequest(n, p, 20)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the poll waiting", func() bool { return waitingPolls(t, n) == 1 })
	start := time.Now()
	done := make(chan struct{})
	go func() { n.Close(); close(done) }()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("parked poll at shutdown: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"messages":[]`) || !res.Close {
		t.Fatalf("parked poll at shutdown: %d close=%v %q", res.StatusCode, res.Close, body)
	}
	<-done
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("shutdown with a parked poll took %v", took)
	}
}

// Over TLS a parked poll's connection is served again past its handshake;
// over HTTP/2 polls wait in their handlers as before.
func TestParkedPollOverTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"),
		TLSCert: certFile, TLSKey: keyFile, BootstrapKey: servertest.BootstrapKey, ShutdownGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxConnsPerHost: 1, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	other := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	n := &servertest.Node{T: t, Server: srv, URL: srv.URL, Clock: bus.SystemClock{}, HTTP: &http.Client{Transport: other, Timeout: 30 * time.Second}}
	t.Cleanup(n.Close)
	p := n.NewPair(nil)
	for _, tc := range []struct {
		name  string
		tr    *http.Transport
		proto int
	}{{"HTTP/1.1", h1, 1}, {"HTTP/2", h2, 2}} {
		c := &http.Client{Transport: tc.tr, Timeout: 30 * time.Second}
		var conns []net.Conn
		poll := func(wait int) string {
			t.Helper()
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/tenants/%s/consumers/%s/messages?max=10&wait=%d", srv.URL, p.WS, p.Consumer, wait), nil)
			req.Header.Set("Authorization", "Bearer "+p.ConsumTok)
			req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) },
			}))
			res, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || res.ProtoMajor != tc.proto {
				t.Fatalf("%s: %s %d %q", tc.name, res.Proto, res.StatusCode, body)
			}
			return string(body)
		}
		if body := poll(1); !strings.Contains(body, `"messages":[]`) {
			t.Fatalf("%s: empty poll %q", tc.name, body)
		}
		id := "tls-" + strconv.Itoa(tc.proto)
		go func() {
			time.Sleep(300 * time.Millisecond)
			n.Publish(p, servertest.Envelope(id, "story-"+id, nil)).Must(t, 202)
		}()
		if body := poll(10); !strings.Contains(body, `"`+id+`"`) {
			t.Fatalf("%s: woken poll %q", tc.name, body)
		}
		if len(conns) != 2 || conns[0] != conns[1] {
			t.Fatalf("%s: the polls came on %d connections; want one, served again", tc.name, len(conns))
		}
		tc.tr.CloseIdleConnections()
	}
}

// maxParkedPollHeap bounds the live heap a waiting long poll holds in the
// node. With 10,000 of them on one node the node must stay under 250 MiB of
// memory, 25 KiB a poll; the load test (internal/bench, TestLongPollLoad)
// measures the process's RSS, which held about twice the live heap there
// (about 145 MiB with 70 MiB of heap for 10,000 polls, the runtime and the
// collector's headroom besides), so 12 KiB of live heap a poll keeps the
// goal. This counts the heap, in CI.
const maxParkedPollHeap = 12 << 10

// TestParkedPollsHeap opens polls long polls, each of its own consumer as in
// the load test, and bounds the heap they hold while they wait (the
// client's side of each connection, a socket and no buffer, is counted too).
func TestParkedPollsHeap(t *testing.T) {
	const polls = 200
	n := startParkNode(t)
	reqs := make([]string, polls)
	for i := range reqs {
		reqs[i] = pollRequest(n, n.NewPair(nil), 20)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range reqs {
		if _, err := io.WriteString(dial(t, n), r); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "all polls waiting", func() bool { return waitingPolls(t, n) == polls })
	time.Sleep(200 * time.Millisecond) // the handlers' goroutines end
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / polls
	t.Logf("%d waiting polls: %d B of heap a poll", polls, per)
	if per > maxParkedPollHeap {
		t.Errorf("a waiting poll holds %d B of heap; the bound is %d B", per, maxParkedPollHeap)
	}
}
