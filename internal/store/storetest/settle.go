package storetest

import (
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var ackTests = []test{
	{"OK", testAckOK},
	{"Idempotent", testAckIdempotent},
	{"StaleHandleAfterRedelivery", testAckStale},
	{"ForeignQueue", testAckForeign},
	{"AfterVisibilityExpired", testAckAfterExpiry},
	{"AdvancesStory", testAckAdvances},
	{"UnknownHandles", testAckUnknown},
	{"ResultsInOrder", testAckMixed},
	{"AfterNack", testAckAfterNack},
}

var nackTests = []test{
	{"DelayZero", testNackZero},
	{"Delay", testNackDelay},
	{"KeepsNonce", testNackKeepsNonce},
	{"AfterAckFails", testNackAfterAck},
	{"StaleAndForeign", testNackStaleForeign},
	{"DoesNotCountDelivery", testNackNoCount},
}

func testAckOK(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	r := e.ack(f.Q, at(2*time.Second), d.Handle)
	wantSettle(e.t, "ack", r, true)
	if r[0].Woken {
		e.t.Errorf("ack of a story's last message: Woken = true")
	}
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{})
	// Gone for good: not delivered again after its visibility would have run out.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(time.Hour)))
}

func testAckIdempotent(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.ackOK(f.Q, at(2*time.Second), d.Handle)
	e.ackOK(f.Q, at(3*time.Second), d.Handle)
	// Still OK after the story moved on and its next message was received.
	a2 := e.receiveOne(f.Q, time.Minute, at(4*time.Second), "a2")
	e.ackOK(f.Q, at(5*time.Second), d.Handle)
	// ... and the re-ack did not touch a2.
	e.wantStats(f.Q, at(5*time.Second), bus.QueueStats{InFlight: 1})
	e.ackOK(f.Q, at(6*time.Second), a2.Handle)
	e.ackOK(f.Q, at(7*time.Second), d.Handle, a2.Handle)
	// A re-ack with another nonce is not the same delivery.
	other := d.Handle
	other.Nonce++
	wantSettle(e.t, "re-ack with another nonce", e.ack(f.Q, at(8*time.Second), other), false)
}

func testAckStale(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	h1 := e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1").Handle
	h2 := e.receiveOne(f.Q, 10*time.Second, at(11*time.Second), "a1").Handle
	wantFailure(e.t, "ack with the first delivery's handle", e.ack(f.Q, at(12*time.Second), h1), bus.MsgHandleReceivedAgain)
	// The failed ack did not remove the message.
	e.wantStats(f.Q, at(12*time.Second), bus.QueueStats{Ready: 1, InFlight: 1, OldestReadyAgeSeconds: 12})
	e.ackOK(f.Q, at(13*time.Second), h2)
	// After the latest delivery's ack, the stale one still fails.
	wantFailure(e.t, "stale handle after the ack", e.ack(f.Q, at(14*time.Second), h1), bus.MsgHandleNotInFlight)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(15*time.Second)), "a2")
}

func testAckForeign(e *env) {
	f := e.fixture(5)
	q2 := e.consumer(f.WS, 5, "som.>")
	e.pub(f, T0, "a", "a1")
	d1 := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	d2 := e.receiveOne(q2, time.Minute, at(time.Second), "a1")
	// A handle of q1 presented on q2.
	wantFailure(e.t, "ack of another queue's handle", e.ack(q2, at(2*time.Second), d1.Handle), bus.MsgHandleOtherQueue)
	wantFailure(e.t, "nack of another queue's handle", e.nack(q2, 0, at(2*time.Second), d1.Handle), bus.MsgHandleOtherQueue)
	// A handle relabelled with q2 but addressing q1's story.
	relabelled := d1.Handle
	relabelled.QueueID = q2
	wantFailure(e.t, "ack of q1's story through q2", e.ack(q2, at(2*time.Second), relabelled), bus.MsgHandleNotInFlight)
	// Both messages are still there and in flight.
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{InFlight: 1})
	e.wantStats(q2, at(2*time.Second), bus.QueueStats{InFlight: 1})
	e.ackOK(f.Q, at(3*time.Second), d1.Handle)
	e.ackOK(q2, at(3*time.Second), d2.Handle)
	// A q1 ack record is no proof on q2.
	wantFailure(e.t, "re-ack of q1's handle on q2", e.ack(q2, at(4*time.Second), d1.Handle), bus.MsgHandleOtherQueue)
}

