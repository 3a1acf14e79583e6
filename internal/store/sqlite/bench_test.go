package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "b.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkPublishParallel publishes single messages from many goroutines:
// group commit puts many of them in one transaction (one fsync).
// cpu-µs/msg is the process's CPU time per message: on a shared machine
// steadier than the time per op.
func BenchmarkPublishParallel(b *testing.B) {
	s := benchStore(b)
	ws, prod, _ := setupQueueB(b, s)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0, b.N) }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
				Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i%1000))}, Now: t0, DedupWindow: 5 * time.Minute})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPublishBatch100 publishes batches of 100 messages.
func BenchmarkPublishBatch100(b *testing.B) {
	s := benchStore(b)
	ws, prod, _ := setupQueueB(b, s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ms := make([]bus.PublishMessage, 100)
		for j := range ms {
			ms[j] = msg(fmt.Sprint("m", i, "-", j), fmt.Sprint("s", j%10))
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkReceiveAckParallel receives and acks batches of 10 from many
// goroutines over a queue filled beforehand.
func BenchmarkReceiveAckParallel(b *testing.B) {
	s := benchStore(b)
	ws, prod, q := setupQueueB(b, s)
	total := b.N*10 + 1000
	for i := 0; i < total; i += 100 {
		ms := make([]bus.PublishMessage, 100)
		for j := range ms {
			ms[j] = msg(fmt.Sprint("m", i+j), fmt.Sprint("s", (i+j)%5000))
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(4)
	b.ResetTimer()
	var got atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(time.Second)})
			if err != nil {
				b.Error(err)
				return
			}
			hs := make([]bus.Handle, len(r.Deliveries))
			for i, d := range r.Deliveries {
				hs[i] = d.Handle
			}
			if len(hs) == 0 {
				continue
			}
			if _, err := s.MessageAck(context.Background(), &bus.SettleParams{QueueID: q, Handles: hs, Now: t0.Add(time.Second)}); err != nil {
				b.Error(err)
				return
			}
			got.Add(int64(len(hs)))
		}
	})
	b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "msg/s")
}

