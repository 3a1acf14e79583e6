// Package bench measures the message path through HTTP: an in-process node
// on a temporary SQLite file (synchronous=FULL) with the system clock,
// 1 KiB payloads over 1,000 stories, connections on the unlimited tier.
//
//	go test -run '^$' -bench . ./internal/bench/
//
// The publish and drain benchmarks also run their workload, with the same
// message count and client, against the floor (package floor: a bare
// net/http server answering the same requests with answers of the same
// shape, with the messages in memory) and report its rate as floor-msgs/s
// and theirs as a share of it, ratio-to-floor. BenchmarkFloor* measure the
// floor alone, for its allocations next to sombus's (-benchmem).
//
// Environment:
//
//   - SOMBUS_BENCH_DIR: where the SQLite files go (default b.TempDir(), on
//     disk; /dev/shm takes the fsync's cost away);
//   - SOMBUS_BENCH_SQLITE: store parameters appended to the store's URL
//     (synchronous=normal, …);
//   - SOMBUS_BENCH_CPUPROFILE=<file>: a CPU profile (go tool pprof) of the
//     timed part of BenchmarkDrain and BenchmarkPublishSingle only: not the
//     queue's pre-fill nor the floor's run, which -cpuprofile would include;
//   - SOMBUS_BENCH_TRACE=<file>: an execution trace (go tool trace) of the
//     same part;
//   - SOMBUS_BENCH_STAGES (any value but empty): where the embedded
//     store's write operations of the same part spent their time, as the
//     averages of each stretch of the writer's pipeline in µs an operation
//     (sqlite.Stages): queued-us (handed to the writer, until it runs the
//     operation), open-us (until its group's COMMIT), commit-us,
//     handover-us (until the syncer begins the fsync), fsync-us, answer-us
//     (until the caller has its answer), and stage-ops, the operations
//     recorded: those answered with their own success after an fsync
//     (none under SOMBUS_BENCH_SQLITE=synchronous=normal, which then
//     reports nothing).
//
// Each run of a benchmark writes the file again, so it holds the last run
// (the one with the final b.N; -benchtime Nx makes it the only one): select
// one benchmark at a time, e.g.
//
//	SOMBUS_BENCH_CPUPROFILE=/tmp/drain.prof go test -run '^$' -bench '^BenchmarkDrain$' -benchtime 20000x ./internal/bench/
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bench/floor"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/sqlite"
)

const (
	stories     = 1000
	workers     = 8
	payloadSize = 1024
)

var payload = strings.Repeat("x", payloadSize)

// setup starts a node and a producer/consumer pair on the unlimited tier,
// with an HTTP client that keeps a connection per worker.
func setup(b *testing.B) (*servertest.Node, *servertest.Pair) {
	b.Helper()
	// b.TempDir, not servertest's default (/dev/shm, where fsync costs
	// nothing): the figures are to include the disk's commit latency.
	dir := b.TempDir()
	if d := os.Getenv("SOMBUS_BENCH_DIR"); d != "" {
		dir, _ = os.MkdirTemp(d, "sombus-bench-")
		b.Cleanup(func() { _ = os.RemoveAll(dir) }) // runs after the node's Close
	}
	store := "sqlite:" + filepath.Join(dir, "sombus.db")
	if q := os.Getenv("SOMBUS_BENCH_SQLITE"); q != "" {
		store += "?" + q
	}
	n := servertest.Start(b, servertest.Options{Store: store, Clock: bus.SystemClock{}})
	// benchTransport closes its idle connections before the node's Close
	// (cleanups run last first): the transport may have dialled a
	// connection it never used, which the server counts as new, not idle,
	// for 5 s, and its Shutdown (5 s grace) would wait for it ("close
	// node: context deadline exceeded").
	n.HTTP = benchTransport(b)
	u := map[string]any{"quota_tier": "unlimited"}
	return n, n.NewPairWith(u, u)
}

var seq atomic.Int64

// envelope is a 1 KiB-payload envelope of story i % 1000.
func envelope(i int64) map[string]any {
	return servertest.Envelope(fmt.Sprintf("m-%d", seq.Add(1)), fmt.Sprintf("story-%d", i%stories), map[string]any{"data": payload})
}

