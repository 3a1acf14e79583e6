package storetest

import (
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var attemptTests = []test{
	{"ReplaySameHandles", testAttemptReplay},
	{"ReplayOnlyStillInFlight", testAttemptOnlyInFlight},
	{"ReplayAfterVisibilityRanOut", testAttemptExpiredVisibility},
	{"ReplayTakesNothingWhenAllSettled", testAttemptAllSettled},
	{"WindowExpiry", testAttemptWindow},
	{"EmptyReceiveRecordsNothing", testAttemptEmpty},
	{"ScopedToQueue", testAttemptPerQueue},
	{"ReplayedFlag", testAttemptReplayedFlag},
	{"ReplaySkipsDelayedRelease", testAttemptDelayedRelease},
}

// wantSameDeliveries wants got to be the deliveries of want (any order),
// with the same handles and receive counts.
func wantSameDeliveries(e *env, got, want []bus.Delivery) {
	e.t.Helper()
	wantIDSet(e.t, got, ids(want)...)
	byID := map[string]bus.Delivery{}
	for _, d := range want {
		byID[d.MessageID] = d
	}
	for _, g := range got {
		w := byID[g.MessageID]
		if g.Handle != w.Handle {
			e.t.Errorf("replayed %s handle %+v, want the original %+v", g.MessageID, g.Handle, w.Handle)
		}
		if g.ReceiveCount != w.ReceiveCount {
			e.t.Errorf("replayed %s ReceiveCount %d, want %d", g.MessageID, g.ReceiveCount, w.ReceiveCount)
		}
		if g.CorrelationID != w.CorrelationID || g.Topic != w.Topic || g.ProducerID != w.ProducerID || !g.EnqueuedAt.Equal(w.EnqueuedAt) || !sameBytes(g.Envelope, w.Envelope) {
			e.t.Errorf("replayed %s = %+v, want %+v", g.MessageID, g, w)
		}
	}
}

func testAttemptReplay(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1")
	e.pub(f, T0, "c", "c1")
	e.pub(f, T0, "d", "d1")
	first := e.receiveAttempt(f.Q, 3, 30*time.Second, "att-1", at(time.Second)) // visible again at 31s
	wantIDs(e.t, first, "a1", "b1", "c1")
	e.pub(f, at(2*time.Second), "e", "e1")
	// Retry with a longer visibility: same deliveries, visibility now 10s+60s.
	again := e.receiveAttempt(f.Q, 10, time.Minute, "att-1", at(10*time.Second))
	wantSameDeliveries(e, again, first)
	// It took nothing new: d1 and e1 are still ready.
	e.wantStats(f.Q, at(10*time.Second), bus.QueueStats{Ready: 3, InFlight: 3, OldestReadyAgeSeconds: 10})
	// At 31s (the first visibility) they are still hidden; d1 and e1 are not.
	wantIDs(e.t, e.receive(f.Q, 10, time.Hour, at(31*time.Second)), "d1", "e1")
	// At 70s they are visible again, delivered a second time.
	ds := e.receive(f.Q, 10, time.Minute, at(70*time.Second))
	wantIDs(e.t, ds, "a1", "b1", "c1")
	for _, d := range ds {
		if d.ReceiveCount != 2 {
			e.t.Errorf("%s ReceiveCount = %d, want 2", d.MessageID, d.ReceiveCount)
		}
	}
	// The original handles were ended by that receive; a replay now finds
	// none of them in flight, and takes nothing.
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Minute, "att-1", at(71*time.Second)))
}

func testAttemptOnlyInFlight(e *env) {
	f := e.fixture(5)
	for _, s := range []string{"a", "b", "c", "d"} {
		e.pub(f, T0, s, s+"1")
	}
	first := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(time.Second))
	wantIDs(e.t, first, "a1", "b1", "c1", "d1")
	e.ackOK(f.Q, at(2*time.Second), first[0].Handle)             // a1 acknowledged
	e.nackOK(f.Q, 0, at(2*time.Second), first[2].Handle)         // c1 released ...
	c := e.receiveOne(f.Q, time.Minute, at(2*time.Second), "c1") // ... and received again
	e.nackOK(f.Q, 0, at(3*time.Second), first[1].Handle)         // b1 released, visible since 3s
	again := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(4*time.Second))
	wantSameDeliveries(e, again, first[3:])
	// b1 stays ready (not taken by the replay); c1 stays with its receiver.
	e.wantStats(f.Q, at(4*time.Second), bus.QueueStats{Ready: 1, InFlight: 2, OldestReadyAgeSeconds: 4})
	e.ackOK(f.Q, at(5*time.Second), c.Handle)
}

func testAttemptExpiredVisibility(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	e.receiveAttempt(f.Q, 10, 10*time.Second, "att", at(time.Second)) // hidden until 11s
	// At 11s it is visible again: no longer in flight, so the replay returns
	// nothing, and it takes nothing new.
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Minute, "att", at(11*time.Second)))
	d := e.receiveOne(f.Q, time.Minute, at(12*time.Second), "a1")
	if d.ReceiveCount != 2 {
		e.t.Errorf("ReceiveCount = %d, want 2", d.ReceiveCount)
	}
}

