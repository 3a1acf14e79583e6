package bus

import (
	"sync"
	"time"
)

// WakeAll asks Notify to wake every waiter of a queue.
const WakeAll = int(^uint(0) >> 1)

// Notifier wakes long polls waiting on a queue. Each node has one; a store
// shared by several nodes forwards other nodes' wake-ups into it (Listen).
//
// It wakes as many waiters as there are new ready messages, oldest waiter
// first, not all of them: with eight receivers waiting, one publish would
// otherwise send eight receives to the store for one message. A waiter
// that wakes, fills a whole batch and so may have left messages behind
// passes the wake on (Receive does), as does one that woke but cannot take
// messages any more (its client went away).
//
// A message that becomes visible again by time (its visibility timeout or
// a release delay ran out) sends no wake-up; WakeAfter keeps one timer a
// queue for the earliest such time, so that waiters are woken then without
// reading the store in between.
type Notifier struct {
	mu      sync.Mutex
	waiters map[string][]*waiter
	timers  map[string]*wakeTimer
}

// waiter is one registered wait: a channel closed at the wake-up (Wait), or
// a function called for it (WaitFunc).
type waiter struct {
	ch chan struct{}
	fn func()
}

func (w *waiter) wake() {
	if w.fn != nil {
		w.fn()
		return
	}
	close(w.ch)
}

// wakeTimer is a queue's pending WakeAfter.
type wakeTimer struct {
	at time.Time // when it fires (the monotonic clock)
	t  *time.Timer
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier {
	return &Notifier{waiters: make(map[string][]*waiter), timers: make(map[string]*wakeTimer)}
}

// WakeAfter wakes one waiter of queueID d from now, when a message of it
// becomes visible again; a queue has one timer, for its earliest such
// time. The waiter it wakes passes the wake on when it takes a whole batch
// or cannot take messages, as after a Notify; one that finds nothing yet
// sets the next time itself.
func (n *Notifier) WakeAfter(queueID string, d time.Duration) {
	d = max(d, time.Millisecond)
	at := time.Now().Add(d)
	n.mu.Lock()
	defer n.mu.Unlock()
	if wt, ok := n.timers[queueID]; ok {
		if !wt.at.After(at) {
			return // an earlier wake-up is set: the waiter it wakes sets the next
		}
		wt.t.Stop()
	}
	wt := &wakeTimer{at: at}
	wt.t = time.AfterFunc(d, func() {
		n.mu.Lock()
		if n.timers[queueID] == wt {
			delete(n.timers, queueID)
		}
		n.mu.Unlock()
		n.Notify(queueID, 1)
	})
	n.timers[queueID] = wt
}

// Stop stops the pending WakeAfter timers.
func (n *Notifier) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, wt := range n.timers {
		wt.t.Stop()
		delete(n.timers, q)
	}
}

// Wait registers a waiter of queueID. The channel is closed when a Notify
// picks this waiter; cancel deregisters it (call it when done waiting) and
// reports whether the waiter had been woken meanwhile.
func (n *Notifier) Wait(queueID string) (woken <-chan struct{}, cancel func() (wasWoken bool)) {
	w := &waiter{ch: make(chan struct{})}
	return w.ch, n.register(queueID, w)
}

// WaitFunc registers a waiter of queueID that is a function: a Notify that
// picks it calls wake, on the notifying goroutine and without blocking it
// (wake must not block or call back into the notifier). It is for waits
// that hold no goroutine; cancel is as Wait's.
func (n *Notifier) WaitFunc(queueID string, wake func()) (cancel func() (wasWoken bool)) {
	return n.register(queueID, &waiter{fn: wake})
}

func (n *Notifier) register(queueID string, w *waiter) (cancel func() bool) {
	n.mu.Lock()
	n.waiters[queueID] = append(n.waiters[queueID], w)
	n.mu.Unlock()
	return func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		ws := n.waiters[queueID]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i:i], ws[i+1:]...)
				if len(ws) == 0 {
					delete(n.waiters, queueID)
				} else {
					n.waiters[queueID] = ws
				}
				return false
			}
		}
		return true // no longer registered: a Notify took it
	}
}

// Notify wakes up to count waiters of queueID (WakeAll for every one),
// oldest first. Waiters re-check the store after waking, so a wake-up is a
// hint, never a promise.
func (n *Notifier) Notify(queueID string, count int) {
	if count <= 0 {
		return
	}
	n.mu.Lock()
	ws := n.waiters[queueID]
	k := min(count, len(ws))
	picked := ws[:k]
	if k == len(ws) {
		delete(n.waiters, queueID)
	} else {
		n.waiters[queueID] = ws[k:]
	}
	n.mu.Unlock()
	for _, w := range picked {
		w.wake()
	}
}

// WakeEveryone wakes every waiter of every queue.
func (n *Notifier) WakeEveryone() {
	n.mu.Lock()
	all := n.waiters
	n.waiters = make(map[string][]*waiter)
	n.mu.Unlock()
	for _, ws := range all {
		for _, w := range ws {
			w.wake()
		}
	}
}

// NotifyAll wakes every waiter of queueID.
func (n *Notifier) NotifyAll(queueID string) { n.Notify(queueID, WakeAll) }
