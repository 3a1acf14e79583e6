package postgres

import (
	"testing"
	"time"
)

func TestLockStartupSerializesNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	unlockA, err := a.LockStartup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		unlockB, err := b.LockStartup(t.Context())
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- unlockB
	}()
	select {
	case <-got:
		t.Fatal("the second node took the startup lock while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	unlockA()
	select {
	case unlockB := <-got:
		if unlockB == nil {
			t.FailNow()
		}
		unlockB()
	case <-time.After(10 * time.Second):
		t.Fatal("the second node did not get the startup lock after the first released it")
	}
	// Released for good: the first node can take it again.
	unlock, err := a.LockStartup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}
