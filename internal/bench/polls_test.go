package bench

// TestLongPollLoad holds N long polls on one node, each on its own TCP
// connection, and measures what the node spends while they wait. It runs
// only when SOMBUS_POLLS names the counts:
//
//	SOMBUS_POLLS=1000,5000,10000 go test -run TestLongPollLoad -v -timeout 60m ./internal/bench/
//
// The node is a `sombus serve` process built from this tree (or the
// binary SOMBUS_POLLS_BIN names, to compare two builds) on a SQLite file in
// a temporary directory (SOMBUS_BENCH_DIR picks where; SOMBUS_POLLS_STORE
// gives another --store, such as an empty PostgreSQL database), without the
// per-address connection cap. For each count it
//
//  1. creates the consumers (SOMBUS_POLLS_PER_QUEUE polls share a queue,
//     default 1: every poll has its own consumer), 100 to a workspace with
//     one producer, each consumer subscribed to its own topic, and reports
//     how long that took;
//  2. opens the polls (raw HTTP/1.1 on one connection each, wait=20 unless
//     SOMBUS_POLLS_WAIT, re-issued as soon as answered) and waits until the
//     node's sombus_long_polls_waiting gauge counts them all;
//  3. reads the node's CPU (/proc/PID/stat utime+stime) over the quiet
//     window (every poll waiting, none due to expire) and then over 20 s of
//     steady state (each poll expires and is re-issued once in it), with
//     what an answer costs there (the nodes above their quiet rate, this
//     process, the database), and its RSS (/proc/PID/status VmRSS) and Go
//     heap and stacks (/metrics);
//  4. publishes SOMBUS_POLLS_SAMPLES (default 300) messages, each to a
//     random queue, 4 publishers one after another, and measures from
//     sending the publish to the poll's answer arriving (p50/p99); this
//     process collects its garbage first, so that its own collection
//     (10,000 goroutines) does not take the node's cores among them; and
//     reports what the phase cost a sample: the CPU of the nodes, of this
//     process and, on PostgreSQL, of the database server's processes on
//     this machine, and the database's transactions (pg_stat_database,
//     read again 11 s after the phase, when its backends have reported),
//     and how much of that CPU the polls that expired during the phase
//     (the wave of re-issues) cost at the steady state's rate;
//  5. stops the node with SIGTERM and reports how long it took.
//
// SOMBUS_POLLS_NODES=2 starts two nodes on the same store (which must be
// PostgreSQL: SOMBUS_POLLS_STORE) with one --public-url, so that each takes
// the other's tokens: the consumers are made through the first, the polls
// alternate between the nodes (half each), and so do the publishes. The
// table's RSS and CPU are then the nodes' sums; each node's own figures
// are logged ("node i: ...").
//
// SOMBUS_POLLS_DEBUG=1 logs each sample slower than 10 ms: when it was sent
// (seconds since the first poll was sent, and into the polls' wait: polls
// opened together expire together, wait seconds apart), its publish
// request's own time, and how many other polls were answered meanwhile
// (the expired polls' answers, when a wave of them is re-issued).
//
// SOMBUS_POLLS_AT_WAVE=1 starts the publish phase half a second before a
// wave of expiring polls (wait seconds after the last wave began, as the
// client saw its answers), so that every run measures the re-issue of the
// 10,000 polls during its publishes; without it the phase starts when the
// steady state ends, wherever that falls. The log gives the phase's start
// on both processes' clocks, those of GODEBUG=gctrace=1 (which the node
// inherits): a collection of either process in the wave is what delayed
// the slowest publishes (docs/benchmarks.md, the seventh round).
//
// SOMBUS_POLLS_TRACE=<file> serves the first node's runtime profiles
// (--pprof-listen) and writes an execution trace of the start of the
// publish phase (step 4) to the file, for `go tool trace`: its first
// SOMBUS_POLLS_TRACE_SECONDS (default 1; 4 with SOMBUS_POLLS_AT_WAVE,
// the lead and most of a wave); SOMBUS_POLLS_CLIENT_TRACE=<file> writes
// an execution trace of this process (the client side) over the same
// seconds. SOMBUS_POLLS_CPUPROFILE=<file> writes a CPU profile of the
// node's first SOMBUS_POLLS_PROFILE_SECONDS (default 5; raise
// SOMBUS_POLLS_SAMPLES to make the phase last that long) for
// `go tool pprof`.
//
// SOMBUS_POLLS_SETTLE=150s waits that long once the polls wait before
// measuring (past the runtime's forced GC, every 2 minutes); there is no
// quiet window then, only the steady state's slices without answers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/server/servertest"
)

// processStart is about when this process started (the clock of
// GODEBUG=gctrace=1).
var processStart = time.Now()

const pollBootstrapKey = "sbk_poll-load-bootstrap-key-0123456789abcdef"

