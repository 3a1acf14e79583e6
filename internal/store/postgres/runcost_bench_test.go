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
			if _, ok := serverCPU(); !ok {
				b.Skip("no process named postgres is readable here: run it beside a local PostgreSQL")
			}
			s := OpenTest(b)
			ws, q := benchQueue(b, s)
			ctx := context.Background()
			producer := bus.NewID(bus.PrefixConnection)
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
