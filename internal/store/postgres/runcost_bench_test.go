package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// BenchmarkRunCost times the database's side of one quick receive and one
// quick ack (each a transaction: a gathered run) of take messages, one
// after the other on a queue of 1 KiB messages over 1,000 stories: the CPU
// time the server's processes used during each (serverCPU).
// Run sizes 1 and 10 apart give a run's fixed cost and a message's:
//
//	go test -run '^$' -bench RunCost -benchtime 2000x ./internal/store/postgres/
//
// It needs the PostgreSQL server on this machine, its processes readable
// (skipped otherwise), and nothing else running for figures worth reading.
func BenchmarkRunCost(b *testing.B) {
	payload := strings.Repeat("x", 1024)
	for _, take := range []int{1, 10, 40} {
		b.Run(fmt.Sprintf("take=%d", take), func(b *testing.B) {
			s, ws, q, producer := meterQueue(b)
			ctx := context.Background()
			total := b.N*take + 2000 // stories stay ready: 1,000 of them, two deep at the end
			for i := 0; i < total; i += 100 {
				var msgs []bus.PublishMessage
				for j := i; j < min(i+100, total); j++ {
					mid := fmt.Sprint("m-", j)
					msgs = append(msgs, bus.PublishMessage{MessageID: mid, MessageType: "story.context",
						Topic: "som.story.context", CorrelationID: fmt.Sprint("story-", j%1000),
						Envelope: []byte(`{"message_id":"` + mid + `","payload":{"data":"` + payload + `"}}`)})
				}
				if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Now: time.Now(),
					DedupWindow: bus.DedupWindow, Messages: msgs}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
				b.Fatal(err)
			}
			var recv, ack time.Duration
			b.ResetTimer()
			for range b.N {
				before, _ := serverCPU()
				res, ok, err := s.quickReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: take, Visibility: 30 * time.Second, Now: time.Now()})
				if err != nil || !ok || len(res.Deliveries) != take {
					b.Fatalf("receive: %d deliveries, ok %v, %v; want %d", len(res.Deliveries), ok, err, take)
				}
				mid, _ := serverCPU()
				hs := make([]bus.Handle, len(res.Deliveries))
				for i, d := range res.Deliveries {
					hs[i] = d.Handle
				}
				if _, ok, err := s.quickAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: time.Now()}); err != nil || !ok {
					b.Fatalf("ack: ok %v, %v", ok, err)
				}
				after, _ := serverCPU()
				recv += mid - before
				ack += after - mid
			}
			b.StopTimer()
			b.ReportMetric(float64(recv.Microseconds())/float64(b.N), "recv-db-us/run")
			b.ReportMetric(float64(ack.Microseconds())/float64(b.N), "ack-db-us/run")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// meterQueue opens a store with a consumer queue for the meters above
// (benchQueue), and a producer id to publish with; it skips the benchmark
// where the server's processes cannot be read.
func meterQueue(b *testing.B) (s *Store, ws, q, producer string) {
	b.Helper()
	if _, ok := serverCPU(); !ok {
		b.Skip("no process named postgres is readable here: run it beside a local PostgreSQL")
	}
	s = OpenTest(b)
	ws, q = benchQueue(b, s)
	return s, ws, q, bus.NewID(bus.PrefixConnection)
}

// serverCPU sums the time on a CPU of the processes named postgres (the
// server's backends and its background processes), from their
// /proc/<pid>/schedstat (nanoseconds, the kernel's time in their system
// calls included); ok is false when there is none to read.
func serverCPU() (d time.Duration, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/schedstat")
		if err != nil {
			continue
		}
		var ns int64
		if _, err := fmt.Sscan(string(data), &ns); err == nil {
			d += time.Duration(ns)
			ok = true
		}
	}
	return d, ok
}

// BenchmarkSampleCost times the database's side of the store calls one
// sample of the long-poll test makes (internal/bench, TestLongPollLoad),
// one after the other on a queue that is empty between samples: a publish
// of one message on a story of its own, the receive that claims it (up to
// 10), its ack, and the next receive, which finds nothing (after a claim
// that took fewer than it asked for, the queue's idle hint makes it the
// gathered check). The HTTP and the wake-up are not in it, nor the
// notification a publish through another node sends. For scale it also
// times a statement that does nothing (SELECT 1, its own transaction):
// the floor of a round trip.
//
//	go test -run '^$' -bench SampleCost -benchtime 2000x ./internal/store/postgres/
func BenchmarkSampleCost(b *testing.B) {
	s, ws, q, producer := meterQueue(b)
	ctx := context.Background()
	var pub, recv, ack, look, floor time.Duration
	step := func(d *time.Duration, f func()) {
		before, _ := serverCPU()
		f()
		after, _ := serverCPU()
		*d += after - before
	}
	checked := s.idle.answered.Load()
	b.ResetTimer()
	for i := range b.N {
		mid := fmt.Sprint("m-", i)
		step(&pub, func() {
			if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Now: time.Now(), DedupWindow: bus.DedupWindow,
				Messages: []bus.PublishMessage{{MessageID: mid, MessageType: "story.context", Topic: "som.story.context",
					CorrelationID: "story-" + mid, Envelope: []byte(`{"message_id":"` + mid + `","payload":{"n":1}}`)}}}); err != nil {
				b.Fatal(err)
			}
		})
		var res *bus.ReceiveResult
		step(&recv, func() {
			var err error
			res, err = s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: 30 * time.Second, Now: time.Now()})
			if err != nil || len(res.Deliveries) != 1 {
				b.Fatalf("receive: %v, %v; want one delivery", res, err)
			}
		})
		step(&ack, func() {
			out, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{res.Deliveries[0].Handle}, Now: time.Now()})
			if err != nil || len(out) != 1 || !out[0].OK {
				b.Fatalf("ack: %v, %v", out, err)
			}
		})
		step(&look, func() {
			res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: 30 * time.Second, Now: time.Now()})
			if err != nil || len(res.Deliveries) != 0 {
				b.Fatalf("receive of an empty queue: %v, %v", res, err)
			}
		})
		step(&floor, func() {
			if _, err := s.pool.Exec(ctx, `SELECT 1`); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(pub.Microseconds())/n, "publish-db-us")
	b.ReportMetric(float64(recv.Microseconds())/n, "recv-db-us")
	b.ReportMetric(float64(ack.Microseconds())/n, "ack-db-us")
	b.ReportMetric(float64(look.Microseconds())/n, "empty-recv-db-us")
	b.ReportMetric(float64(floor.Microseconds())/n, "select1-db-us")
	// 1 when every empty receive was the check's answer, not a claim.
	b.ReportMetric(float64(s.idle.answered.Load()-checked)/n, "checked/op")
	b.ReportMetric(0, "ns/op")
}
