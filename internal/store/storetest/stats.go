package storetest

import (
	"errors"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var statsTests = []test{
	{"Empty", testStatsEmpty},
	{"MissingQueue", testStatsMissing},
	{"Counts", testStatsCounts},
	{"OldestReadyAgeMilliseconds", testStatsAge},
	{"FanOutRedrivePurgeDelete", testStatsFanOut},
}

var purgeTests = []test{
	{"Purge", testPurge},
	{"KeepsAckRecords", testPurgeAckRecords},
}

func testStatsEmpty(e *env) {
	f := e.fixture(5)
	e.wantStats(f.Q, T0, bus.QueueStats{})
}

// testStatsMissing: a queue that does not exist, or no longer does, is
// not found rather than counted as empty, so that a connection read just
// before its removal is not shown with the counts of an empty queue.
func testStatsMissing(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(f.Q) })
	for _, q := range []string{f.Q, bus.NewID(bus.PrefixConnection)} {
		if st, err := e.s.QueueStats(e.ctx, q, at(time.Second)); !errors.Is(err, bus.ErrNotFound) {
			e.t.Errorf("QueueStats(%s) = %+v, %v; want bus.ErrNotFound", q, st, err)
		}
	}
}

func testStatsCounts(e *env) {
	f := e.fixture(5)
	other := e.consumer(f.WS, 1, "som.other")
	e.pub(f, T0, "a", "a1")                // in flight
	e.pub(f, at(1*time.Second), "b", "b1") // delayed
	e.pub(f, at(2*time.Second), "a", "a2") // behind a1: ready
	e.pub(f, at(3*time.Second), "b", "b2") // behind b1: ready
	e.pub(f, at(4*time.Second), "c", "c1") // released at once: ready
	e.pub(f, at(5*time.Second), "e", "e1") // dead letter
	e.pub(f, at(5*time.Second), "g", "g1") // dead letter
	e.pub(f, at(6*time.Second), "d", "d1") // released at once: ready
	now := at(7 * time.Second)
	ds := e.receive(f.Q, 10, time.Minute, now) // visible again at 67s
	wantIDs(e.t, ds, "a1", "b1", "c1", "e1", "g1", "d1")
	e.nackOK(f.Q, 2*time.Minute, now, ds[1].Handle) // b1 delayed until 127s
	e.nackOK(f.Q, 0, now, ds[2].Handle, ds[5].Handle)
	e.setAttemptLimit(f.Q, 1)
	e.nackOK(f.Q, 0, now, ds[3].Handle, ds[4].Handle) // e1, g1: dead letters
	e.setAttemptLimit(f.Q, 5)
	if n := len(e.allDeadLetters(f.Q)); n != 2 {
		e.t.Fatalf("setup: %d dead letters, want 2", n)
	}

	// Messages: a1 a2 b1 b2 c1 d1. In flight: a. Delayed: b.
	// Ready: a2 b2 c1 d1; the oldest of them is a2 (2s).
	e.wantStats(f.Q, at(10*time.Second), bus.QueueStats{Ready: 4, InFlight: 1, Delayed: 1, DeadLetters: 2, OldestReadyAgeSeconds: 8})
	// At 67s a1's visibility ran out: it is ready again, and the oldest.
	e.wantStats(f.Q, at(67*time.Second), bus.QueueStats{Ready: 5, Delayed: 1, DeadLetters: 2, OldestReadyAgeSeconds: 67})
	// At 127s the delay ran out too.
	e.wantStats(f.Q, at(127*time.Second), bus.QueueStats{Ready: 6, DeadLetters: 2, OldestReadyAgeSeconds: 127})
	// A redelivered b1 is in flight, not delayed.
	d := e.receive(f.Q, 10, time.Minute, at(127*time.Second))
	// c and d were released at 7s: they come first.
	wantIDs(e.t, d, "c1", "d1", "a1", "b1")
	e.ackOK(f.Q, at(127*time.Second), d[0].Handle, d[1].Handle, d[2].Handle)
	// Messages: a2 (ready), b1 (in flight), b2.
	e.wantStats(f.Q, at(128*time.Second), bus.QueueStats{Ready: 2, InFlight: 1, DeadLetters: 2, OldestReadyAgeSeconds: 126})
	// Another queue's counts are its own.
	e.wantStats(other, at(128*time.Second), bus.QueueStats{})
}

func testStatsAge(e *env) {
	f := e.fixture(5)
	e.pub(f, at(1234*time.Millisecond), "a", "a1")
	e.wantStats(f.Q, at(5*time.Second), bus.QueueStats{Ready: 1, OldestReadyAgeSeconds: 3.766})
	e.receiveOne(f.Q, time.Minute, at(5*time.Second), "a1")
	e.wantStats(f.Q, at(6*time.Second), bus.QueueStats{InFlight: 1})
}

