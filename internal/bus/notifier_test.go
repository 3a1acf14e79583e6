package bus

import "testing"

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