// pollResult is one count's figures.
type pollResult struct {
	Polls, Queues     int
	SetupSeconds      float64 // creating the consumers and their tokens
	OpenSeconds       float64 // from the first poll sent to all waiting
	RSSMiB            float64
	HeapMiB, StackMiB float64
	Goroutines        float64
	QuietCPU          float64 // % of a core, every poll waiting
	QuietSeconds      float64
	QuietAnswers      int64   // poll answers during the quiet window (0 expected)
	SteadyCPU         float64 // % of a core over 20 s with one re-issue each
	SteadyAnswers     int64
	IdleSlices        int     // 1 s slices of the steady state without an answer
	IdleSliceCPU      float64 // % of a core in those slices
	RSSEndMiB         float64 // RSS at the end of the steady state
	P50, P99, Max     float64 // ms, publish sent → poll answered
	PublishP50        float64 // ms, the publish request alone
	Samples           int
	StopSeconds       float64
	Errors            int64
	FirstError        string
	PerNode           []pollNodeResult `json:",omitempty"` // with SOMBUS_POLLS_NODES > 1
	// With several nodes and a poll per queue: publish → answer when the
	// publish went through the poll's own node, and through another.
	SameP50, SameP99, CrossP50, CrossP99 float64 `json:",omitempty"`
	// The CPU of the publish phase a sample, in µs: the nodes', this
	// process's (the polls' client and the publishers), and, on a
	// PostgreSQL store, the database server's (its processes on this
	// machine, as PostgresPhases reads them).
	PhaseNodeCPU, PhaseClientCPU, PhaseDBCPU float64 `json:",omitempty"`
	// The store's transactions (commits and rollbacks of its database)
	// a sample over the publish phase and the 11 s after it, on
	// PostgreSQL (see below).
	PhaseDBXacts float64 `json:",omitempty"`
	// What a poll's answer costs in the steady state, where nearly every
	// answer is an expired poll's (answered empty, then re-issued by this
	// process), in µs an answer: the nodes' CPU above their quiet rate,
	// this process's, and the database's (on PostgreSQL; its quiet work
	// included). And the polls that expired during the publish phase (its
	// answers other than the samples'), with what they cost a sample at
	// those rates: the part of the phase's CPU that is the wave of
	// re-issues rather than the samples' own work.
	SteadyNodeCPUAnswer, SteadyClientCPUAnswer, SteadyDBCPUAnswer float64 `json:",omitempty"`
	PhaseExpired                                                  int64   `json:",omitempty"`
	PhaseExpiredNodeCPU, PhaseExpiredClientCPU, PhaseExpiredDBCPU float64 `json:",omitempty"`
}

// dbXacts is the number of transactions PostgreSQL has counted for the
// database of url (pg_stat_database, as of its last report), or -1.
func dbXacts(ctx context.Context, url string) int64 {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// pollNodeResult is one node's share when several run.
type pollNodeResult struct {
	Polls                 int
	RSSMiB                float64
	QuietCPU, SteadyCPU   float64
	HeapMiB, StackMiB     float64
	P50, P99, PublishedTo float64 // ms of the samples published through this node; how many
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: want a duration such as 150s", name, v)
	}
	return d
}

