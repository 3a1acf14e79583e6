package httpapi_test

// Benchmarks of the request path: each route's whole handler (the node's
// edge, the portal's wrapper, the API, the bus, token checks, the store) is
// called in process, without the network, on a node whose SQLite file is
// in memory (/dev/shm), so that what the HTTP, JSON and bus layers cost per
// message shows beside the store's share. Run with -benchmem:
//
//	go test -run '^$' -bench . -benchmem ./internal/httpapi/
//
// cpu-ns/op is the process's CPU time per op, garbage collection
// included, and gc-cpu-ns/op the collector's share of it as the runtime
// estimates it (from wall time while it collects: meaningful on a quiet
// machine only, where it stays below cpu-ns/op). B/op and allocs/op count everything a request allocates on the server
// side but net/http's own reading of the request from a connection; the
// benchmark's own work per request (a shallow copy of a prepared request
// and a reader over a prepared body) is 2 small allocations. Messages have
// a 1 KiB payload, like internal/bench's.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/server/servertest"
)

// benchPayload is the 1 KiB payload of every benchmark message.
var benchPayload = strings.Repeat("x", 1024)

// benchWriter is a reusable http.ResponseWriter that keeps the answer.
type benchWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *benchWriter) Header() http.Header { return w.header }
func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// Flush lets the receive route flush its answer, as a connection's writer does.
func (w *benchWriter) Flush() {}

// SetReadDeadline lets the node's edge bound the body's arrival, as a
// connection's writer does.
func (w *benchWriter) SetReadDeadline(time.Time) error { return nil }

func (w *benchWriter) reset() {
	clear(w.header)
	w.status = 0
	w.body.Reset()
}

// benchBody is a request body over prepared bytes.
type benchBody struct{ bytes.Reader }

func (*benchBody) Close() error { return nil }

// benchNode is a node, its handler and a producer/consumer pair on the
// unlimited tier.
type benchNode struct {
	h http.Handler
	p *servertest.Pair
	w *benchWriter
}

func newBenchNode(tb testing.TB) *benchNode {
	tb.Helper()
	n := servertest.Start(tb, servertest.Options{Store: "sqlite:" + servertest.TempDir(tb) + "/sombus.db"})
	u := map[string]any{"quota_tier": "unlimited"}
	return &benchNode{h: n.Server.Handler(), p: n.NewPairWith(u, u), w: &benchWriter{header: http.Header{}}}
}

// template is a request to path with bearer tok, without its body.
func template(method, path, tok string) *http.Request {
	r, err := http.NewRequestWithContext(context.Background(), method, path, nil)
	if err != nil {
		panic(err)
	}
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer "+tok)
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// serve serves a copy of tmpl with body and fails unless the answer has
// status want; the answer stays in n.w until the next call.
func (n *benchNode) serve(tb testing.TB, tmpl *http.Request, body []byte, want int) {
	r := *tmpl
	if body != nil {
		rd := &benchBody{}
		rd.Reset(body)
		r.Body, r.ContentLength = rd, int64(len(body))
	} else {
		r.Body = http.NoBody
	}
	n.w.reset()
	n.h.ServeHTTP(n.w, &r)
	if n.w.status != want {
		tb.Fatalf("%s %s: %d %s", tmpl.Method, tmpl.URL, n.w.status, n.w.body.Bytes())
	}
}

// benchEnvelope appends an envelope of message id and story to dst.
func benchEnvelope(dst []byte, id int, story string) []byte {
	return fmt.Appendf(dst, `{"som_version":"1.0.0","message_id":"m-%d","message_type":"story.context","correlation_id":%q,"payload":{"data":%q}}`,
		id, story, benchPayload)
}

// batches returns count envelopes in batch bodies of up to 100; story(i)
// names the story of the i-th.
func batches(first, count int, story func(i int) string) [][]byte {
	var out [][]byte
	for i := 0; i < count; i += 100 {
		body := []byte(`{"messages":[`)
		for j := i; j < min(i+100, count); j++ {
			if j > i {
				body = append(body, ',')
			}
			body = benchEnvelope(body, first+j, story(j))
		}
		out = append(out, append(body, "]}"...))
	}
	return out
}

// fill publishes count messages (outside the timer).
func (n *benchNode) fill(tb testing.TB, count int, story func(i int) string) {
	tb.Helper()
	tmpl := template("POST", "/v1/tenants/"+n.p.WS+"/messages/batch", n.p.ProducerTok)
	for _, body := range batches(1_000_000_000, count, story) {
		n.serve(tb, tmpl, body, 200)
	}
}

// handles appends the receipt handles of the receive answer in n.w to hs.
func (n *benchNode) handles(hs [][]byte) [][]byte {
	const key = `"receipt_handle":"`
	rest := n.w.body.Bytes()
	for {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			return hs
		}
		rest = rest[i+len(key):]
		j := bytes.IndexByte(rest, '"')
		hs = append(hs, rest[:j])
		rest = rest[j:]
	}
}

// ackBody appends {"receipt_handles":[…]} of hs to dst.
func ackBody(dst []byte, hs [][]byte) []byte {
	dst = append(dst, `{"receipt_handles":[`...)
	for i, h := range hs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(append(append(dst, '"'), h...), '"')
	}
	return append(dst, "]}"...)
}

// cpuMeter reports the process's CPU time per op (cpu-ns/op: the
// garbage collector's included, the waits not), which depends less on
// what else the machine runs than ns/op does.
type cpuMeter struct {
	b       *testing.B
	start   int64
	gcStart float64
}

