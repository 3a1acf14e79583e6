package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/server/servertest"
)

// 50 stories of 10 messages: every message handled once, each story in
// publish order, never two handlers of one story at once, several stories
// at once.
func TestConsumeOrderPerStoryUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	const stories, perStory = 50, 10
	var envs []client.Envelope
	// Interleave the stories so that receives mix them.
	for i := range perStory {
		for s := range stories {
			envs = append(envs, envelope(fmt.Sprintf("m-%d-%d", s, i), fmt.Sprintf("story-%d", s), map[string]any{"i": i}))
		}
	}
	e.publish(t, envs)

	var mu sync.Mutex
	got := map[string][]int{}
	running := map[string]bool{}
	var now, peak, total atomic.Int64
	var violations []string
	h := func(ctx context.Context, m *client.Message) error {
		var p struct{ I int }
		if err := m.DecodePayload(&p); err != nil {
			return err
		}
		mu.Lock()
		if running[m.CorrelationID] {
			violations = append(violations, "two handlers at once in "+m.CorrelationID)
		}
		running[m.CorrelationID] = true
		mu.Unlock()
		if c := now.Add(1); c > peak.Load() {
			peak.Store(c)
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		now.Add(-1)
		mu.Lock()
		running[m.CorrelationID] = false
		got[m.CorrelationID] = append(got[m.CorrelationID], p.I)
		mu.Unlock()
		total.Add(1)
		return nil
	}
	var errs atomic.Int64
	stop := consume(t, e.consumer, h, client.ConsumeOptions{Workers: 8, OnError: func(err error) {
		errs.Add(1)
		t.Logf("consume: %v", err)
	}})
	waitFor(t, "every message handled", 90*time.Second, func() bool { return total.Load() >= stories*perStory })
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("order violated: %v", violations[:min(5, len(violations))])
	}
	for s := range stories {
		seq := got[fmt.Sprintf("story-%d", s)]
		if len(seq) != perStory {
			t.Fatalf("story-%d handled %d messages, want %d: %v", s, len(seq), perStory, seq)
		}
		for i, v := range seq {
			if v != i {
				t.Fatalf("story-%d handled out of order: %v", s, seq)
			}
		}
	}
	if peak.Load() < 2 {
		t.Errorf("handlers never ran concurrently (peak %d)", peak.Load())
	}
	if errs.Load() != 0 {
		t.Errorf("%d errors reported", errs.Load())
	}
	if q := e.queue(t); q.Ready+q.InFlight+q.Delayed != 0 {
		t.Errorf("queue not empty after consuming everything: %+v", q)
	}
}

// A handler error releases the message; it comes back (receive_count 2)
// and the story's later message waits for it.
func TestConsumeReleasesOnHandlerError(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	e.publish(t, []client.Envelope{envelope("a", "s", nil), envelope("b", "s", nil)})
	var mu sync.Mutex
	var seen []string
	var reported []error
	h := func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s#%d", m.MessageID, m.ReceiveCount))
		if m.MessageID == "a" && m.ReceiveCount == 1 {
			return errors.New("not yet")
		}
		return nil
	}
	var delays []int
	stop := consume(t, e.consumer, h, client.ConsumeOptions{
		Backoff: func(rc int) time.Duration { mu.Lock(); delays = append(delays, rc); mu.Unlock(); return 0 },
		OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() },
	})
	waitFor(t, "both handled", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a#1", "a#2"}
	if len(seen) < 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2][:2] != "b#" {
		t.Fatalf("handled %v, want a#1, a#2, then b", seen)
	}
	if len(delays) != 1 || delays[0] != 1 {
		t.Errorf("backoff asked for %v, want [1]", delays)
	}
	var he *client.HandlerError
	if len(reported) == 0 || !errors.As(reported[0], &he) || he.MessageID != "a" || he.ReceiveCount != 1 {
		t.Errorf("reported %v, want a HandlerError for a", reported)
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	for rc, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 10: time.Minute, 100: time.Minute} {
		if got := client.ExponentialBackoff(time.Second, time.Minute, rc); got != want {
			t.Errorf("ExponentialBackoff(1s, 1m, %d) = %s, want %s", rc, got, want)
		}
	}
}

