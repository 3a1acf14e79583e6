package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// TestRestart stops a node mid-stream (publishes going on, a long poll
// waiting, messages received and not yet acknowledged) and starts a new one
// on the same SQLite file: every accepted message that was not acknowledged
// is delivered, and nothing acknowledged comes back.
func TestRestart(t *testing.T) {
	t.Parallel()
	file := "sqlite:" + filepath.Join(t.TempDir(), "restart.db")
	clock := bus.NewManualClock(time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC))
	n1 := servertest.Start(t, servertest.Options{Store: file, Clock: clock})
	u := map[string]any{"quota_tier": "unlimited"}
	p := n1.NewPairWith(u, u)
	idle := n1.AddConsumer(p, map[string]any{"quota_tier": "unlimited", "subscriptions": []map[string]any{{"topic": "som.nothing.>"}}})

	var (
		mu       sync.Mutex
		accepted = map[string]bool{} // 202: must survive unless acked
		unsure   = map[string]bool{} // publish answer lost in the stop
		acked    = map[string]bool{} // ack answered OK: must never come back
		ackSent  = map[string]bool{} // ack sent, answer lost
	)
	ctx := context.Background()

	// Before the stop: 300 messages over 30 stories, received and partly acked.
	publish := func(n *servertest.Node, id string, story int) {
		env := servertest.Envelope(id, fmt.Sprintf("story-%d", story%30), map[string]any{"id": id})
		res, err := n.Try(ctx, "POST", p.PublishPath(), p.ProducerTok, env)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil && res.Status == 202:
			accepted[id] = true
		case err == nil && res.Status >= 400 && res.Status < 500:
			t.Errorf("publish %s: %d %s", id, res.Status, res.Body)
		default:
			unsure[id] = true // refused connection, 503, or lost answer
		}
	}
	for i := range 300 {
		publish(n1, fmt.Sprintf("m%03d", i), i)
	}
	var inFlight []string
	for round := 0; round < 10; round++ {
		ms := n1.Receive(p, "max=10&wait=0&visibility=30")
		var hs []string
		for i, m := range ms {
			if i%3 == 2 {
				inFlight = append(inFlight, m.MessageID()) // keep some in flight
				continue
			}
			hs = append(hs, m.ReceiptHandle)
			mu.Lock()
			ackSent[m.MessageID()] = true
			mu.Unlock()
		}
		if len(hs) == 0 {
			continue
		}
		var a struct {
			Acked []string `json:"acked"`
		}
		n1.Settle(p, "ack", hs, nil).Must(t, 200).Decode(t, &a)
		if len(a.Acked) != len(hs) {
			t.Fatalf("ack: %d of %d", len(a.Acked), len(hs))
		}
		mu.Lock()
		for _, m := range ms {
			if ackSent[m.MessageID()] {
				acked[m.MessageID()] = true
				delete(ackSent, m.MessageID())
			}
		}
		mu.Unlock()
	}
	if len(acked) == 0 || len(inFlight) == 0 {
		t.Fatalf("acked %d, in flight %d", len(acked), len(inFlight))
	}

	// The stop, with a long poll waiting and publishers going on.
	poll := make(chan *servertest.Response, 1)
	go func() {
		r, err := n1.Try(ctx, "GET", idle.MessagesPath()+"?wait=20", idle.ConsumTok, nil)
		if err != nil {
			t.Errorf("long poll during the stop: %v", err)
		}
		poll <- r
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				publish(n1, fmt.Sprintf("late-%d-%04d", w, i), i+w)
			}
		}()
	}
	// Let the publishers run a little, then stop the node under them.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		k := len(accepted)
		mu.Unlock()
		if k >= 400 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	n1.Close()
	close(stop)
	wg.Wait()
	select {
	case r := <-poll:
		if r != nil && (r.Status != 200 || string(r.Body) != "{\"messages\":[]}\n") {
			t.Errorf("long poll at the stop: %d %s", r.Status, r.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll outlived the node")
	}
	t.Logf("accepted %d, unsure %d, acked %d, in flight at the stop %d", len(accepted), len(unsure), len(acked), len(inFlight))

	// The new node on the same file; in-flight messages are visible again
	// once their visibility ran out.
	clock.Advance(time.Minute)
	n2 := servertest.Start(t, servertest.Options{Store: file, Clock: clock})
	p2 := *p
	p2.ProducerTok = n2.Token(p.Producer, p.ProducerSecret)
	p2.ConsumTok = n2.Token(p.Consumer, p.ConsumerSecret)
	got := map[string]int{}
	for {
		ms := n2.Receive(&p2, "max=10&wait=0")
		if len(ms) == 0 {
			break
		}
		var hs []string
		for _, m := range ms {
			id := m.MessageID()
			got[id]++
			if acked[id] {
				t.Errorf("%s was acknowledged before the stop and came back", id)
			}
			if got[id] > 1 {
				t.Errorf("%s delivered twice after the restart", id)
			}
			var e struct {
				Payload struct {
					ID string `json:"id"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(m.Envelope, &e); err != nil || e.Payload.ID != id {
				t.Errorf("%s: envelope %s", id, m.Envelope)
			}
			hs = append(hs, m.ReceiptHandle)
		}
		n2.Settle(&p2, "ack", hs, nil).Must(t, 200)
	}
	missing := 0
	for id := range accepted {
		if !acked[id] && got[id] == 0 && !ackSent[id] {
			missing++
			if missing <= 10 {
				t.Errorf("accepted %s was lost", id)
			}
		}
	}
	for id := range got {
		if !accepted[id] && !unsure[id] {
			t.Errorf("%s delivered but never published", id)
		}
	}
	for _, id := range inFlight {
		if got[id] != 1 {
			t.Errorf("%s, in flight at the stop, delivered %d times after it", id, got[id])
		}
	}
	if missing > 0 {
		t.Errorf("%d accepted messages lost", missing)
	}
	if st := n2.QueueCounts(&p2); st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("after the drain: %+v", st)
	}
}