func TestLongPollLoad(t *testing.T) {
	spec := os.Getenv("SOMBUS_POLLS")
	if spec == "" {
		t.Skip("set SOMBUS_POLLS=1000,5000,10000 to run the long-poll load")
	}
	var counts []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("SOMBUS_POLLS=%q: want counts such as 1000,5000,10000", spec)
		}
		counts = append(counts, n)
	}
	perQueue := envInt(t, "SOMBUS_POLLS_PER_QUEUE", 1)
	// Each poll holds a descriptor here and one in the node (a child: it
	// inherits the limit).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	t.Logf("open file limit %d", lim.Cur)
	bin := os.Getenv("SOMBUS_POLLS_BIN")
	if bin == "" {
		b, remove, err := servertest.BuildSombus()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
		bin = b
	}
	var results []pollResult
	for _, n := range counts {
		t.Run(fmt.Sprintf("polls=%d", n), func(t *testing.T) {
			r := runPollLoad(t, bin, n, perQueue)
			results = append(results, r)
			j, _ := json.Marshal(r)
			t.Logf("result %s", j)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-7s %-7s %-8s %-8s %-8s %-8s %-10s %-11s %-11s %-9s %-9s %-8s %-7s\n",
		"polls", "queues", "setup_s", "RSS_MiB", "heap", "stacks", "goroutines", "quietCPU%", "steadyCPU%", "p50_ms", "p99_ms", "stop_s", "errors")
	fmt.Fprintf(&b, "(quietCPU: every poll waiting, none answered; when opening took longer than the wait, the mean of 1-s slices without answers, marked *)\n")
	for _, r := range results {
		quiet := fmt.Sprintf("%.1f", r.QuietCPU)
		if r.QuietSeconds == 0 && r.IdleSlices > 0 {
			quiet = fmt.Sprintf("%.1f*", r.IdleSliceCPU)
		}
		fmt.Fprintf(&b, "%-7d %-7d %-8.1f %-8.1f %-8.1f %-8.1f %-10.0f %-11s %-11.1f %-9.2f %-9.2f %-8.2f %-7d\n",
			r.Polls, r.Queues, r.SetupSeconds, r.RSSMiB, r.HeapMiB, r.StackMiB, r.Goroutines, quiet, r.SteadyCPU, r.P50, r.P99, r.StopSeconds, r.Errors)
	}
	t.Log(b.String())
}

// pollNode is the `sombus serve` process under load.
type pollNode struct {
	key     string // the bootstrap operator's API key
	started time.Time
	cmd     *exec.Cmd
	url     string
	exited  chan error
	http    *http.Client
}

func startPollNode(t *testing.T, bin string, extra ...string) *pollNode {
	dir := t.TempDir()
	if d := os.Getenv("SOMBUS_BENCH_DIR"); d != "" {
		dir, _ = os.MkdirTemp(d, "sombus-polls-")
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	store := "sqlite:" + filepath.Join(dir, "sombus.db")
	if s := os.Getenv("SOMBUS_POLLS_STORE"); s != "" {
		store = s
	}
	for try := 1; ; try++ {
		addr := servertest.FreeAddr(t)
		args := append([]string{"serve", "--listen", addr, "--store", store, "--bootstrap-key", pollBootstrapKey,
			"--max-conns-per-address", "0", "--log-format", "text", "--log-level", "warn"}, extra...)
		cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // our own binary
		lw := servertest.NewProcessLog(t, "node")
		cmd.Stdout, cmd.Stderr = lw, lw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		n := &pollNode{key: pollBootstrapKey, started: time.Now(), cmd: cmd, url: "http://" + addr, exited: exited,
			http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
		go func() { exited <- cmd.Wait(); lw.Stop() }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			select {
			case err := <-n.exited:
				if try == 3 {
					t.Fatalf("node exited before it was ready: %v", err)
				}
				n = nil
			default:
			}
			if n == nil {
				break
			}
			resp, err := n.http.Get(n.url + "/readyz")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == 200 {
					return n
				}
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatal("node not ready within 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// stop sends SIGTERM and returns how long the node took to exit.
func (n *pollNode) stop(t *testing.T) time.Duration {
	t0 := time.Now()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		t.Errorf("node did not stop within 60s of SIGTERM; killing it")
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	return time.Since(t0)
}

// call sends a JSON request and decodes a JSON answer of status want.
func (n *pollNode) call(ctx context.Context, method, path, bearer string, body, out any, want int) error {
	r, err := servertest.Call(ctx, n.http, n.url, method, path, bearer, body)
	if err != nil {
		return err
	}
	if r.Status != want {
		return fmt.Errorf("%s %s: status %d: %.300s", method, path, r.Status, r.Body)
	}
	if out != nil {
		return json.Unmarshal(r.Body, out)
	}
	return nil
}

func (n *pollNode) token(ctx context.Context, id, secret string) (string, error) {
	return servertest.FetchToken(ctx, n.http, n.url, id, secret)
}

// connection creates a connection with a secret and a token.
func (n *pollNode) connection(ctx context.Context, ws string, body map[string]any) (id, tok string, err error) {
	var c struct {
		ID string `json:"id"`
	}
	if err := n.call(ctx, "POST", "/v1/manage/workspaces/"+ws+"/connections", n.key, body, &c, 201); err != nil {
		return "", "", err
	}
	var s struct {
		ClientSecret string `json:"client_secret"`
	}
	if err := n.call(ctx, "POST", "/v1/manage/workspaces/"+ws+"/connections/"+c.ID+"/secret", n.key, nil, &s, 201); err != nil {
		return "", "", err
	}
	tok, err = n.token(ctx, c.ID, s.ClientSecret)
	return c.ID, tok, err
}

// pollQueue is one consumer's queue and the producer that reaches it.
type pollQueue struct {
	ws, consumer, consumerTok, producerTok, messageType string
}

const consumersPerWorkspace = 100

// makeQueues creates the workspaces, producers and consumers, 8 at a time.
func makeQueues(ctx context.Context, n *pollNode, count int) ([]pollQueue, error) {
	qs := make([]pollQueue, count)
	wsCount := (count + consumersPerWorkspace - 1) / consumersPerWorkspace
	type wsInfo struct{ id, producerTok string }
	wss := make([]wsInfo, wsCount)
	unlimited := "unlimited"
	if err := split(wsCount, 8, func(i int) error {
		var w struct {
			ID string `json:"id"`
		}
		if err := n.call(ctx, "POST", "/v1/manage/workspaces", n.key, map[string]any{"name": fmt.Sprintf("polls-%d", i)}, &w, 201); err != nil {
			return err
		}
		_, tok, err := n.connection(ctx, w.ID, map[string]any{"kind": "producer", "name": "producer", "quota_tier": unlimited})
		wss[i] = wsInfo{w.ID, tok}
		return err
	}); err != nil {
		return nil, err
	}
	err := split(count, 8, func(i int) error {
		w := wss[i/consumersPerWorkspace]
		mt := fmt.Sprintf("poll.q%d", i)
		id, tok, err := n.connection(ctx, w.id, map[string]any{"kind": "consumer", "name": fmt.Sprintf("consumer %d", i), "quota_tier": unlimited,
			"subscriptions": []map[string]any{{"topic": "som." + mt}}})
		qs[i] = pollQueue{ws: w.id, consumer: id, consumerTok: tok, producerTok: w.producerTok, messageType: mt}
		return err
	})
	return qs, err
}

// pollLoad is the client side: the polls and what they saw.
type pollLoad struct {
	answers atomic.Int64 // poll answers, empty or not
	// The last answer's time and when the latest wave of answers began
	// (the first answer after a second without any), in Unix ns.
	lastAnswer, waveStart atomic.Int64
	errors                atomic.Int64
	firstErr              atomic.Value
	published             sync.Map // message id → chan time.Time (when its poll answered)
	conns                 sync.WaitGroup
}

func (l *pollLoad) fail(err error) {
	l.errors.Add(1)
	l.firstErr.CompareAndSwap(nil, err.Error())
}

// poll runs one long poll on its own connection until ctx ends, re-issuing
// it when answered; it acknowledges what it receives.
func (l *pollLoad) poll(ctx context.Context, c net.Conn, host string, q pollQueue, wait int) {
	defer l.conns.Done()
	br := bufio.NewReaderSize(c, 2048)
	base := "/v1/tenants/" + q.ws + "/consumers/" + q.consumer
	get := []byte(fmt.Sprintf("GET %s/messages?max=10&wait=%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", base, wait, host, q.consumerTok))
	var out struct {
		Messages []struct {
			ReceiptHandle string `json:"receipt_handle"`
			Envelope      struct {
				MessageID string `json:"message_id"`
			} `json:"envelope"`
		} `json:"messages"`
	}
	for ctx.Err() == nil {
		if _, err := c.Write(get); err != nil {
			if ctx.Err() == nil {
				l.fail(fmt.Errorf("send poll: %w", err))
			}
			return
		}
		status, body, err := readAnswer(br)
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				l.fail(fmt.Errorf("read poll answer: %w", err))
			}
			return
		}
		l.answers.Add(1)
		if prev := l.lastAnswer.Swap(at.UnixNano()); at.UnixNano()-prev > int64(time.Second) {
			l.waveStart.Store(at.UnixNano())
		}
		if status != 200 {
			l.fail(fmt.Errorf("poll: status %d: %.200s", status, body))
			time.Sleep(time.Second)
			continue
		}
		out.Messages = out.Messages[:0]
		if err := json.Unmarshal(body, &out); err != nil {
			l.fail(fmt.Errorf("poll answer: %w", err))
			continue
		}
		if len(out.Messages) == 0 {
			continue
		}
		hs := make([]string, len(out.Messages))
		for i, m := range out.Messages {
			hs[i] = m.ReceiptHandle
			if ch, ok := l.published.LoadAndDelete(m.Envelope.MessageID); ok {
				ch.(chan time.Time) <- at
			}
		}
		ack, _ := json.Marshal(map[string]any{"receipt_handles": hs})
		req := fmt.Sprintf("POST %s/ack HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			base, host, q.consumerTok, len(ack), ack)
		if _, err := io.WriteString(c, req); err != nil {
			l.fail(fmt.Errorf("send ack: %w", err))
			return
		}
		status, body, err = readAnswer(br)
		if err != nil {
			l.fail(fmt.Errorf("read ack answer: %w", err))
			return
		}
		if status != 200 {
			l.fail(fmt.Errorf("ack: status %d: %.200s", status, body))
		}
	}
}

// readAnswer reads one HTTP/1.1 answer.
func readAnswer(br *bufio.Reader) (int, []byte, error) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, b, err
}

// procCPU is the process's user+system time in clock ticks (1/100 s).
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st, nil
}

// procRSS is VmRSS in MiB.
func procRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// nodeMetrics reads gauges of the node's /metrics by name.
func (n *pollNode) nodeMetrics(ctx context.Context, names ...string) map[string]float64 {
	out := map[string]float64{}
	r, err := servertest.Call(ctx, n.http, n.url, "GET", "/metrics", "", nil)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(r.Body), "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				out[name], _ = strconv.ParseFloat(strings.TrimSpace(rest), 64)
			}
		}
	}
	return out
}

