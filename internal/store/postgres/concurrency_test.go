package postgres

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestTwoNodesOneQueue runs two stores ("nodes") on one schema: publishers
// feed stories while receivers on both nodes take, nack and ack. No story
// may be held by two receivers at once, and each story is consumed in
// order.
func TestTwoNodesOneQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	nodes := []*Store{openURL(t, url), openURL(t, url)}
	ws, prod, q := setupQueue(t, nodes[0], 1000)

	const stories, perStory = 12, 20
	var (
		mu      sync.Mutex
		held    = map[string]string{} // story -> message id held now
		acked   = map[string]int{}    // story -> messages acked so far
		total   atomic.Int64
		stopped atomic.Bool
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		stopped.Store(true)
	}

	var wg sync.WaitGroup
	// One publisher per half of the stories (order is per story), each
	// publishing in small batches, concurrently with the receivers.
	for p := range 2 {
		wg.Go(func() {
			for i := range perStory {
				var msgs []bus.PublishMessage
				for k := p; k < stories; k += 2 {
					story := fmt.Sprint("s", k)
					msgs = append(msgs, testMessage(fmt.Sprintf("%s-%d", story, i), story))
				}
				node := nodes[i%2]
				if _, err := node.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
					Messages: msgs, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
					fail("publish: %v", err)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for r := range 8 {
		node := nodes[r%2]
		wg.Go(func() {
			for !stopped.Load() && total.Load() < stories*perStory {
				if time.Now().After(deadline) {
					fail("not done in time: %d of %d acknowledged", total.Load(), stories*perStory)
					return
				}
				res, err := node.MessageReceive(t.Context(), &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Minute, Now: time.Now()})
				if err != nil {
					fail("receive: %v", err)
					return
				}
				if len(res.Deliveries) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, d := range res.Deliveries {
					if other, ok := held[d.CorrelationID]; ok {
						fail("story %s handed out twice at once: %s and %s", d.CorrelationID, other, d.MessageID)
					}
					held[d.CorrelationID] = d.MessageID
					if want := fmt.Sprintf("%s-%d", d.CorrelationID, acked[d.CorrelationID]); d.MessageID != want {
						fail("story %s: got %s, want %s (order)", d.CorrelationID, d.MessageID, want)
					}
				}
				mu.Unlock()
				for _, d := range res.Deliveries {
					nack := rand.IntN(10) == 0
					// Release before settling: until the settle commits the
					// story is still in flight, so nobody else may get it.
					mu.Lock()
					delete(held, d.CorrelationID)
					if !nack {
						acked[d.CorrelationID]++
					}
					mu.Unlock()
					settle := node.MessageAck
					if nack {
						settle = node.MessageNack
					}
					rs, err := settle(t.Context(), &bus.SettleParams{QueueID: q, Handles: []bus.Handle{d.Handle}, Now: time.Now()})
					if err != nil || !rs[0].OK {
						fail("settle %s (nack=%v): %v %+v", d.MessageID, nack, err, rs)
						return
					}
					if !nack {
						total.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	st, err := nodes[1].QueueStats(t.Context(), q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.InFlight+st.Delayed != 0 {
		t.Errorf("queue not empty at the end: %+v", st)
	}
}
