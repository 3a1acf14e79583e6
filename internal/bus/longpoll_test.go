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