func testAckAfterExpiry(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1")
	// Visibility ran out at 11s; nobody received it since.
	r := e.ack(f.Q, at(time.Minute), d.Handle)
	wantSettle(e.t, "ack after the visibility ran out", r, true)
	d2 := e.receiveOne(f.Q, time.Minute, at(time.Minute), "a2")
	if d2.ReceiveCount != 1 {
		e.t.Errorf("a2 ReceiveCount = %d, want 1", d2.ReceiveCount)
	}
}

func testAckAdvances(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2", "a3")
	now := at(time.Second)
	for i, id := range []string{"a1", "a2", "a3"} {
		d := e.receiveOne(f.Q, time.Minute, now, id)
		if d.ReceiveCount != 1 {
			e.t.Errorf("%s ReceiveCount = %d, want 1 (the count restarts per message)", id, d.ReceiveCount)
		}
		wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
		r := e.ack(f.Q, now, d.Handle)
		wantSettle(e.t, "ack "+id, r, true)
		if last := i == 2; r[0].Woken == last {
			e.t.Errorf("ack %s: Woken = %v, want %v", id, r[0].Woken, !last)
		}
	}
	e.wantStats(f.Q, now, bus.QueueStats{})
}

func testAckUnknown(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	now := at(2 * time.Second)
	bad := []bus.Handle{
		{QueueID: f.Q, StoryID: d.Handle.StoryID + 1000, Seq: 1, Nonce: d.Handle.Nonce}, // no such story
		{QueueID: f.Q, StoryID: d.Handle.StoryID, Seq: 2, Nonce: d.Handle.Nonce},        // no such seq
		{QueueID: f.Q, StoryID: d.Handle.StoryID, Seq: 1, Nonce: d.Handle.Nonce + 1},    // wrong nonce
		{QueueID: f.Q, StoryID: d.Handle.StoryID, Seq: 1, Nonce: 0},                     // the cleared nonce
		{QueueID: "c-nonexistent", StoryID: d.Handle.StoryID, Seq: 1, Nonce: d.Handle.Nonce},
	}
	wantSettle(e.t, "ack of unknown handles", e.ack(f.Q, now, bad...), false, false, false, false, false)
	wantSettle(e.t, "nack of unknown handles", e.nack(f.Q, 0, now, bad...), false, false, false, false, false)
	e.wantStats(f.Q, now, bus.QueueStats{InFlight: 1})
	e.ackOK(f.Q, now, d.Handle)
}

func testAckMixed(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	e.pub(f, T0, "b", "b1")
	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	bad := ds[0].Handle
	bad.Nonce++
	r := e.ack(f.Q, at(2*time.Second), ds[1].Handle, bad, ds[0].Handle)
	wantSettle(e.t, "ack [b1, bad, a1]", r, true, false, true)
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{})
}

func testAckAfterNack(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1", "b2")
	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	e.nackOK(f.Q, 0, at(2*time.Second), ds[0].Handle)
	e.nackOK(f.Q, time.Hour, at(2*time.Second), ds[1].Handle)
	// The handles still ack until the next receive.
	r := e.ack(f.Q, at(3*time.Second), ds[0].Handle, ds[1].Handle)
	wantSettle(e.t, "ack after nack", r, true, true)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(3*time.Second)), "a2", "b2")
}

func testNackZero(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	r := e.nack(f.Q, 0, at(2*time.Second), d.Handle)
	wantSettle(e.t, "nack", r, true)
	if !r[0].Woken {
		e.t.Errorf("nack with delay 0: Woken = false")
	}
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{Ready: 2, OldestReadyAgeSeconds: 2})
	d2 := e.receiveOne(f.Q, time.Minute, at(2*time.Second), "a1")
	if d2.ReceiveCount != 2 {
		e.t.Errorf("ReceiveCount after nack = %d, want 2", d2.ReceiveCount)
	}
	if d2.Handle.Nonce == d.Handle.Nonce {
		e.t.Errorf("the receive after a nack kept the nonce")
	}
	// The next receive ended the released handle.
	wantSettle(e.t, "ack of the released delivery after a new receive", e.ack(f.Q, at(3*time.Second), d.Handle), false)
	wantSettle(e.t, "nack of the released delivery after a new receive", e.nack(f.Q, 0, at(3*time.Second), d.Handle), false)
}

