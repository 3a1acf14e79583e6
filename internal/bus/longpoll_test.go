package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// scriptedStore answers receives from a script and counts them.
type scriptedStore struct {
	bus.Store
	mu     sync.Mutex
	calls  int
	answer func(call int, p *bus.ReceiveParams) *bus.ReceiveResult
}

func (s *scriptedStore) MessageReceive(_ context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.answer(s.calls, p), nil
}

func (s *scriptedStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestWaitingLongPollReadsNothing: a long poll on an empty queue reads the
// store once, then only waits: no re-check until its wait runs out.
func TestWaitingLongPollReadsNothing(t *testing.T) {
	t.Parallel()
	st := &scriptedStore{answer: func(int, *bus.ReceiveParams) *bus.ReceiveResult { return &bus.ReceiveResult{} }}
	svc := bus.NewService(bus.Config{Store: st, Logger: storetest.Logger(t)})
	ds, err := svc.Receive(context.Background(), bus.ReceiveRequest{QueueID: "q", Max: 10, Wait: 2500 * time.Millisecond, Visibility: time.Minute})
	if err != nil || len(ds) != 0 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if n := st.count(); n != 1 {
		t.Fatalf("the long poll read the store %d times while it waited, want once (before it waited)", n)
	}
}

// TestLongPollWakesAtNextVisibleTime: when the store says a message of the
// queue becomes visible again at some time, the waiting poll looks again
// then (the queue's timer), without reading in between.
func TestLongPollWakesAtNextVisibleTime(t *testing.T) {
	t.Parallel()
	st := &scriptedStore{answer: func(call int, p *bus.ReceiveParams) *bus.ReceiveResult {
		if call == 1 {
			return &bus.ReceiveResult{NextVisibleAt: p.Now.Add(300 * time.Millisecond)}
		}
		return &bus.ReceiveResult{Deliveries: []bus.Delivery{{MessageType: "t"}}}
	}}
	svc := bus.NewService(bus.Config{Store: st, Logger: storetest.Logger(t)})
	ds, err := svc.Receive(context.Background(), bus.ReceiveRequest{QueueID: "q", Max: 10, Wait: 20 * time.Second, Visibility: time.Minute})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if n := st.count(); n != 2 {
		t.Fatalf("%d reads, want 2: the first look and the one at the next visible time", n)
	}
}

// wakingStore is a scriptedStore whose acks make a message ready (Woken).
type wakingStore struct{ *scriptedStore }

func (wakingStore) MessageAck(_ context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	out := make([]bus.SettleResult, len(p.Handles))
	for i := range out {
		out[i] = bus.SettleResult{OK: true, Woken: true}
	}
	return out, nil
}

// plainHandles encodes a handle as its queue id.
type plainHandles struct{}

func (plainHandles) Encode(h bus.Handle) string                   { return h.QueueID }
func (plainHandles) AppendEncode(dst []byte, h bus.Handle) []byte { return append(dst, h.QueueID...) }
func (plainHandles) Decode(s string) (bus.Handle, error)          { return bus.Handle{QueueID: s}, nil }
func (plainHandles) DecodeFor(s, _ string) (bus.Handle, error)    { return bus.Handle{QueueID: s}, nil }

// TestFullBatchPassesItsWakeOn: a woken poll that fills its batch passes
// the wake-up on to the next waiter (more may be ready), whose receive here
// finds less and sets the queue's timer, which wakes it when the message
// is visible.
func TestFullBatchPassesItsWakeOn(t *testing.T) {
	t.Parallel()
	one := []bus.Delivery{{MessageType: "t"}}
	st := &scriptedStore{answer: func(call int, p *bus.ReceiveParams) *bus.ReceiveResult {
		switch call {
		case 1, 2: // both polls look: nothing yet
			return &bus.ReceiveResult{}
		case 3: // the woken poll fills its batch of one
			return &bus.ReceiveResult{Deliveries: one}
		case 4: // the next one, passed the wake-up on: a message is visible soon
			return &bus.ReceiveResult{NextVisibleAt: p.Now.Add(300 * time.Millisecond)}
		default:
			return &bus.ReceiveResult{Deliveries: one}
		}
	}}
	svc := bus.NewService(bus.Config{Store: wakingStore{st}, Handles: plainHandles{}, Logger: storetest.Logger(t)})
	got := make(chan int, 2)
	poll := func() {
		ds, err := svc.Receive(context.Background(), bus.ReceiveRequest{QueueID: "q", Max: 1, Wait: 5 * time.Second, Visibility: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- len(ds)
	}
	waitCalls := func(n int) {
		for st.count() < n {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // registered and waiting
	}
	go poll()
	waitCalls(1)
	go poll()
	waitCalls(2)
	start := time.Now()
	if _, err := svc.Settle(context.Background(), "q", []string{"q"}, false, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n := <-got; n != 1 {
			t.Fatalf("a poll got %d deliveries, want 1", n)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the second poll got its message after %v: it was not woken at the next visible time", d)
	}
	if n := st.count(); n != 5 {
		t.Fatalf("%d reads, want 5", n)
	}
}

// announcingStore is a scriptedStore shared by nodes (bus.WaitAnnouncer):
// its first announcement of a queue is news to the other nodes, the later
// ones are not.
type announcingStore struct {
	*scriptedStore
	announces int
}

func (s *announcingStore) WaitAnnounce(context.Context, string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announces++
	return s.announces == 1, nil
}

// TestLongPollLooksAgainAfterAnnouncing: a poll that finds nothing tells
// the other nodes it waits, and when that was news to them it looks once
// more before waiting (what committed before they heard was not sent to
// this node); a message found by that look is the answer. A receive that
// does not wait announces nothing.
func TestLongPollLooksAgainAfterAnnouncing(t *testing.T) {
	t.Parallel()
	st := &announcingStore{scriptedStore: &scriptedStore{answer: func(call int, _ *bus.ReceiveParams) *bus.ReceiveResult {
		if call == 3 {
			return &bus.ReceiveResult{Deliveries: []bus.Delivery{{MessageType: "t"}}}
		}
		return &bus.ReceiveResult{}
	}}}
	svc := bus.NewService(bus.Config{Store: st, Logger: storetest.Logger(t)})
	ds, err := svc.Receive(context.Background(), bus.ReceiveRequest{QueueID: "q", Max: 10, Wait: 0, Visibility: time.Minute})
	if err != nil || len(ds) != 0 || st.announces != 0 {
		t.Fatalf("receive without a wait: %v %v, %d announcements; want none", ds, err, st.announces)
	}
	ds, err = svc.Receive(context.Background(), bus.ReceiveRequest{QueueID: "q", Max: 10, Wait: 5 * time.Second, Visibility: time.Minute})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v; want the message the look after the announcement found", ds, err)
	}
	if n := st.count(); n != 3 || st.announces != 1 {
		t.Fatalf("%d reads and %d announcements, want 3 (one without a wait, then before and after the announcement) and 1", n, st.announces)
	}
}

// giveBackStore records the nacks it is sent.
type giveBackStore struct {
	bus.Store
	mu    sync.Mutex
	nacks []bus.SettleParams
}

func (s *giveBackStore) MessageNack(_ context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nacks = append(s.nacks, *p)
	out := make([]bus.SettleResult, len(p.Handles))
	for i := range out {
		out[i] = bus.SettleResult{OK: true, Woken: true}
	}
	return out, nil
}

// TestReleaseGivesBack: deliveries whose answer could not be written go
// back to the store as a give-back (their claim undone, not counted as a
// delivery), without a delay, every handle.
func TestReleaseGivesBack(t *testing.T) {
	t.Parallel()
	st := &giveBackStore{}
	svc := bus.NewService(bus.Config{Store: st, Logger: storetest.Logger(t)})
	ds := []bus.Delivery{
		{Handle: bus.Handle{QueueID: "q", StoryID: 1, Seq: 1, Nonce: 7}},
		{Handle: bus.Handle{QueueID: "q", StoryID: 3, Seq: 1, Nonce: 9}, Replayed: true},
		{Handle: bus.Handle{QueueID: "q", StoryID: 2, Seq: 1, Nonce: 8}},
	}
	svc.Release("q", ds)
	if len(st.nacks) != 1 {
		t.Fatalf("%d nacks, want 1", len(st.nacks))
	}
	p := st.nacks[0]
	if !p.GiveBack || p.Delay != 0 || p.QueueID != "q" || len(p.Handles) != 2 || p.Handles[0] != ds[0].Handle || p.Handles[1] != ds[2].Handle {
		t.Fatalf("release sent %+v, want a give-back of the two handles not replayed, without delay", p)
	}
	// Replayed deliveries alone: nothing is sent.
	svc.Release("q", ds[1:2])
	if len(st.nacks) != 1 {
		t.Fatalf("a replayed delivery was given back: %+v", st.nacks[1:])
	}
}
