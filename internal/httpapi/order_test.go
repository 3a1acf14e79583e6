package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/server/servertest"
)

func TestOrderPerStory(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	// Interleaved stories, published one millisecond apart.
	for _, id := range []string{"A1", "B1", "A2", "C1", "B2", "A3"} {
		n.Publish(p, servertest.Envelope(id, id[:1], nil)).Must(t, 202)
		clock.Advance(time.Millisecond)
	}
	ids := func(ms []servertest.Message) (out []string) {
		for _, m := range ms {
			out = append(out, m.MessageID())
		}
		return out
	}
	// Oldest story head first; one receive may not hand out two messages of
	// a story that would then be in flight together out of order.
	ms := n.Receive(p, "max=2&wait=0")
	if got := ids(ms); !slices.Equal(got, []string{"A1", "B1"}) {
		t.Fatalf("first receive %v", got)
	}
	rest := n.Receive(p, "max=10&wait=0")
	if got := ids(rest); !slices.Equal(got, []string{"C1"}) {
		t.Fatalf("second receive %v (A and B are in flight)", got)
	}
	// B1 acked: B2 is ready; its visible time is its enqueue time, so it is
	// offered before a story whose head was published later.
	mpAckAll(t, n, p, []string{ms[1].ReceiptHandle, rest[0].ReceiptHandle})
	n.Publish(p, servertest.Envelope("D1", "D", nil)).Must(t, 202)
	if got := ids(n.Receive(p, "max=10&wait=0&visibility=0")); !slices.Equal(got, []string{"B2", "D1"}) {
		t.Errorf("after acking B1: %v", got)
	}
	// A stays locked until A1 is settled, then A2, A3 follow in order.
	mpAckAll(t, n, p, []string{ms[0].ReceiptHandle})
	var order []string
	for range 10 {
		got := n.Receive(p, "max=10&wait=0")
		if len(got) == 0 {
			break
		}
		var hs []string
		for _, m := range got {
			order = append(order, m.MessageID())
			hs = append(hs, m.ReceiptHandle)
		}
		mpAckAll(t, n, p, hs)
	}
	var a []string
	for _, id := range order {
		if id[0] == 'A' {
			a = append(a, id)
		}
	}
	if !slices.Equal(a, []string{"A2", "A3"}) {
		t.Errorf("story A after A1: %v (all: %v)", a, order)
	}
	// Order of a batch is array order; of single publishes, 202 order.
	var envs []any
	for i := range 20 {
		envs = append(envs, servertest.Envelope(fmt.Sprintf("E%02d", i), "E", nil))
	}
	n.PublishBatch(p, envs).Must(t, 200)
	n.Publish(p, servertest.Envelope("E20", "E", nil)).Must(t, 202)
	got := mpDrain(t, n, p)
	for i, id := range got {
		if id != fmt.Sprintf("E%02d", i) {
			t.Fatalf("story E delivered as %v", got)
		}
	}
}

