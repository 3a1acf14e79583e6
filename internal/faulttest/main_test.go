package faulttest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/loadcheck"
	"github.com/sombus/sombus/internal/server/servertest"
)

// long runs the long forms: 50 kills per store instead of 5, longer loads.
var long = flag.Bool("long", false, "run the long forms of the crash and fault tests (make crash-long)")

// bootstrapKey is the first operator's API key on every test node.
const bootstrapKey = "sbk_faulttest-bootstrap-key-0123456789abcdef"

// publicURL is every node's --public-url: nodes that share a store must
// share it, as their tokens carry it.
const publicURL = "http://sombus.faulttest.example"

// sombusBinary is the binary TestMain built.
var sombusBinary string

func TestMain(m *testing.M) {
	if helperMain() {
		return // never reached: the helper execs or exits
	}
	flag.Parse()
	bin, remove, err := servertest.BuildSombus()
	if err != nil {
		fmt.Fprintf(os.Stderr, "faulttest: %v\n", err)
		os.Exit(1)
	}
	sombusBinary = bin
	code := m.Run()
	remove()
	os.Exit(code)
}

// node is a `sombus serve` process that may be killed and started again on
// the same address and store.
type node struct {
	t     testing.TB
	name  string
	addr  string
	store string
	URL   string
	HTTP  *http.Client
	// wrap, when set, turns the command line into the one to run (the disk
	// test runs the node in a mount namespace of its own).
	wrap func(args []string) *exec.Cmd

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logs    *servertest.ProcessLog
	starts  int
}

// startNode runs `sombus serve` on store and waits until it is ready. The
// node is stopped (SIGTERM, then SIGKILL) when the test ends.
func startNode(t testing.TB, name, store string) *node {
	t.Helper()
	n := newNode(t, name, store)
	n.start()
	return n
}

// newNode makes a node that is not started yet.
func newNode(t testing.TB, name, store string) *node {
	n := &node{t: t, name: name, store: store, addr: servertest.FreeAddr(t),
		HTTP: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	n.URL = "http://" + n.addr
	t.Cleanup(n.stop)
	return n
}

// start starts the process (again) and waits until /readyz answers 200.
func (n *node) start() {
	n.t.Helper()
	if err := n.tryStart(60 * time.Second); err != nil {
		n.t.Fatalf("start %s: %v", n.name, err)
	}
}

func (n *node) tryStart(within time.Duration) error {
	n.mu.Lock()
	if n.cmd != nil {
		n.mu.Unlock()
		return fmt.Errorf("%s is running", n.name)
	}
	n.starts++
	args := []string{sombusBinary, "serve",
		"--listen", n.addr, "--store", n.store, "--bootstrap-key", bootstrapKey,
		"--public-url", publicURL, "--log-format", "text", "--log-level", "warn"}
	var cmd *exec.Cmd
	if n.wrap != nil {
		cmd = n.wrap(args)
	} else {
		cmd = exec.Command(args[0], args[1:]...)
	}
	lw := servertest.NewProcessLog(n.t, fmt.Sprintf("%s#%d", n.name, n.starts))
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.logs, n.waitErr = cmd, exited, lw, nil
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(exited)
	}()
	n.mu.Unlock()

	deadline := time.Now().Add(within)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-exited:
			n.mu.Lock()
			err := n.waitErr
			n.cmd = nil
			n.mu.Unlock()
			lw.Stop()
			return fmt.Errorf("exited before it was ready: %w\n%s", err, lastLines(lw.Text(), 20))
		default:
		}
		resp, err := c.Get(n.URL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			n.kill()
			return fmt.Errorf("not ready within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid is the running process's id (0 when it is not running).
func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// kill ends the process with SIGKILL and waits until it is gone.
func (n *node) kill() {
	n.mu.Lock()
	cmd, exited, lw := n.cmd, n.exited, n.logs
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	lw.Stop()
}

// stop ends the process with SIGTERM (SIGKILL after 15 s); the test fails
// when a node did not stop on SIGTERM.
func (n *node) stop() {
	n.mu.Lock()
	cmd, exited, lw := n.cmd, n.exited, n.logs
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		n.t.Errorf("%s did not stop within 15 s of SIGTERM; killing it", n.name)
		_ = cmd.Process.Kill()
		<-exited
	}
	lw.Stop()
}

// lastLines is the last k lines of s.
func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}

// answer is an HTTP answer read whole.
type answer = servertest.Response

// do sends a request with an optional bearer credential and a JSON body;
// safe from any goroutine (it returns errors, it never fails the test).
func (n *node) do(ctx context.Context, method, path, bearer string, body any) (*answer, error) {
	return servertest.Call(ctx, n.HTTP, n.URL, method, path, bearer, body)
}

