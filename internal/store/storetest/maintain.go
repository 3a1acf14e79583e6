package storetest

import (
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var maintainTests = []test{
	{"Retention", testRetention},
	{"DeadLetterRetention", testDLRetention},
	{"AttemptRecordsExpire", testMaintainAttempts},
	{"DedupRecordsExpire", testMaintainDedup},
	{"AckRecordsExpire", testMaintainAckRecords},
	{"ZeroDurationsTurnPartsOff", testMaintainZero},
	{"NothingToDo", func(e *env) {
		f := e.fixture(5)
		e.pub(f, T0, "a", "a1")
		r := e.maintain(longWindows(at(time.Second)))
		if r.DeadLettered != 0 || r.Expired != 0 || len(r.Woken) != 0 {
			e.t.Errorf("Maintain with nothing to do = %+v", r)
		}
		wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(time.Second)), "a1")
	}},
}

func testRetention(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "b", "b1")
	e.pub(f, T0, "a", "a1")
	b1 := e.receiveOne(f.Q, 2*time.Hour, at(time.Minute), "b1") // in flight past the cutoff
	e.pub(f, at(30*time.Minute), "a", "a2")
	e.pub(f, at(40*time.Minute), "a", "a3")
	e.pub(f, at(50*time.Minute), "c", "c1")
	p := longWindows(at(90*time.Minute - time.Millisecond))
	p.Retention = time.Hour
	if r := e.maintain(p); r.Expired != 2 {
		e.t.Errorf("Maintain just before a2's retention ran out: Expired = %d, want 2 (a1, b1)", r.Expired)
	}
	e.pub(f, at(90*time.Minute), "d", "d1")
	// Cutoff at 90m: enqueued_at <= 30m, so a2 too.
	p.Now = at(90 * time.Minute)
	r := e.maintain(p)
	if r.Expired != 1 {
		e.t.Errorf("Maintain Expired = %d, want 1 (a2)", r.Expired)
	}
	if !contains(r.Woken, f.Q) {
		e.t.Errorf("Maintain Woken = %q, want the queue whose story advanced", r.Woken)
	}
	e.wantStats(f.Q, at(90*time.Minute), bus.QueueStats{Ready: 3, OldestReadyAgeSeconds: 50 * 60})
	// a3 is story a's head, visible since its enqueued_at.
	ds := e.receive(f.Q, 10, time.Hour, at(90*time.Minute))
	wantIDs(e.t, ds, "a3", "c1", "d1")
	for _, d := range ds {
		if d.ReceiveCount != 1 {
			e.t.Errorf("%s ReceiveCount = %d, want 1", d.MessageID, d.ReceiveCount)
		}
	}
	wantSettle(e.t, "ack of a dropped message", e.ack(f.Q, at(90*time.Minute), b1.Handle), false)
	// Story b is gone: a new message starts it again.
	e.pub(f, at(91*time.Minute), "b", "b2")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(91*time.Minute)), "b2")
}

func testDLRetention(e *env) {
	f := e.fixture(1)
	e.deadLetter(f, at(time.Minute), msg("m1", "a"))
	e.deadLetter(f, at(2*time.Minute), msg("m2", "b"))
	p := longWindows(at(61*time.Minute - time.Millisecond))
	p.DeadLetterRetention = time.Hour
	e.maintain(p)
	if dl := dlIDs(e.allDeadLetters(f.Q)); len(dl) != 2 {
		e.t.Errorf("dead letters before their retention ran out = %q, want m1, m2", dl)
	}
	p.Now = at(61 * time.Minute) // dead_lettered_at <= Now - retention
	e.maintain(p)
	if dl := dlIDs(e.allDeadLetters(f.Q)); len(dl) != 1 || dl[0] != "m2" {
		e.t.Errorf("dead letters after m1's retention ran out = %q, want m2", dl)
	}
	e.wantStats(f.Q, at(61*time.Minute), bus.QueueStats{DeadLetters: 1})
}

func testMaintainAttempts(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	first := e.receiveAttempt(f.Q, 10, time.Hour, "att", T0)
	wantIDs(e.t, first, "a1")
	e.pub(f, T0, "b", "b1")
	e.maintain(longWindows(at(2 * time.Minute)))
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Hour, "att", at(2*time.Minute)), first)
	p := longWindows(at(2 * time.Minute))
	p.AttemptWindow = time.Minute
	e.maintain(p)
	// The record is gone although the receive's own window (5m) has not run out.
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Hour, "att", at(3*time.Minute)), "b1")
}

func testMaintainDedup(e *env) {
	f := e.fixture(5)
	e.publish(f.WS, f.P, T0, msg("m1", "s"))
	e.maintain(longWindows(at(2 * time.Minute)))
	out := e.publish(f.WS, f.P, at(2*time.Minute), msg("m1", "s"))
	wantOutcome(e, "publish after a Maintain with a long dedup window", out[0], true, 1)
	p := longWindows(at(3 * time.Minute))
	p.DedupWindow = time.Minute
	e.maintain(p)
	out = e.publish(f.WS, f.P, at(4*time.Minute), msg("m1", "s"))
	wantOutcome(e, "publish after the dedup record expired", out[0], false, 1, f.Q)
}

func testMaintainAckRecords(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	d := e.receiveOne(f.Q, time.Minute, T0, "a1")
	e.ackOK(f.Q, T0, d.Handle)
	e.maintain(longWindows(at(2 * time.Minute)))
	e.ackOK(f.Q, at(2*time.Minute), d.Handle)
	p := longWindows(at(3 * time.Minute))
	p.AckRecordWindow = time.Minute
	e.maintain(p)
	wantSettle(e.t, "re-ack after the ack record expired", e.ack(f.Q, at(4*time.Minute), d.Handle), false)
}

// testMaintainZero: a zero duration in MaintainParams turns its part off
// (bus.MaintainParams); it never means "expire everything".
func testMaintainZero(e *env) {
	f := e.fixture(1)
	e.deadLetter(f, T0, msg("dead", "d"))
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, T0, "a1")
	e.ackOK(f.Q, T0, d.Handle)
	att := e.receiveAttempt(f.Q, 10, time.Hour, "att", T0)
	wantIDs(e.t, att, "a2")
	e.pub(f, T0, "b", "b1")
	r := e.maintain(bus.MaintainParams{Now: at(time.Minute)})
	if r.Expired != 0 || r.DeadLettered != 0 {
		e.t.Errorf("Maintain with zero durations = %+v, want nothing done", r)
	}
	e.wantStats(f.Q, at(time.Minute), bus.QueueStats{Ready: 1, InFlight: 1, DeadLetters: 1, OldestReadyAgeSeconds: 60})
	wantSameDeliveries(e, e.receiveAttempt(f.Q, 10, time.Hour, "att", at(time.Minute)), att)
	e.ackOK(f.Q, at(time.Minute), d.Handle)
	out := e.publish(f.WS, f.P, at(time.Minute), msg("b1", "b"))
	wantOutcome(e, "publish after a Maintain with zero windows", out[0], true, 1)
}