func must(v int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return v
}

// cpuOver is each node's CPU in % of a core over d.
func cpuOver(pids []int, d time.Duration) []float64 {
	c0 := make([]int64, len(pids))
	for i, pid := range pids {
		c0[i], _ = procCPU(pid)
	}
	t0 := time.Now()
	time.Sleep(d)
	out := make([]float64, len(pids))
	for i, pid := range pids {
		c1, _ := procCPU(pid)
		out[i] = float64(c1-c0[i]) / 100 / time.Since(t0).Seconds() * 100
	}
	return out
}

// sumCPU is the nodes' CPU time in clock ticks, together.
func sumCPU(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		n += must(procCPU(pid))
	}
	return n
}

func sum(fs []float64) float64 {
	var n float64
	for _, f := range fs {
		n += f
	}
	return n
}

func runPollLoad(t *testing.T, bin string, polls, perQueue int) pollResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := envInt(t, "SOMBUS_POLLS_WAIT", 20)
	samples := envInt(t, "SOMBUS_POLLS_SAMPLES", 300)
	count := envInt(t, "SOMBUS_POLLS_NODES", 1)
	var extra []string
	if count > 1 {
		if !strings.HasPrefix(os.Getenv("SOMBUS_POLLS_STORE"), "postgres") {
			t.Fatal("SOMBUS_POLLS_NODES > 1 needs SOMBUS_POLLS_STORE, a PostgreSQL URL")
		}
		extra = []string{"--public-url", "http://sombus.polls.test"}
	}
	nodes := make([]*pollNode, count)
	pids := make([]int, count)
	traceFile, pprofAddr := os.Getenv("SOMBUS_POLLS_TRACE"), ""
	atWave := os.Getenv("SOMBUS_POLLS_AT_WAVE") != ""
	traceSeconds := 1
	if atWave {
		traceSeconds = 4 // the lead and the wave
	}
	traceSeconds = envInt(t, "SOMBUS_POLLS_TRACE_SECONDS", traceSeconds)
	profileURL := fmt.Sprintf("/debug/pprof/trace?seconds=%d", traceSeconds)
	if f := os.Getenv("SOMBUS_POLLS_CPUPROFILE"); f != "" {
		traceFile = f
		profileURL = fmt.Sprintf("/debug/pprof/profile?seconds=%d", envInt(t, "SOMBUS_POLLS_PROFILE_SECONDS", 5))
	}
	for i := range nodes {
		args := extra
		if i == 0 && traceFile != "" {
			pprofAddr = servertest.FreeAddr(t)
			args = append(slices.Clip(extra), "--pprof-listen", pprofAddr)
		}
		nodes[i] = startPollNode(t, bin, args...)
		pids[i] = nodes[i].cmd.Process.Pid
	}
	node := nodes[0]
	stopAll := func() time.Duration {
		var d time.Duration
		for _, n := range nodes {
			d = max(d, n.stop(t))
		}
		return d
	}
	res := pollResult{Polls: polls, Queues: (polls + perQueue - 1) / perQueue}
	if count > 1 {
		res.PerNode = make([]pollNodeResult, count)
	}

	t0 := time.Now()
	qs, err := makeQueues(ctx, node, res.Queues)
	if err != nil {
		stopAll()
		t.Fatalf("create consumers: %v", err)
	}
	res.SetupSeconds = time.Since(t0).Seconds()
	t.Logf("created %d consumers in %.1fs", len(qs), res.SetupSeconds)

	l := &pollLoad{}
	var conns []net.Conn
	defer func() {
		cancel()
		for _, c := range conns {
			_ = c.Close()
		}
		l.conns.Wait()
	}()
	var d net.Dialer
	firstSent := time.Now()
	for i := range polls {
		host := strings.TrimPrefix(nodes[i%count].url, "http://")
		c, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			stopAll()
			t.Fatalf("dial poll %d: %v", i, err)
		}
		conns = append(conns, c)
		l.conns.Add(1)
		go l.poll(ctx, c, host, qs[i/perQueue], wait)
	}
	const gauge = "sombus_long_polls_waiting"
	var waiting float64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		waiting = 0
		for i, n := range nodes {
			w := n.nodeMetrics(ctx, gauge)[gauge]
			waiting += w
			if res.PerNode != nil {
				res.PerNode[i].Polls = int(w)
			}
		}
		if waiting >= float64(polls) {
			break
		}
	}
	res.OpenSeconds = time.Since(firstSent).Seconds()
	t.Logf("%0.f of %d polls waiting %.1fs after the first was sent (errors %d)", waiting, polls, res.OpenSeconds, l.errors.Load())

	if settle := envDuration(t, "SOMBUS_POLLS_SETTLE"); settle > 0 {
		// Let the node run its periodic work (a forced GC every 2 min
		// shrinks stacks and frees what the opening left behind).
		m := node.nodeMetrics(ctx, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes")
		t.Logf("settling for %s (now RSS %.1f MiB, heap %.1f MiB, stacks %.1f MiB; the first node)", settle, procRSS(pids[0]),
			m["go_memstats_heap_inuse_bytes"]/(1<<20), m["go_memstats_stack_inuse_bytes"]/(1<<20))
		time.Sleep(settle)
		firstSent = time.Now().Add(-time.Duration(wait) * time.Second) // no quiet window after a settle
	}
	// The quiet window: every poll waits, none is due to expire.
	time.Sleep(time.Second)
	if quiet := time.Until(firstSent.Add(time.Duration(wait)*time.Second - time.Second)); quiet >= 3*time.Second {
		a0 := l.answers.Load()
		res.QuietSeconds = quiet.Seconds()
		q := cpuOver(pids, quiet)
		res.QuietCPU = sum(q)
		for i := range res.PerNode {
			res.PerNode[i].QuietCPU = q[i]
		}
		res.QuietAnswers = l.answers.Load() - a0
	} else {
		t.Logf("no quiet window: opening the polls took longer than wait=%d (or they settled first)", wait)
	}
	for i, n := range nodes {
		rss := procRSS(pids[i])
		m := n.nodeMetrics(ctx, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines")
		res.RSSMiB += rss
		res.HeapMiB += m["go_memstats_heap_inuse_bytes"] / (1 << 20)
		res.StackMiB += m["go_memstats_stack_inuse_bytes"] / (1 << 20)
		res.Goroutines += m["go_goroutines"]
		if res.PerNode != nil {
			res.PerNode[i].RSSMiB = rss
			res.PerNode[i].HeapMiB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
			res.PerNode[i].StackMiB = m["go_memstats_stack_inuse_bytes"] / (1 << 20)
		}
	}
	// The steady state, in 1 s slices: the slices in which no poll was
	// answered show the cost of waiting alone when the quiet window could
	// not be had (opening the polls took longer than their wait).
	c0s := make([]int64, count)
	for i, pid := range pids {
		c0s[i] = must(procCPU(pid))
	}
	storeURL := os.Getenv("SOMBUS_POLLS_STORE")
	onPG := strings.HasPrefix(storeURL, "postgres")
	a0, c0, s0 := l.answers.Load(), sumCPU(pids), time.Now()
	self0, db0 := processCPU(), pgServerCPU()
	var idleTicks int64
	for range 20 {
		a, c := l.answers.Load(), sumCPU(pids)
		time.Sleep(time.Second)
		if l.answers.Load() == a {
			idleTicks += sumCPU(pids) - c
			res.IdleSlices++
		}
	}
	res.SteadyAnswers = l.answers.Load() - a0
	steadySeconds := time.Since(s0).Seconds()
	res.SteadyCPU = float64(sumCPU(pids)-c0) / steadySeconds
	for i := range res.PerNode {
		res.PerNode[i].SteadyCPU = float64(must(procCPU(pids[i]))-c0s[i]) / steadySeconds
	}
	if res.IdleSlices > 0 {
		res.IdleSliceCPU = float64(idleTicks) / float64(res.IdleSlices)
	}
	if res.SteadyAnswers > 0 {
		// SteadyCPU, QuietCPU and IdleSliceCPU are ticks (10 ms) a
		// second: % of a core. Without a quiet window, the slices without
		// answers give the quiet rate.
		quiet := res.QuietCPU
		if res.QuietSeconds == 0 {
			quiet = res.IdleSliceCPU
		}
		answers := float64(res.SteadyAnswers)
		res.SteadyNodeCPUAnswer = max(0, res.SteadyCPU-quiet) * steadySeconds * 1e4 / answers
		res.SteadyClientCPUAnswer = float64(processCPU()-self0) / 1e3 / answers
		if onPG {
			res.SteadyDBCPUAnswer = float64((pgServerCPU() - db0).Microseconds()) / answers
		}
	}
	res.RSSEndMiB = 0
	for i, pid := range pids {
		rss := procRSS(pid)
		res.RSSEndMiB += rss
		if res.PerNode != nil {
			res.PerNode[i].RSSMiB = max(res.PerNode[i].RSSMiB, rss)
		}
	}
	res.RSSMiB = max(res.RSSMiB, res.RSSEndMiB)
	t.Logf("RSS %.1f MiB (%.1f MiB after the steady state), heap %.1f MiB, stacks %.1f MiB, %0.f goroutines; CPU quiet %.1f%% over %.1fs (%d answers), steady %.1f%% (%d answers; %d 1-s slices without answers at %.1f%%)",
		res.RSSMiB, res.RSSEndMiB, res.HeapMiB, res.StackMiB, res.Goroutines, res.QuietCPU, res.QuietSeconds, res.QuietAnswers, res.SteadyCPU, res.SteadyAnswers, res.IdleSlices, res.IdleSliceCPU)
	t.Logf("steady state: CPU an answer %.0f µs in the nodes (above their quiet rate), %.0f µs in this process, %.0f µs in the database (0: not PostgreSQL)",
		res.SteadyNodeCPUAnswer, res.SteadyClientCPUAnswer, res.SteadyDBCPUAnswer)

	// Publish → answer.
	var mu sync.Mutex
	var lat, pub []time.Duration
	perLat := make([][]time.Duration, count) // by the node published through
	var same, cross []time.Duration
	var next atomic.Int64
	perm := rand.Perm(len(qs))
	phase := time.Now()
	if atWave {
		// Start the publishes waveLead before the next wave of expiring
		// polls: a wave comes wait seconds after the last one began.
		every := time.Duration(wait) * time.Second
		last := firstSent
		if ns := l.waveStart.Load(); ns != 0 {
			last = time.Unix(0, ns)
		}
		at := last.Add(every - waveLead)
		for time.Until(at) < 100*time.Millisecond {
			at = at.Add(every)
		}
		t.Logf("publishing from %.3fs after the first poll, %s before the next wave (the last began at %.3fs)",
			at.Sub(firstSent).Seconds(), waveLead, last.Sub(firstSent).Seconds())
		time.Sleep(time.Until(at))
		phase = at
	}
	// The client collects now, before the publishes: its own collection
	// (10,000 goroutines' stacks and buffers) otherwise comes after every
	// few waves' answers, and one that falls in the publish phase takes the
	// cores from the node for a few hundred ms (its idle mark workers run
	// wherever the client has nothing else to do).
	runtime.GC()
	// The times GODEBUG=gctrace=1 gives the collections of both processes.
	t.Logf("publish phase at %.3fs of this process, %.3fs of the first node", phase.Sub(processStart).Seconds(), phase.Sub(node.started).Seconds())
	if f := os.Getenv("SOMBUS_POLLS_CLIENT_TRACE"); f != "" {
		stop, err := traceClient(f, time.Duration(traceSeconds)*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	traced := make(chan struct{})
	if pprofAddr != "" {
		go func() {
			defer close(traced)
			if err := fetchTrace(ctx, "http://"+pprofAddr+profileURL, traceFile); err != nil {
				t.Errorf("%s: %v", profileURL, err)
				return
			}
			t.Logf("%s over the publishes written to %s", profileURL, traceFile)
		}()
	} else {
		close(traced)
	}
	var phaseXacts int64
	if onPG {
		phaseXacts = dbXacts(ctx, storeURL)
	}
	phaseNodes, phaseSelf, phaseDB := sumCPU(pids), processCPU(), pgServerCPU()
	phaseAnswers := l.answers.Load()
	err = split(4, 4, func(int) error {
		for {
			k := int(next.Add(1)) - 1
			if k >= samples {
				return nil
			}
			j := perm[k%len(perm)]
			q := qs[j]
			id := fmt.Sprintf("lat-%d-%d", polls, k)
			ch := make(chan time.Time, 1)
			l.published.Store(id, ch)
			env := servertest.Envelope(id, "story-"+id, map[string]any{"n": k})
			env["message_type"] = q.messageType
			t0 := time.Now()
			a0 := l.answers.Load()
			if err := nodes[k%count].call(ctx, "POST", "/v1/tenants/"+q.ws+"/messages", q.producerTok, env, nil, 202); err != nil {
				return err
			}
			tp := time.Since(t0)
			select {
			case at := <-ch:
				mu.Lock()
				lat = append(lat, at.Sub(t0))
				if os.Getenv("SOMBUS_POLLS_DEBUG") != "" && at.Sub(t0) > 10*time.Millisecond {
					t.Logf("slow sample %d: at %.3fs after the first poll (%.3f into its wait), answer %.2f ms, publish %.2f ms, %d other answers meanwhile, now %s",
						k, t0.Sub(firstSent).Seconds(), float64(t0.Sub(firstSent)%(time.Duration(wait)*time.Second))/1e9, float64(at.Sub(t0).Microseconds())/1000, float64(tp.Microseconds())/1000, l.answers.Load()-a0-1, t0.UTC().Format("15:04:05.000"))
				}
				pub = append(pub, tp)
				perLat[k%count] = append(perLat[k%count], at.Sub(t0))
				if j%count == k%count { // poll j is on node j % count (one poll a queue)
					same = append(same, at.Sub(t0))
				} else {
					cross = append(cross, at.Sub(t0))
				}
				mu.Unlock()
			case <-time.After(30 * time.Second):
				return fmt.Errorf("message %s not received within 30s", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err != nil {
		t.Errorf("publish → answer: %v", err)
	}
	if n := float64(len(lat)); n > 0 {
		tick := float64(10 * time.Millisecond / time.Microsecond)
		res.PhaseNodeCPU = float64(sumCPU(pids)-phaseNodes) * tick / n
		// Every answer but the samples' own is an expired poll's.
		res.PhaseExpired = max(0, l.answers.Load()-phaseAnswers-int64(len(lat)))
		expired := float64(res.PhaseExpired) / n
		res.PhaseExpiredNodeCPU = res.SteadyNodeCPUAnswer * expired
		res.PhaseExpiredClientCPU = res.SteadyClientCPUAnswer * expired
		res.PhaseExpiredDBCPU = res.SteadyDBCPUAnswer * expired
		res.PhaseClientCPU = float64(processCPU()-phaseSelf) / 1e3 / n
		if onPG {
			res.PhaseDBCPU = float64((pgServerCPU() - phaseDB).Microseconds()) / n
			// A backend reports its statistics to pg_stat_database when
			// it goes idle, but not within a second of its last report
			// (PostgreSQL 15's PGSTAT_MIN_INTERVAL); what it holds back
			// then comes with its idle timer, up to 10 s later
			// (PGSTAT_IDLE_INTERVAL). Wait that out: the count then covers
			// the phase and the 11 s after it (the polls waiting, their
			// next wave 20 s after this one), and its start may take in
			// what the quiet seconds before the phase held back.
			time.Sleep(11 * time.Second)
			if x := dbXacts(ctx, storeURL); x >= 0 && phaseXacts >= 0 {
				res.PhaseDBXacts = float64(x-phaseXacts) / n
			}
		}
		t.Logf("publish phase: CPU a sample %.0f µs in the nodes, %.0f µs in this process, %.0f µs in the database (0: not PostgreSQL), %.2f transactions",
			res.PhaseNodeCPU, res.PhaseClientCPU, res.PhaseDBCPU, res.PhaseDBXacts)
		t.Logf("publish phase: %d polls expired and were re-issued in it; at the steady state's cost an answer, %.0f / %.0f / %.0f µs a sample of the above",
			res.PhaseExpired, res.PhaseExpiredNodeCPU, res.PhaseExpiredClientCPU, res.PhaseExpiredDBCPU)
	}
	<-traced // the node serves the trace until it is written
	ms := func(ds []time.Duration, q float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	res.Samples = len(lat)
	res.P50, res.P99, res.Max = ms(lat, 0.50), ms(lat, 0.99), ms(lat, 1)
	res.PublishP50 = ms(pub, 0.5)
	for i := range res.PerNode {
		res.PerNode[i].P50, res.PerNode[i].P99 = ms(perLat[i], 0.5), ms(perLat[i], 0.99)
		res.PerNode[i].PublishedTo = float64(len(perLat[i]))
	}
	if count > 1 && perQueue == 1 {
		res.SameP50, res.SameP99, res.CrossP50, res.CrossP99 = ms(same, 0.5), ms(same, 0.99), ms(cross, 0.5), ms(cross, 0.99)
		t.Logf("publish through the poll's node (%d): answer p50 %.2f ms, p99 %.2f ms; through the other (%d): p50 %.2f ms, p99 %.2f ms",
			len(same), res.SameP50, res.SameP99, len(cross), res.CrossP50, res.CrossP99)
	}
	for i, r := range res.PerNode {
		t.Logf("node %d: %d polls waiting, RSS %.1f MiB (heap %.1f, stacks %.1f), CPU quiet %.1f%%, steady %.1f%%; %0.f publishes through it: answer p50 %.2f ms, p99 %.2f ms",
			i, r.Polls, r.RSSMiB, r.HeapMiB, r.StackMiB, r.QuietCPU, r.SteadyCPU, r.PublishedTo, r.P50, r.P99)
	}
	t.Logf("publish → answer over %d samples: p50 %.2f ms, p99 %.2f ms, max %.2f ms (publish request p50 %.2f ms)", res.Samples, res.P50, res.P99, res.Max, res.PublishP50)

	res.Errors = l.errors.Load()
	if e, ok := l.firstErr.Load().(string); ok {
		res.FirstError = e
	}
	cancel() // what the polls see from here on is the stop
	res.StopSeconds = stopAll().Seconds()
	t.Logf("node stopped %.2fs after SIGTERM; client errors %d (%s)", res.StopSeconds, res.Errors, res.FirstError)
	return res
}

// waveLead is how long before a wave of expiring polls the publishes
// start with SOMBUS_POLLS_AT_WAVE.
const waveLead = 500 * time.Millisecond

// traceClient writes an execution trace of this process (the load's
// client side) for d to file; stop ends it early.
func traceClient(file string, d time.Duration) (stop func(), err error) {
	f, err := os.Create(file) //nolint:gosec // a path the person running the test chose
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			trace.Stop()
			_ = f.Close()
		})
	}
	time.AfterFunc(d, stop)
	return stop, nil
}

// fetchTrace writes what GET url answers (a trace or a profile) to file.
func fetchTrace(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file) //nolint:gosec // a path the person running the test chose
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