// fill publishes count messages in batches of 100 (outside the timer).
func fill(b *testing.B, n *servertest.Node, p *servertest.Pair, count int) {
	b.Helper()
	for i := 0; i < count; i += 100 {
		var envs []any
		for j := i; j < min(i+100, count); j++ {
			envs = append(envs, envelope(int64(j)))
		}
		n.PublishBatch(p, envs).Must(b, 200)
	}
}

// split runs work(i) for i in [0, total) over k goroutines.
func split(total, k int, work func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if err := work(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// profileTimed starts the CPU profile, the execution trace and the record
// of the writer's stages that SOMBUS_BENCH_CPUPROFILE, SOMBUS_BENCH_TRACE
// and SOMBUS_BENCH_STAGES ask for (see the package comment), if any; the
// result stops them, closes their files and reports the stages.
func profileTimed(b *testing.B) (stop func()) {
	b.Helper()
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	start := func(env string, begin func(*os.File) error, end func()) {
		path := os.Getenv(env)
		if path == "" {
			return
		}
		f, err := os.Create(path)
		if err != nil {
			stop()
			b.Fatalf("%s: %v", env, err)
		}
		if err := begin(f); err != nil {
			_ = f.Close()
			stop()
			b.Fatalf("%s: %v", env, err)
		}
		stops = append(stops, func() {
			end()
			if err := f.Close(); err != nil {
				b.Errorf("%s: %v", env, err)
			}
		})
	}
	start("SOMBUS_BENCH_CPUPROFILE", func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile)
	start("SOMBUS_BENCH_TRACE", func(f *os.File) error { return trace.Start(f) }, trace.Stop)
	if os.Getenv("SOMBUS_BENCH_STAGES") != "" {
		end := sqlite.RecordStages()
		stops = append(stops, func() {
			st := end()
			if st.Ops == 0 {
				return // no write answered after an fsync: another store, or synchronous=normal
			}
			b.ReportMetric(float64(st.Ops), "stage-ops")
			for _, m := range []struct {
				d    time.Duration
				unit string
			}{{st.Queued, "queued-us"}, {st.Open, "open-us"}, {st.Commit, "commit-us"},
				{st.Handover, "handover-us"}, {st.Sync, "fsync-us"}, {st.Answer, "answer-us"}} {
				b.ReportMetric(float64(m.d)/float64(time.Microsecond), m.unit)
			}
		})
	}
	return stop
}

func rate(b *testing.B, msgs int) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

// target is where a workload sends its requests: a sombus node, or the
// floor (package floor) with the same paths and tokens, which it ignores.
type target struct {
	http *http.Client
	url  string
	p    *servertest.Pair
}

func (t target) try(ctx context.Context, method, path, bearer string, body any) (*servertest.Response, error) {
	return servertest.Call(ctx, t.http, t.url, method, path, bearer, body)
}

func nodeTarget(n *servertest.Node, p *servertest.Pair) target {
	return target{http: n.HTTP, url: n.URL, p: p}
}

// benchTransport is the client of every target: a connection per worker.
func benchTransport(b *testing.B) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: time.Minute, Transport: tr}
}

// floorTarget starts a floor server on a free port of 127.0.0.1 for the
// rest of the benchmark; p's paths and tokens are used as they are.
func floorTarget(b *testing.B, p *servertest.Pair) target {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	url, _, err := floor.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	c := benchTransport(b)
	b.Cleanup(cancel)
	return target{http: c, url: url, p: p}
}

// floorPair is a made-up pair for the floor's own benchmarks: the floor
// reads neither the ids nor the tokens.
var floorPair = &servertest.Pair{WS: "wfloor", Consumer: "cfloor", ProducerTok: "floor-producer-token", ConsumTok: "floor-consumer-token"}

// publishSingle: 8 concurrent publishers, one message a request.
func publishSingle(t target, count int) error {
	ctx := context.Background()
	return split(count, workers, func(i int) error {
		r, err := t.try(ctx, "POST", t.p.PublishPath(), t.p.ProducerTok, envelope(int64(i)))
		if err == nil && r.Status != 202 {
			err = fmt.Errorf("publish: %d %s", r.Status, r.Body)
		}
		return err
	})
}

// publishBatch: 8 concurrent publishers, batches of 100.
func publishBatch(t target, count int) error {
	ctx := context.Background()
	path := "/v1/tenants/" + t.p.WS + "/messages/batch"
	return split((count+99)/100, workers, func(i int) error {
		var envs []any
		for j := i * 100; j < min(i*100+100, count); j++ {
			envs = append(envs, envelope(int64(j)))
		}
		r, err := t.try(ctx, "POST", path, t.p.ProducerTok, map[string]any{"messages": envs})
		if err == nil && (r.Status != 200 || strings.Contains(string(r.Body), `"accepted":false`)) {
			err = fmt.Errorf("batch: %d %.300s", r.Status, r.Body)
		}
		return err
	})
}

