// Package bench measures the message path through HTTP: an in-process node
// on a temporary SQLite file (synchronous=FULL) with the system clock,
// 1 KiB payloads over 1,000 stories, connections on the unlimited tier.
//
//	go test -run '^$' -bench . ./internal/bench/
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
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
	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	n.HTTP = &http.Client{Timeout: time.Minute, Transport: tr}
	// Before the node's Close (cleanups run last first): the transport may
	// have dialled a connection it never used, which the server counts as
	// new, not idle, for 5 s, and its Shutdown (5 s grace) would wait for
	// it ("close node: context deadline exceeded").
	b.Cleanup(tr.CloseIdleConnections)
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

func rate(b *testing.B, msgs int) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPublishSingle: 8 concurrent publishers, one message a request.
func BenchmarkPublishSingle(b *testing.B) {
	n, p := setup(b)
	ctx := context.Background()
	b.ResetTimer()
	err := split(b.N, workers, func(i int) error {
		r, err := n.Try(ctx, "POST", p.PublishPath(), p.ProducerTok, envelope(int64(i)))
		if err == nil && r.Status != 202 {
			err = fmt.Errorf("publish: %d %s", r.Status, r.Body)
		}
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
}

// BenchmarkPublishBatch: 8 concurrent publishers, batches of 100; b.N counts
// messages.
func BenchmarkPublishBatch(b *testing.B) {
	n, p := setup(b)
	ctx := context.Background()
	path := "/v1/tenants/" + p.WS + "/messages/batch"
	batches := (b.N + 99) / 100
	b.ResetTimer()
	err := split(batches, workers, func(i int) error {
		var envs []any
		for j := i * 100; j < min(i*100+100, b.N); j++ {
			envs = append(envs, envelope(int64(j)))
		}
		r, err := n.Try(ctx, "POST", path, p.ProducerTok, map[string]any{"messages": envs})
		if err == nil && (r.Status != 200 || strings.Contains(string(r.Body), `"accepted":false`)) {
			err = fmt.Errorf("batch: %d %.300s", r.Status, r.Body)
		}
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
}

// BenchmarkDrain: 8 receivers taking batches of 10 and acknowledging each
// batch; the queue holds b.N messages over 1,000 stories, published before
// the timer starts.
func BenchmarkDrain(b *testing.B) {
	n, p := setup(b)
	fill(b, n, p, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done, receives atomic.Int64
	b.ResetTimer()
	err := split(workers, workers, func(int) error {
		for done.Load() < int64(b.N) {
			r, err := n.Try(ctx, "GET", p.MessagesPath()+"?max=10&wait=1", p.ConsumTok, nil)
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
			a, err := n.Try(ctx, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": hs})
			if err != nil {
				return err
			}
			if a.Status != 200 || strings.Contains(string(a.Body), "ReceiptHandleIsInvalid") {
				return fmt.Errorf("ack: %d %.300s", a.Status, a.Body)
			}
			if done.Add(int64(len(hs))) >= int64(b.N) {
				cancel()
			}
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate(b, b.N)
	b.ReportMetric(float64(b.N)/float64(max(receives.Load(), 1)), "msgs/receive")
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
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