// gcCPU is the CPU time the garbage collector has used, in seconds, as the
// runtime estimates it (from wall time: overstated when the machine is busy).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// startCPU resets the benchmark's timer and starts measuring CPU time.
func startCPU(b *testing.B) cpuMeter {
	runtime.GC() // the garbage of the set-up is not the benchmark's
	b.ResetTimer()
	return cpuMeter{b: b, start: processCPU(), gcStart: gcCPU()}
}

// stop reports cpu-ns/op and gc-cpu-ns/op, the garbage collector's share.
func (m cpuMeter) stop() {
	m.b.StopTimer()
	if end := processCPU(); end > 0 {
		m.b.ReportMetric(float64(end-m.start)/float64(m.b.N), "cpu-ns/op")
	}
	m.b.ReportMetric((gcCPU()-m.gcStart)*1e9/float64(m.b.N), "gc-cpu-ns/op")
}

func oneStoryEach(i int) string    { return fmt.Sprintf("story-%d", i) }
func thousandStories(i int) string { return fmt.Sprintf("story-%d", i%1000) }

// BenchmarkPublishSingle is POST …/messages: one envelope a request.
func BenchmarkPublishSingle(b *testing.B) {
	n := newBenchNode(b)
	tmpl := template("POST", n.p.PublishPath(), n.p.ProducerTok)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = benchEnvelope(nil, i, thousandStories(i))
	}
	cpu := startCPU(b)
	for i := range b.N {
		n.serve(b, tmpl, bodies[i], 202)
	}
	cpu.stop()
}

// BenchmarkPublishBatch is POST …/messages/batch with 100 envelopes (an op
// is a request: divide by 100 for a message).
func BenchmarkPublishBatch(b *testing.B) {
	n := newBenchNode(b)
	tmpl := template("POST", "/v1/tenants/"+n.p.WS+"/messages/batch", n.p.ProducerTok)
	bodies := batches(0, 100*b.N, thousandStories)
	cpu := startCPU(b)
	for i := range b.N {
		n.serve(b, tmpl, bodies[i], 200)
	}
	cpu.stop()
}

// BenchmarkReceive is GET …/messages?max=10&wait=0 answering 10 messages,
// none acknowledged (an op is a request: divide by 10 for a message).
func BenchmarkReceive(b *testing.B) {
	n := newBenchNode(b)
	n.fill(b, 10*b.N, oneStoryEach)
	tmpl := template("GET", n.p.MessagesPath()+"?max=10&wait=0&visibility=43200", n.p.ConsumTok)
	cpu := startCPU(b)
	for range b.N {
		n.serve(b, tmpl, nil, 200)
		if len(n.handles(nil)) != 10 {
			b.Fatalf("receive: %s", n.w.body.Bytes())
		}
	}
	cpu.stop()
}

// BenchmarkAck is POST …/ack with 10 receipt handles (an op is a request:
// divide by 10 for a message).
func BenchmarkAck(b *testing.B) {
	n := newBenchNode(b)
	n.fill(b, 10*b.N, oneStoryEach)
	recv := template("GET", n.p.MessagesPath()+"?max=10&wait=0&visibility=43200", n.p.ConsumTok)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		n.serve(b, recv, nil, 200)
		bodies[i] = ackBody(nil, n.handles(nil))
	}
	tmpl := template("POST", n.p.SettlePath("ack"), n.p.ConsumTok)
	cpu := startCPU(b)
	for i := range b.N {
		n.serve(b, tmpl, bodies[i], 200)
		if !bytes.HasPrefix(n.w.body.Bytes(), []byte(`{"acked":["`)) || !bytes.Contains(n.w.body.Bytes(), []byte(`"failed":[]`)) {
			b.Fatalf("ack: %s", n.w.body.Bytes())
		}
	}
	cpu.stop()
}

// BenchmarkDrain is the drain of internal/bench on one consumer: receive up
// to 10 from 1,000 stories and acknowledge them (an op is 10 messages).
func BenchmarkDrain(b *testing.B) {
	n := newBenchNode(b)
	n.fill(b, 10*b.N, thousandStories)
	d := n.drainer()
	cpu := startCPU(b)
	for range b.N {
		d.ten(b)
	}
	cpu.stop()
}

// drainer receives up to 10 messages of its node's consumer and
// acknowledges them, as the drain's receivers do, reusing its buffers.
type drainer struct {
	n         *benchNode
	recv, ack *http.Request
	body      []byte
	hs        [][]byte
}

func (n *benchNode) drainer() *drainer {
	return &drainer{n: n, recv: template("GET", n.p.MessagesPath()+"?max=10&wait=0", n.p.ConsumTok),
		ack: template("POST", n.p.SettlePath("ack"), n.p.ConsumTok)}
}

// ten receives 10 messages and acknowledges them; fewer than 10 fails tb.
func (d *drainer) ten(tb testing.TB) {
	d.n.serve(tb, d.recv, nil, 200)
	d.hs = d.n.handles(d.hs[:0])
	if len(d.hs) != 10 {
		tb.Fatalf("receive: %s", d.n.w.body.Bytes())
	}
	d.body = ackBody(d.body[:0], d.hs)
	d.n.serve(tb, d.ack, d.body, 200)
}

var _ io.ReadCloser = (*benchBody)(nil)