func testNackDelay(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	r := e.nack(f.Q, 30*time.Second, at(2*time.Second), d.Handle)
	wantSettle(e.t, "nack with delay", r, true)
	if r[0].Woken {
		e.t.Errorf("nack with a delay: Woken = true")
	}
	e.wantStats(f.Q, at(3*time.Second), bus.QueueStats{Ready: 2, Delayed: 1, OldestReadyAgeSeconds: 3})
	// The story stays locked during the delay: a2 is not delivered either.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(3*time.Second)), "b1")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(32*time.Second-time.Millisecond)))
	d2 := e.receiveOne(f.Q, time.Minute, at(32*time.Second), "a1")
	if d2.ReceiveCount != 2 {
		e.t.Errorf("ReceiveCount after delayed nack = %d, want 2", d2.ReceiveCount)
	}
	// Received again: in flight, no longer delayed.
	e.wantStats(f.Q, at(33*time.Second), bus.QueueStats{Ready: 1, InFlight: 2, OldestReadyAgeSeconds: 33})
}

func testNackKeepsNonce(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.nackOK(f.Q, time.Minute, at(2*time.Second), d.Handle)
	e.nackOK(f.Q, 0, at(3*time.Second), d.Handle) // a second nack shortens the delay
	e.nackOK(f.Q, 10*time.Second, at(4*time.Second), d.Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(5*time.Second)))
	r := e.ack(f.Q, at(6*time.Second), d.Handle)
	wantSettle(e.t, "ack after nacks", r, true)
	if !r[0].Woken {
		e.t.Errorf("ack that advanced the story: Woken = false")
	}
	d2 := e.receiveOne(f.Q, time.Minute, at(6*time.Second), "a2")
	if d2.ReceiveCount != 1 {
		e.t.Errorf("a2 ReceiveCount = %d, want 1", d2.ReceiveCount)
	}
	e.ackOK(f.Q, at(7*time.Second), d.Handle) // idempotent after all that
}

func testNackAfterAck(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.ackOK(f.Q, at(2*time.Second), d.Handle)
	wantFailure(e.t, "nack of an acknowledged message", e.nack(f.Q, 0, at(3*time.Second), d.Handle), bus.MsgHandleNotInFlight)
	// It did not bring a1 back nor disturb a2.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(3*time.Second)), "a2")
}

func testNackStaleForeign(e *env) {
	f := e.fixture(5)
	q2 := e.consumer(f.WS, 5, "som.>")
	e.pub(f, T0, "a", "a1")
	h1 := e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1").Handle
	h2 := e.receiveOne(f.Q, time.Minute, at(11*time.Second), "a1").Handle
	wantFailure(e.t, "nack with a stale handle", e.nack(f.Q, 0, at(12*time.Second), h1), bus.MsgHandleReceivedAgain)
	// The stale nack did not release the message.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(12*time.Second)))
	wantFailure(e.t, "nack on another queue", e.nack(q2, 0, at(12*time.Second), h2), bus.MsgHandleOtherQueue)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(12*time.Second)))
	e.nackOK(f.Q, 0, at(13*time.Second), h2)
}

func testNackNoCount(e *env) {
	f := e.fixture(3)
	e.pub(f, T0, "a", "a1")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	for i := range 5 {
		e.nackOK(f.Q, 0, at(2*time.Second+time.Duration(i)*time.Millisecond), d.Handle)
	}
	d2 := e.receiveOne(f.Q, time.Minute, at(3*time.Second), "a1")
	if d2.ReceiveCount != 2 {
		e.t.Errorf("ReceiveCount after five nacks = %d, want 2", d2.ReceiveCount)
	}
	if n := len(e.allDeadLetters(f.Q)); n != 0 {
		e.t.Errorf("nacks alone dead-lettered the message (%d dead letters)", n)
	}
}