// must is do for the test goroutine: it fails the test unless the answer
// has status want, and decodes the body into out when not nil.
func (n *node) must(t testing.TB, want int, method, path, bearer string, body, out any) *answer {
	t.Helper()
	a, err := n.do(context.Background(), method, path, bearer, body)
	if err != nil {
		t.Fatalf("%s %s %s: %v", n.name, method, path, err)
	}
	if a.Status != want {
		t.Fatalf("%s %s %s: %s, want %d", n.name, method, path, a, want)
	}
	if out != nil {
		if err := json.Unmarshal(a.Body, out); err != nil {
			t.Fatalf("%s %s %s: decode: %v", n.name, method, path, err)
		}
	}
	return a
}

// conn is a connection of a workspace with its secret and an access token.
type conn struct {
	ws, id, secret, token string
}

// workspace creates a workspace on n and returns its id.
func workspace(t testing.TB, n *node, name string) string {
	t.Helper()
	var w struct {
		ID string `json:"id"`
	}
	n.must(t, 201, "POST", "/v1/manage/workspaces", bootstrapKey, map[string]any{"name": name}, &w)
	return w.ID
}

// newConn creates a connection (kind producer or consumer, tier unlimited,
// consumers subscribed to som.>), issues its secret and gets a token.
func newConn(t testing.TB, n *node, ws, kind string) conn {
	t.Helper()
	body := map[string]any{"kind": kind, "name": kind, "quota_tier": "unlimited"}
	if kind == "consumer" {
		body["subscriptions"] = []map[string]any{{"topic": "som.>"}}
	}
	var c struct {
		ID string `json:"id"`
	}
	n.must(t, 201, "POST", "/v1/manage/workspaces/"+ws+"/connections", bootstrapKey, body, &c)
	var s struct {
		ClientSecret string `json:"client_secret"`
	}
	n.must(t, 201, "POST", "/v1/manage/workspaces/"+ws+"/connections/"+c.ID+"/secret", bootstrapKey, nil, &s)
	tok, err := n.token(context.Background(), c.ID, s.ClientSecret)
	if err != nil {
		t.Fatalf("token of %s: %v", c.ID, err)
	}
	return conn{ws: ws, id: c.ID, secret: s.ClientSecret, token: tok}
}

// token swaps a connection's credentials for an access token.
func (n *node) token(ctx context.Context, clientID, secret string) (string, error) {
	return servertest.FetchToken(ctx, n.HTTP, n.URL, clientID, secret)
}

// envelope is a valid envelope of story with payload {"i": i, "pad": pad}.
func envelope(messageID, story string, i int, pad string) map[string]any {
	return map[string]any{"som_version": "1.0.0", "message_id": messageID, "message_type": "story.context",
		"correlation_id": story, "payload": map[string]any{"i": i, "pad": pad}}
}

func publishPath(c conn) string  { return "/v1/tenants/" + c.ws + "/messages" }
func batchPath(c conn) string    { return "/v1/tenants/" + c.ws + "/messages/batch" }
func messagesPath(c conn) string { return "/v1/tenants/" + c.ws + "/consumers/" + c.id + "/messages" }
func ackPath(c conn) string      { return "/v1/tenants/" + c.ws + "/consumers/" + c.id + "/ack" }

// received is a message of a receive answer.
type received = servertest.Message

// receive receives on n; it returns the messages of a 200 answer, and the
// answer itself (nil with a transport error).
func (n *node) receive(ctx context.Context, c conn, query string) ([]received, *answer, error) {
	a, err := n.do(ctx, "GET", messagesPath(c)+"?"+query, c.token, nil)
	if err != nil || a.Status != 200 {
		return nil, a, err
	}
	var out struct {
		Messages []received `json:"messages"`
	}
	err = json.Unmarshal(a.Body, &out)
	return out.Messages, a, err
}

// ack acknowledges handles; it returns the answer.
func (n *node) ack(ctx context.Context, c conn, handles []string) (*answer, error) {
	return n.do(ctx, "POST", ackPath(c), c.token, map[string]any{"receipt_handles": handles})
}

// ciOrSkip skips the test outside CI and fails it under CI=true, where a
// test that cannot run must never pass unnoticed.
func ciOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// loadResult is how a load run ended.
type loadResult struct {
	rep *loadcheck.Report
	err error
}

// runLoad runs the load runner in the background; its result arrives on
// the channel when the run ends.
func runLoad(cfg loadcheck.Config) <-chan loadResult {
	done := make(chan loadResult, 1)
	go func() {
		rep, err := loadcheck.Run(context.Background(), cfg)
		done <- loadResult{rep, err}
	}()
	return done
}