// testStatsFanOut follows two queues fed by the same publish calls through
// a dead-letter move, a redrive of one dead letter, the end of a
// visibility, a purge and the removal of the other queue: each queue's
// counts are its own throughout.
func testStatsFanOut(e *env) {
	f := e.fixture(1)
	q2 := e.consumer(f.WS, 1, "som.>")
	e.publish(f.WS, f.P, T0, msg("a1", "a"), msg("a2", "a"), msg("b1", "b"), msg("c1", "c"))
	e.wantStats(f.Q, at(time.Second), bus.QueueStats{Ready: 4, OldestReadyAgeSeconds: 1})
	e.wantStats(q2, at(time.Second), bus.QueueStats{Ready: 4, OldestReadyAgeSeconds: 1})

	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1", "c1")
	e.nackOK(f.Q, 0, at(2*time.Second), ds[1].Handle, ds[2].Handle) // b1, c1: dead letters
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{Ready: 1, InFlight: 1, DeadLetters: 2, OldestReadyAgeSeconds: 2})
	e.wantStats(q2, at(2*time.Second), bus.QueueStats{Ready: 4, OldestReadyAgeSeconds: 2})

	n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, MessageIDs: []string{"b1"}, Now: at(3 * time.Second),
		Audit: auditEntry(f.WS, "queue.redrive", at(3*time.Second))})
	if err != nil || n != 1 {
		e.t.Fatalf("DeadLetterRedrive = %d, %v; want 1", n, err)
	}
	e.wantStats(f.Q, at(3*time.Second), bus.QueueStats{Ready: 2, InFlight: 1, DeadLetters: 1, OldestReadyAgeSeconds: 3})
	// a1's visibility ran out at 61s: ready again, without any write.
	e.wantStats(f.Q, at(61*time.Second), bus.QueueStats{Ready: 3, DeadLetters: 1, OldestReadyAgeSeconds: 61})

	n, err = e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: f.Q, Now: at(62 * time.Second), Audit: auditEntry(f.WS, "queue.purge", at(62*time.Second))})
	if err != nil || n != 3 {
		e.t.Fatalf("QueuePurge = %d, %v; want 3", n, err)
	}
	e.wantStats(f.Q, at(62*time.Second), bus.QueueStats{DeadLetters: 1})
	e.wantStats(q2, at(62*time.Second), bus.QueueStats{Ready: 4, OldestReadyAgeSeconds: 62})

	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(q2) })
	e.publish(f.WS, f.P, at(63*time.Second), msg("d1", "d"))
	e.wantStats(f.Q, at(64*time.Second), bus.QueueStats{Ready: 1, DeadLetters: 1, OldestReadyAgeSeconds: 1})
}

func testPurge(e *env) {
	f := e.fixture(1)
	q2 := e.consumer(f.WS, 5, "som.>")
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1")
	e.pub(f, T0, "c", "c1", "c2")
	e.pub(f, T0, "d", "d1")
	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1", "c1", "d1")
	e.nackOK(f.Q, 0, at(time.Second), ds[3].Handle) // d1 dead-lettered
	e.ackOK(f.Q, at(time.Second), ds[2].Handle)     // c1 acknowledged
	// Left: a1 (in flight), a2, b1 (in flight), c2.
	audit := auditEntry(f.WS, "queue.purge", at(2*time.Second))
	n, err := e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: f.Q, Now: at(2 * time.Second), Audit: audit})
	if err != nil {
		e.t.Fatalf("QueuePurge: %v", err)
	}
	if n != 4 {
		e.t.Errorf("QueuePurge = %d, want 4", n)
	}
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{DeadLetters: 1})
	if !contains(e.auditIDs(f.WS), audit.ID) {
		e.t.Errorf("purge audit entry not written")
	}
	if dl := dlIDs(e.allDeadLetters(f.Q)); len(dl) != 1 || dl[0] != "d1" {
		e.t.Errorf("dead letters after purge = %q, want d1", dl)
	}
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(time.Hour)))
	wantSettle(e.t, "ack of a purged delivery", e.ack(f.Q, at(time.Hour), ds[0].Handle), false)
	wantSettle(e.t, "nack of a purged delivery", e.nack(f.Q, 0, at(time.Hour), ds[1].Handle), false)
	// The other queue still holds its copies.
	e.wantStats(q2, at(time.Hour), bus.QueueStats{Ready: 6, OldestReadyAgeSeconds: 3600})
	// A story starts again from scratch.
	e.pub(f, at(time.Hour), "a", "a3", "a4")
	d := e.receiveOne(f.Q, time.Minute, at(time.Hour), "a3")
	if d.ReceiveCount != 1 {
		e.t.Errorf("ReceiveCount after purge = %d", d.ReceiveCount)
	}
	// Purging an empty queue deletes nothing.
	e.ackOK(f.Q, at(time.Hour), d.Handle)
	e.ackOK(f.Q, at(time.Hour), e.receiveOne(f.Q, time.Minute, at(time.Hour), "a4").Handle)
	n, err = e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: f.Q, Now: at(time.Hour), Audit: auditEntry(f.WS, "queue.purge", at(time.Hour))})
	if err != nil || n != 0 {
		e.t.Errorf("QueuePurge of an empty queue = %d, %v", n, err)
	}
}

func testPurgeAckRecords(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.ackOK(f.Q, at(time.Second), d.Handle)
	if _, err := e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: f.Q, Now: at(2 * time.Second), Audit: auditEntry(f.WS, "queue.purge", at(2*time.Second))}); err != nil {
		e.t.Fatal(err)
	}
	e.ackOK(f.Q, at(3*time.Second), d.Handle)
}
