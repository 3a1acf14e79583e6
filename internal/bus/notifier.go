package bus

import "sync"

// Notifier wakes long polls waiting on a queue. Each node has one; a store
// shared by several nodes forwards other nodes' wake-ups into it (Listen).
type Notifier struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
}

// NewNotifier returns an empty notifier.
func NewNotifier() *Notifier { return &Notifier{waiters: make(map[string]chan struct{})} }

// Wait returns a channel that is closed at the next Notify of queueID.
func (n *Notifier) Wait(queueID string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waiters[queueID]
	if !ok {
		ch = make(chan struct{})
		n.waiters[queueID] = ch
	}
	return ch
}

// Notify wakes every waiter of queueID. The channel is replaced, so a waiter
// that registers after Notify waits for the next one; waiters re-check the
// store after waking, so a wake-up is a hint, never a promise.
func (n *Notifier) Notify(queueID string) {
	n.mu.Lock()
	ch, ok := n.waiters[queueID]
	if ok {
		delete(n.waiters, queueID)
	}
	n.mu.Unlock()
	if ok {
		close(ch)
	}
}
