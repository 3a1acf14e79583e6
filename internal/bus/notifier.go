package bus

import "sync"

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
type Notifier struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier { return &Notifier{waiters: make(map[string][]chan struct{})} }

// Wait registers a waiter of queueID. The channel is closed when a Notify
// picks this waiter; cancel deregisters it (call it when done waiting) and
// reports whether the waiter had been woken meanwhile.
func (n *Notifier) Wait(queueID string) (woken <-chan struct{}, cancel func() (wasWoken bool)) {
	ch := make(chan struct{})
	n.mu.Lock()
	n.waiters[queueID] = append(n.waiters[queueID], ch)
	n.mu.Unlock()
	return ch, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		ws := n.waiters[queueID]
		for i, w := range ws {
			if w == ch {
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
	for _, ch := range picked {
		close(ch)
	}
}

// NotifyAll wakes every waiter of queueID.
func (n *Notifier) NotifyAll(queueID string) { n.Notify(queueID, WakeAll) }
