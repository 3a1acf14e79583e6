package bus

import (
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNotifierWakesAsManyAsAsked(t *testing.T) {
	t.Parallel()
	n := NewNotifier()
	a, cancelA := n.Wait("q")
	b, cancelB := n.Wait("q")
	c, cancelC := n.Wait("q")
	other, cancelOther := n.Wait("r")
	n.Notify("q", 1)
	if !closed(a) || closed(b) || closed(c) || closed(other) {
		t.Fatal("Notify(q, 1) must wake exactly the oldest waiter of q")
	}
	if !cancelA() {
		t.Fatal("cancel of a woken waiter must report it was woken")
	}
	if cancelB() {
		t.Fatal("cancel of a waiting waiter must report it was not woken")
	}
	n.Notify("q", 5)
	if !closed(c) || closed(b) {
		t.Fatal("a cancelled waiter must not be woken; the others must")
	}
	cancelC()
	n.NotifyAll("r")
	if !closed(other) {
		t.Fatal("NotifyAll must wake every waiter")
	}
	cancelOther()
	n.Notify("q", 3) // nobody waits: nothing happens, nothing is kept
	if len(n.waiters) != 0 {
		t.Fatalf("waiters left behind: %v", n.waiters)
	}
}

func TestNotifierWakeAfterWakesOneWaiterAtTheEarliestTime(t *testing.T) {
	t.Parallel()
	n := NewNotifier()
	a, cancelA := n.Wait("q")
	b, cancelB := n.Wait("q")
	defer cancelB()
	n.WakeAfter("q", time.Hour)
	n.WakeAfter("q", 20*time.Millisecond) // earlier: replaces the hour
	n.WakeAfter("q", time.Hour)           // later: the earlier one stays
	select {
	case <-a:
	case <-time.After(10 * time.Second):
		t.Fatal("WakeAfter did not wake the oldest waiter")
	}
	if closed(b) {
		t.Fatal("WakeAfter must wake one waiter, not every one")
	}
	if !cancelA() {
		t.Fatal("the woken waiter must report it was woken")
	}
	n.mu.Lock()
	left := len(n.timers)
	n.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d timers left after the wake-up (the hour-long ones must have been replaced)", left)
	}
	n.WakeAfter("r", time.Hour)
	n.Stop()
	if len(n.timers) != 0 {
		t.Fatal("Stop must drop the pending timers")
	}
}

func TestNotifierWakeEveryone(t *testing.T) {
	t.Parallel()
	n := NewNotifier()
	a, cancelA := n.Wait("q")
	b, cancelB := n.Wait("r")
	n.WakeEveryone()
	if !closed(a) || !closed(b) || !cancelA() || !cancelB() {
		t.Fatal("WakeEveryone must wake the waiters of every queue")
	}
}

func TestManualClockMoveWakesLongPolls(t *testing.T) {
	t.Parallel()
	c := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := NewService(Config{Clock: c})
	woken, cancel := s.notifier.Wait("q")
	c.Advance(time.Minute)
	if !closed(woken) || !cancel() {
		t.Fatal("moving a manual clock must wake the waiting polls: their timers run on real time")
	}
}