func setupQueueB(b *testing.B, s *Store) (string, string, string) {
	ws, prod, cons := bus.NewID("w"), bus.NewID("c"), bus.NewID("c")
	err := s.Update(context.Background(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: t0}); err != nil {
			return err
		}
		for _, c := range []bus.Connection{
			{ID: prod, WorkspaceID: ws, Kind: bus.KindProducer, Name: "p", Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CreatedAt: t0, UpdatedAt: t0},
			{ID: cons, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "c", Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard",
				Subscriptions: []bus.Subscription{{Topic: "som.>"}}, CreatedAt: t0, UpdatedAt: t0},
		} {
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ws, prod, cons
}

// payload1K pads bench envelopes to about 1 KiB, as the end-to-end
// benchmarks send.
var payload1K = strings.Repeat("x", 1000)

// msg1K is a message of about 1 KiB.
func msg1K(id, story string) bus.PublishMessage {
	m := msg(id, story)
	m.Envelope = []byte(`{"message_id":"` + id + `","payload":"` + payload1K + `"}`)
	return m
}

// fillQueue publishes n messages over stories stories in batches of 100.
func fillQueue(b *testing.B, s *Store, ws, prod string, n, stories int, tag string) {
	b.Helper()
	for i := 0; i < n; i += 100 {
		k := min(100, n-i)
		ms := make([]bus.PublishMessage, k)
		for j := range ms {
			ms[j] = msg1K(fmt.Sprint(tag, i+j), fmt.Sprint("s", (i+j)%stories))
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchDepths are the backlogs the depth benchmarks run at; a million only
// when SOMBUS_BENCH_MILLION is set (it takes minutes to fill).
func benchDepths() []int {
	ds := []int{0, 30000}
	if os.Getenv("SOMBUS_BENCH_MILLION") != "" {
		ds = append(ds, 1000000)
	}
	return ds
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time the process used since start per
// message: on a busy machine a steadier figure than the elapsed time.
func reportCPU(b *testing.B, start time.Duration, msgs int) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(msgs), "cpu-µs/msg")
}

// profileTimed writes a CPU profile of the timed part of a benchmark to
// the file SOMBUS_BENCH_CPUPROFILE names, if set (-cpuprofile would also
// profile the filling of the queue); the result stops it.
func profileTimed(b *testing.B) func() {
	path := os.Getenv("SOMBUS_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// BenchmarkDepthReceiveAck receives up to 10 and acks them, four callers,
// on a file with the fsync before each answer, with depth messages queued
// behind the ones it takes (over 1,000 stories): one op is one receive and
// one ack of 10 messages. The cost should not grow with depth.
func BenchmarkDepthReceiveAck(b *testing.B) {
	for _, depth := range benchDepths() {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			s := benchStore(b)
			ws, prod, q := setupQueueB(b, s)
			// Slack for the last receives, which find fewer ready stories.
			fillQueue(b, s, ws, prod, depth+b.N*10+2000, 1000, "m")
			now := t0.Add(time.Second)
			b.ReportAllocs()
			b.ResetTimer()
			defer profileTimed(b)()
			cpu0 := cpuTime()
			taken := drainParallel(b, s, q, now, nil)
			if taken < b.N*10 {
				b.Fatalf("took %d messages, want %d", taken, b.N*10)
			}
			reportCPU(b, cpu0, b.N*10)
			b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

// BenchmarkDepthPublish publishes single messages (one caller, fsync
// before each answer) and batches of 100 into a queue holding depth
// messages.
func BenchmarkDepthPublish(b *testing.B) {
	for _, depth := range benchDepths() {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("depth=%d/batch=%d", depth, batch), func(b *testing.B) {
				s := benchStore(b)
				ws, prod, _ := setupQueueB(b, s)
				fillQueue(b, s, ws, prod, depth, 1000, "f")
				ms := make([]bus.PublishMessage, batch)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					for j := range ms {
						ms[j] = msg1K(fmt.Sprint("m", i, "-", j), fmt.Sprint("s", (i*batch+j)%1000))
					}
					if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
						Messages: ms, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msg/s")
				reportCPU(b, cpu0, b.N*batch)
			})
		}
	}
}

// BenchmarkReadAfterWrite is one single publish then one small read of the
// read pool (as a request's authentication does), with depth messages
// queued and the read pool's connections warmed by a count of the queue:
// each read after a write starts a read transaction that finds the
// database changed and drops its connection's page cache.
func BenchmarkReadAfterWrite(b *testing.B) {
	for _, depth := range benchDepths() {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			s := benchStore(b)
			ws, prod, q := setupQueueB(b, s)
			fillQueue(b, s, ws, prod, depth, 1000, "f")
			var wg sync.WaitGroup
			for range 8 { // warm several read connections at once
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.QueueStats(context.Background(), q, t0); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
			ms := make([]bus.PublishMessage, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ms[0] = msg(fmt.Sprint("m", i), fmt.Sprint("s", i%1000))
				if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
					Messages: ms, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
					b.Fatal(err)
				}
				for range 4 {
					if err := s.View(context.Background(), func(tx bus.Tx) error {
						_, err := tx.ConnectionGet(q)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkPublishConsumers publishes single messages into a workspace of
// 1 and of 1,000 consumers (storetest.BenchPublishConsumers).
func BenchmarkPublishConsumers(b *testing.B) {
	storetest.BenchPublishConsumers(b, func(b *testing.B) bus.Store { return benchStore(b) })
}

// BenchmarkDepthQueueStats reads a queue's counts (as the management read
// of a connection does) with depth messages queued over 1,000 stories and
// 10 of them in flight: one op is one QueueStats through the read pool.
// The cost should not grow with depth.
func BenchmarkDepthQueueStats(b *testing.B) {
	for _, depth := range benchDepths() {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			s := benchStore(b)
			ws, prod, q := setupQueueB(b, s)
			fillQueue(b, s, ws, prod, depth, 1000, "f")
			now := t0.Add(time.Second)
			if _, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now}); err != nil {
				b.Fatal(err)
			}
			st, err := s.QueueStats(context.Background(), q, now)
			if err != nil {
				b.Fatal(err)
			}
			if want := int64(min(depth, 10)); st.InFlight != want || st.Ready != int64(depth)-want {
				b.Fatalf("stats %+v at depth %d", st, depth)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := s.QueueStats(context.Background(), q, now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// drainParallel receives batches of up to 10 from queue q at now and
// acknowledges each, from 4 goroutines per GOMAXPROCS, until the
// benchmark's loop ends, and returns how many messages were taken. With
// acks non-nil, it appends the time each MessageAck call took to it.
func drainParallel(b *testing.B, s *Store, q string, now time.Time, acks *[]time.Duration) int {
	var taken atomic.Int64
	var mu sync.Mutex
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		var lat []time.Duration
		if acks != nil {
			defer func() {
				mu.Lock()
				*acks = append(*acks, lat...)
				mu.Unlock()
			}()
		}
		for pb.Next() {
			r, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
			if err != nil {
				b.Error(err)
				return
			}
			hs := make([]bus.Handle, len(r.Deliveries))
			for i, d := range r.Deliveries {
				hs[i] = d.Handle
			}
			t := time.Now()
			if _, err := s.MessageAck(context.Background(), &bus.SettleParams{QueueID: q, Handles: hs, Now: now}); err != nil {
				b.Error(err)
				return
			}
			if acks != nil {
				lat = append(lat, time.Since(t))
			}
			taken.Add(int64(len(hs)))
		}
	})
	return int(taken.Load())
}