// drain: 8 receivers taking batches of 10 and acknowledging each batch
// until count messages are acknowledged; it returns the receives that
// got messages.
func drain(t target, count int) (int64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done, receives atomic.Int64
	err := split(workers, workers, func(int) error {
		for done.Load() < int64(count) {
			r, err := t.try(ctx, "GET", t.p.MessagesPath()+"?max=10&wait=1", t.p.ConsumTok, nil)
			if ctx.Err() != nil {
				return nil // drained: the last waiting polls are cut short
			}
			if err != nil {
				return err
			}
			var out struct {
				Messages []servertest.Message `json:"messages"`
			}
			if r.Status != 200 || json.Unmarshal(r.Body, &out) != nil {
				return fmt.Errorf("receive: %d %.300s", r.Status, r.Body)
			}
			if len(out.Messages) == 0 {
				continue
			}
			receives.Add(1)
			hs := make([]string, len(out.Messages))
			for i, m := range out.Messages {
				hs[i] = m.ReceiptHandle
			}
			a, err := t.try(ctx, "POST", t.p.SettlePath("ack"), t.p.ConsumTok, map[string]any{"receipt_handles": hs})
			if err != nil {
				return err
			}
			if a.Status != 200 || strings.Contains(string(a.Body), "ReceiptHandleIsInvalid") {
				return fmt.Errorf("ack: %d %.300s", a.Status, a.Body)
			}
			if done.Add(int64(len(hs))) >= int64(count) {
				cancel()
			}
		}
		return nil
	})
	return receives.Load(), err
}

// fillTarget publishes count messages in batches of 100, as fill does.
func fillTarget(t target, count int) error {
	ctx := context.Background()
	for i := 0; i < count; i += 100 {
		var envs []any
		for j := i; j < min(i+100, count); j++ {
			envs = append(envs, envelope(int64(j)))
		}
		r, err := t.try(ctx, "POST", "/v1/tenants/"+t.p.WS+"/messages/batch", t.p.ProducerTok, map[string]any{"messages": envs})
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("fill: %d %.300s", r.Status, r.Body)
		}
	}
	return nil
}