func testAttemptAllSettled(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	ds := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(time.Second))
	wantIDs(e.t, ds, "a1")
	e.ackOK(f.Q, at(2*time.Second), ds[0].Handle)
	e.pub(f, at(3*time.Second), "b", "b1")
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Minute, "att", at(4*time.Second)))
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(4*time.Second)), "b1")
}

func testAttemptWindow(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	first := e.receiveAttempt(f.Q, 10, time.Hour, "att", T0)
	wantIDs(e.t, first, "a1")
	e.pub(f, T0, "b", "b1")
	// created_at > Now - window: still a replay 1ms before the window ends.
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Hour, "att", at(attemptWindow-time.Millisecond)), first)
	// At the end of the window the id is a fresh receive.
	fresh := e.receiveAttempt(f.Q, 10, time.Hour, "att", at(attemptWindow))
	wantIDs(e.t, fresh, "b1")
	// ... which records itself under the id again.
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Hour, "att", at(attemptWindow+time.Second)), fresh)
	// A shorter window given by the caller applies.
	e.pub(f, at(attemptWindow+2*time.Second), "c", "c1")
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Hour, AttemptID: "att", AttemptWindow: time.Second, Now: at(attemptWindow + 2*time.Second)})
	wantIDs(e.t, r.Deliveries, "c1")
}

func testAttemptEmpty(e *env) {
	f := e.fixture(5)
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Minute, "att", T0))
	e.pub(f, at(time.Second), "a", "a1")
	first := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(2*time.Second))
	wantIDs(e.t, first, "a1")
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Minute, "att", at(3*time.Second)), first)
}

func testAttemptPerQueue(e *env) {
	f := e.fixture(5)
	q2 := e.consumer(f.WS, 5, "som.>")
	e.pub(f, T0, "a", "a1")
	d1 := e.receiveAttempt(f.Q, 10, time.Minute, "same", at(time.Second))
	wantIDs(e.t, d1, "a1")
	d2 := e.receiveAttempt(q2, 10, time.Minute, "same", at(time.Second))
	wantIDs(e.t, d2, "a1")
	if d2[0].Handle.QueueID != q2 {
		e.t.Errorf("q2's receive got handle %+v", d2[0].Handle)
	}
	wantSameDeliveries(e, e.receiveAttempt(q2, 10, time.Minute, "same", at(2*time.Second)), d2)
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Minute, "same", at(2*time.Second)), d1)
}

// testAttemptReplayedFlag: ReceiveResult.Replayed is true exactly when an
// attempt record was found and replayed, even when nothing of it is still
// in flight.
func testAttemptReplayedFlag(e *env) {
	f := e.fixture(5)
	recv := func(attempt string, window time.Duration, now time.Time) *bus.ReceiveResult {
		e.t.Helper()
		return e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, AttemptID: attempt, AttemptWindow: window, Now: now})
	}
	want := func(what string, r *bus.ReceiveResult, replayed bool) {
		e.t.Helper()
		if r.Replayed != replayed {
			e.t.Errorf("%s: Replayed = %v, want %v", what, r.Replayed, replayed)
		}
	}
	want("empty receive with an attempt id", recv("att", attemptWindow, T0), false)
	want("empty receive with the same id again (nothing was recorded)", recv("att", attemptWindow, T0), false)
	e.pub(f, T0, "a", "a1")
	r := recv("att", attemptWindow, at(time.Second))
	wantIDs(e.t, r.Deliveries, "a1")
	want("fresh receive that took a1", r, false)
	r = recv("att", attemptWindow, at(2*time.Second))
	wantIDs(e.t, r.Deliveries, "a1")
	want("replay", r, true)
	e.ackOK(f.Q, at(3*time.Second), r.Deliveries[0].Handle)
	r = recv("att", attemptWindow, at(4*time.Second))
	wantIDs(e.t, r.Deliveries)
	want("replay with nothing in flight", r, true)
	r = recv("", attemptWindow, at(5*time.Second))
	want("receive without an attempt id", r, false)
	r = recv("att", attemptWindow, at(time.Second+attemptWindow))
	want("receive after the attempt window", r, false)
}

// testAttemptDelayedRelease: a delivery released with a delay is no longer
// in flight (its receiver let it go), so a retry of its attempt does not
// return it, even before the delay ran out, and it stays delayed.
func testAttemptDelayedRelease(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	e.pub(f, T0, "b", "b1")
	first := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(time.Second))
	wantIDs(e.t, first, "a1", "b1")
	e.nackOK(f.Q, time.Minute, at(2*time.Second), first[0].Handle)
	again := e.receiveAttempt(f.Q, 10, time.Minute, "att", at(3*time.Second))
	wantSameDeliveries(e, again, first[1:])
	e.wantStats(f.Q, at(3*time.Second), bus.QueueStats{InFlight: 1, Delayed: 1})
}