// TestConcurrentReceivers: 8 receivers over 1,000 stories of 10 messages
// (100 under -short), published in batches of 100 while they receive. Every
// message is delivered once, in story order, and never while another
// message of its story is in flight.
func TestConcurrentReceivers(t *testing.T) {
	t.Parallel()
	stories, perStory, receivers := 1000, 10, 8
	switch {
	case testing.Short():
		stories = 100
	case mpRaceEnabled():
		// The race detector slows the embedded SQLite (pure Go) about
		// tenfold: 300 stories keep the test near 20 s and still hold
		// 8 × 10 stories in flight at once.
		stories = 300
	}
	total := stories * perStory
	t.Logf("%d receivers, %d stories of %d messages", receivers, stories, perStory)
	n := servertest.Start(t, servertest.Options{})
	p := mpPair0(n)

	var (
		mu        sync.Mutex
		inFlight  = map[int]bool{}       // stories received and not yet acked
		next      = make([]int, stories) // next index expected per story
		delivered atomic.Int64
		failures  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The publisher: round r holds message r of every story, in batches of
	// 100 stories.
	pubDone := make(chan error, 1)
	go func() {
		for r := range perStory {
			for b := 0; b < stories; b += 100 {
				var envs []json.RawMessage
				for s := b; s < min(b+100, stories); s++ {
					e, _ := json.Marshal(servertest.Envelope(fmt.Sprintf("s%d-%d", s, r), fmt.Sprintf("story-%d", s), map[string]any{"r": r}))
					envs = append(envs, e)
				}
				res, err := n.Try(ctx, "POST", "/v1/tenants/"+p.WS+"/messages/batch", p.ProducerTok, map[string]any{"messages": envs})
				if err != nil {
					pubDone <- err
					return
				}
				if res.Status != 200 || strings.Contains(string(res.Body), `"accepted":false`) {
					pubDone <- fmt.Errorf("batch: %d %.300s", res.Status, res.Body)
					return
				}
			}
		}
		pubDone <- nil
	}()

	var wg sync.WaitGroup
	for w := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for delivered.Load() < int64(total) && ctx.Err() == nil {
				res, err := n.Try(ctx, "GET", p.MessagesPath()+"?max=10&wait=1&visibility=600", p.ConsumTok, nil)
				if err != nil {
					if ctx.Err() == nil {
						fail("receiver %d: %v", w, err)
					}
					return
				}
				var out struct {
					Messages []servertest.Message `json:"messages"`
				}
				if res.Status != 200 || json.Unmarshal(res.Body, &out) != nil {
					fail("receiver %d: %d %.200s", w, res.Status, res.Body)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				var hs []string
				var held []int
				mu.Lock()
				for _, m := range out.Messages {
					id := m.MessageID() // s<story>-<r>
					dash := strings.IndexByte(id, '-')
					s, _ := strconv.Atoi(id[1:dash])
					r, _ := strconv.Atoi(id[dash+1:])
					if inFlight[s] {
						if len(failures) < 20 {
							failures = append(failures, fmt.Sprintf("%s delivered while story %d is in flight", id, s))
						}
					}
					if r != next[s] {
						if len(failures) < 20 {
							failures = append(failures, fmt.Sprintf("%s delivered, expected message %d of story %d", id, next[s], s))
						}
					}
					if m.ReceiveCount != 1 {
						if len(failures) < 20 {
							failures = append(failures, fmt.Sprintf("%s receive_count %d", id, m.ReceiveCount))
						}
					}
					next[s] = r + 1
					inFlight[s] = true
					held = append(held, s)
					hs = append(hs, m.ReceiptHandle)
				}
				mu.Unlock()
				// "Handle" the messages while their stories are marked in
				// flight: any delivery of these stories to another receiver
				// meanwhile is a failure.
				for _, m := range out.Messages {
					var e map[string]any
					if json.Unmarshal(m.Envelope, &e) != nil {
						fail("%s: envelope %s", m.MessageID(), m.Envelope)
					}
				}
				runtime.Gosched()
				// Out of the in-flight set before the ack is sent: the next
				// message of a story may arrive as soon as the ack commits.
				mu.Lock()
				for _, s := range held {
					delete(inFlight, s)
				}
				mu.Unlock()
				ack, err := n.Try(ctx, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": hs})
				if err != nil {
					fail("ack: %v", err)
					return
				}
				var a mpSettleAnswer
				if ack.Status != 200 || json.Unmarshal(ack.Body, &a) != nil || len(a.Acked) != len(hs) {
					fail("ack: %d %.300s", ack.Status, ack.Body)
					return
				}
				delivered.Add(int64(len(hs)))
			}
		}()
	}
	if err := <-pubDone; err != nil {
		t.Errorf("publisher: %v", err)
		cancel()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if got := delivered.Load(); got != int64(total) {
		t.Fatalf("delivered %d of %d messages", got, total)
	}
	for s, k := range next {
		if k != perStory {
			t.Errorf("story %d: %d of %d delivered", s, k, perStory)
		}
	}
	if st := n.QueueCounts(p); st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("queue after the drain: %+v", st)
	}
}

// mpRaceEnabled reports whether the test binary was built with -race.
func mpRaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