// vsFloor runs the workload of a sombus benchmark again, with the same
// message count and the same client, against a floor server started for
// it, after the benchmark's timer stopped (prepare runs before it is
// timed), and reports the floor's rate (floor-msgs/s) and the benchmark's
// rate as a share of it (ratio-to-floor): a ratio measured in one process,
// seconds apart, which a busy machine moves less than either rate.
func vsFloor(b *testing.B, p *servertest.Pair, prepare func(target) error, work func(target) error) {
	b.Helper()
	t := floorTarget(b, p)
	if prepare != nil {
		if err := prepare(t); err != nil {
			b.Fatalf("floor: %v", err)
		}
	}
	t0 := time.Now()
	if err := work(t); err != nil {
		b.Fatalf("floor: %v", err)
	}
	floorRate := float64(b.N) / time.Since(t0).Seconds()
	b.ReportMetric(floorRate, "floor-msgs/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/floorRate, "ratio-to-floor")
}

// BenchmarkPublishSingle: 8 concurrent publishers, one message a request.
// cpu-us/msg is the process's CPU time (client, server and store) per
// message over the timed run, floor-cpu-us/msg the floor's: on a machine
// shared with other work the rates follow the CPU the process gets, while
// the CPU a message costs moves much less.
func BenchmarkPublishSingle(b *testing.B) {
	n, p := setup(b)
	b.ResetTimer()
	stopProfile := profileTimed(b)
	cpu := processCPU()
	err := publishSingle(nodeTarget(n, p), b.N)
	cpu = processCPU() - cpu
	b.StopTimer()
	stopProfile()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-us/msg")
	var floorCPU int64
	vsFloor(b, p, nil, func(t target) error {
		floorCPU = processCPU()
		err := publishSingle(t, b.N)
		floorCPU = processCPU() - floorCPU
		return err
	})
	b.ReportMetric(float64(floorCPU)/1e3/float64(b.N), "floor-cpu-us/msg")
}

// BenchmarkPublishBatch: 8 concurrent publishers, batches of 100; b.N counts
// messages.
func BenchmarkPublishBatch(b *testing.B) {
	n, p := setup(b)
	b.ResetTimer()
	err := publishBatch(nodeTarget(n, p), b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
	vsFloor(b, p, nil, func(t target) error { return publishBatch(t, b.N) })
}

// BenchmarkDrain: 8 receivers taking batches of 10 and acknowledging each
// batch; the queue holds b.N messages over 1,000 stories, published before
// the timer starts.
//
// cpu-us/msg and floor-cpu-us/msg are the process's CPU time per message,
// as in BenchmarkPublishSingle.
func BenchmarkDrain(b *testing.B) {
	n, p := setup(b)
	fill(b, n, p, b.N)
	b.ResetTimer()
	stopProfile := profileTimed(b)
	cpu := processCPU()
	receives, err := drain(nodeTarget(n, p), b.N)
	cpu = processCPU() - cpu
	b.StopTimer()
	stopProfile()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
	b.ReportMetric(float64(b.N)/float64(max(receives, 1)), "msgs/receive")
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-us/msg")
	var floorCPU int64
	vsFloor(b, p, func(t target) error { return fillTarget(t, b.N) }, func(t target) error {
		floorCPU = processCPU()
		_, err := drain(t, b.N)
		floorCPU = processCPU() - floorCPU
		return err
	})
	b.ReportMetric(float64(floorCPU)/1e3/float64(b.N), "floor-cpu-us/msg")
}

// The floor's own benchmarks: the workloads above against the floor alone,
// for its allocations and bytes per message (-benchmem) next to sombus's.

// BenchmarkFloorPublishSingle is BenchmarkPublishSingle against the floor.
func BenchmarkFloorPublishSingle(b *testing.B) {
	t := floorTarget(b, floorPair)
	b.ResetTimer()
	cpu := processCPU()
	if err := publishSingle(t, b.N); err != nil {
		b.Fatal(err)
	}
	cpu = processCPU() - cpu
	b.StopTimer()
	rate(b, b.N)
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-us/msg")
}

// BenchmarkFloorPublishBatch is BenchmarkPublishBatch against the floor.
func BenchmarkFloorPublishBatch(b *testing.B) {
	t := floorTarget(b, floorPair)
	b.ResetTimer()
	if err := publishBatch(t, b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	rate(b, b.N)
}

// BenchmarkFloorDrain is BenchmarkDrain against the floor.
func BenchmarkFloorDrain(b *testing.B) {
	t := floorTarget(b, floorPair)
	if err := fillTarget(t, b.N); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	receives, err := drain(t, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
	b.ReportMetric(float64(b.N)/float64(max(receives, 1)), "msgs/receive")
}

// BenchmarkWakeUp: the time from sending a publish to the answer of a long
// poll (wait=20) that was waiting on the empty queue; p50 and p99.
func BenchmarkWakeUp(b *testing.B) {
	n, p := setup(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		type answer struct {
			r   *servertest.Response
			err error
			at  time.Time
		}
		ch := make(chan answer, 1)
		go func() {
			r, err := n.Try(ctx, "GET", p.MessagesPath()+"?max=1&wait=20", p.ConsumTok, nil)
			ch <- answer{r, err, time.Now()}
		}()
		// Let the poll reach its wait (there is no hook for it).
		time.Sleep(5 * time.Millisecond)
		t0 := time.Now()
		r, err := n.Try(ctx, "POST", p.PublishPath(), p.ProducerTok, envelope(int64(i)))
		if err != nil || r.Status != 202 {
			b.Fatalf("publish: %v %v", err, r)
		}
		a := <-ch
		if a.err != nil || a.r.Status != 200 {
			b.Fatalf("poll: %v %v", a.err, a.r)
		}
		var out struct {
			Messages []servertest.Message `json:"messages"`
		}
		if err := json.Unmarshal(a.r.Body, &out); err != nil || len(out.Messages) != 1 {
			b.Fatalf("poll answer: %s", a.r.Body)
		}
		lat = append(lat, a.at.Sub(t0))
		r, err = n.Try(ctx, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": []string{out.Messages[0].ReceiptHandle}})
		if err != nil || r.Status != 200 {
			b.Fatalf("ack: %v %v", err, r)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// reportLatency reports the median and 99th percentile of lat (sorted in
// place) as p50-ms and p99-ms.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