// A message redelivered after its visibility ran out, while its first
// delivery is still being handled, waits for it and is then dropped as a
// duplicate.
func TestConsumeRedeliveryWaitsAndIsDeduplicated(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	clock := e.node.ManualClock()
	e.publish(t, []client.Envelope{envelope("a", "s", nil)})
	release := make(chan struct{})
	var calls, concurrent, inside atomic.Int64
	h := func(ctx context.Context, m *client.Message) error {
		if inside.Add(1) > 1 {
			concurrent.Add(1)
		}
		defer inside.Add(-1)
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	}
	var received atomic.Int64
	stop := consume(t, e.consumer, h, client.ConsumeOptions{Visibility: time.Second, Wait: time.Second})
	waitFor(t, "first delivery handled", 10*time.Second, func() bool { return calls.Load() == 1 })
	// Let the visibility run out: the next receive gets a again.
	clock.Advance(2 * time.Second)
	waitFor(t, "redelivery", 10*time.Second, func() bool {
		q := e.queue(t)
		if q.InFlight == 1 && q.Ready == 0 {
			// in flight again under the second delivery (the first timed out)
			received.Add(1)
		}
		return received.Load() > 0
	})
	time.Sleep(300 * time.Millisecond) // give a wrong implementation time to start the second handler
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times while the first delivery was running", calls.Load())
	}
	close(release)
	waitFor(t, "queue drained", 10*time.Second, func() bool {
		q := e.queue(t)
		return q.Ready+q.InFlight+q.Delayed == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 || concurrent.Load() != 0 {
		t.Fatalf("handler called %d times (%d concurrent), want once", calls.Load(), concurrent.Load())
	}
}

// The same message id delivered again later (after the bus's 5-minute
// duplicate window) is acknowledged without calling the handler.
func TestConsumeDropsDuplicates(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	var mu sync.Mutex
	var seen []string
	h := func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		seen = append(seen, m.MessageID)
		mu.Unlock()
		return nil
	}
	stop := consume(t, e.consumer, h, client.ConsumeOptions{})
	e.publish(t, []client.Envelope{envelope("dup", "s1", nil)})
	waitFor(t, "first handled", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	e.node.ManualClock().Advance(6 * time.Minute)
	e.publish(t, []client.Envelope{envelope("dup", "s1", nil), envelope("other", "s2", nil)})
	waitFor(t, "other handled", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 })
	waitFor(t, "queue drained", 10*time.Second, func() bool {
		q := e.queue(t)
		return q.Ready+q.InFlight+q.Delayed == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "dup" || seen[1] != "other" {
		t.Fatalf("handled %v, want [dup other]", seen)
	}
}

// The snapshot filter keeps the highest sequence_number per story_id and
// drops older ones.
func TestConsumeSnapshotFilter(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	snap := func(id string, story string, seq int) []byte {
		return []byte(fmt.Sprintf(`{"som_version":"1.0.0","message_id":%q,"message_type":"story.snapshot","correlation_id":"c1","story_id":%q,"sequence_number":%d,"payload":{}}`, id, story, seq))
	}
	for _, raw := range [][]byte{snap("1", "x", 1), snap("2", "x", 3), snap("3", "x", 2), snap("4", "y", 1)} {
		if _, err := e.producer.PublishRaw(context.Background(), raw); err != nil {
			t.Fatal(err)
		}
	}
	// In the payload works too.
	e.publish(t, []client.Envelope{envelope("5", "c1", map[string]any{"story_id": "x", "sequence_number": 2})})
	var mu sync.Mutex
	var seen []string
	h := func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		seen = append(seen, m.MessageID)
		mu.Unlock()
		return nil
	}
	stop := consume(t, e.consumer, h, client.ConsumeOptions{Snapshots: true})
	waitFor(t, "queue drained", 10*time.Second, func() bool {
		q := e.queue(t)
		return q.Ready+q.InFlight+q.Delayed == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[1 2 4]" {
		t.Fatalf("handled %v, want [1 2 4]", seen)
	}
}

// On shutdown the handler in flight finishes and is acknowledged, and the
// messages received but not started are released at once.
func TestConsumeShutdown(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	// Three stories, one worker: b and c are received with a and wait for
	// the worker.
	e.publish(t, []client.Envelope{envelope("a", "s1", nil), envelope("b", "s2", nil), envelope("c", "s3", nil)})
	started := make(chan struct{})
	release := make(chan struct{})
	var handled []string
	var mu sync.Mutex
	h := func(ctx context.Context, m *client.Message) error {
		if m.MessageID == "a" {
			close(started)
			<-release
		}
		mu.Lock()
		handled = append(handled, m.MessageID)
		mu.Unlock()
		return nil
	}
	stop := consume(t, e.consumer, h, client.ConsumeOptions{Workers: 1})
	<-started
	waitFor(t, "all three received", 10*time.Second, func() bool { return e.queue(t).InFlight == 3 })
	done := make(chan error, 1)
	go func() { done <- stop() }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Consume returned (%v) before the handler in flight finished", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if fmt.Sprint(handled) != "[a]" {
		t.Fatalf("handled %v, want [a]", handled)
	}
	mu.Unlock()
	// a was acknowledged; b and c are ready again at once, in order.
	msgs, err := e.consumer.Receive(context.Background(), client.ReceiveOptions{Wait: client.NoWait})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].MessageID != "b" || msgs[1].MessageID != "c" || msgs[0].ReceiveCount != 2 {
		var ids []string
		for _, m := range msgs {
			ids = append(ids, fmt.Sprintf("%s#%d", m.MessageID, m.ReceiveCount))
		}
		t.Fatalf("after shutdown received %v, want b#2 c#2", ids)
	}
}

// TestConsumeRefusesNoWait: Consume long-polls; a negative Wait (NoWait)
// would spin on empty answers and spend the connection's allowance, so it
// is refused before any request.
func TestConsumeRefusesNoWait(t *testing.T) {
	t.Parallel()
	c, err := client.NewConsumer(client.Config{BaseURL: "http://127.0.0.1:1", ClientID: "c1", ClientSecret: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Consume(context.Background(), func(context.Context, *client.Message) error { return nil }, client.ConsumeOptions{Wait: client.NoWait})
	if err == nil || !strings.Contains(err.Error(), "ConsumeOptions.Wait") {
		t.Fatalf("Consume with NoWait: %v, want a refusal naming Wait", err)
	}
}
