package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var deadLetterTests = []test{
	{"AttemptLimitFromConnection", testAttemptLimitPerConnection},
	{"AttemptLimitReadEachTime", testAttemptLimitChange},
	{"MoveOnExpiryAtNextReceive", testDLMoveAtReceive},
	{"ExpiredExhaustedHeadStillAcks", testDLExpiredStillAcks},
	{"MoveAtNackWhenExhausted", testDLMoveAtNack},
	{"DeadLetteredHandleFails", testDLHandleFails},
	{"ListPaging", testDLPaging},
	{"Redrive", testRedrive},
	{"RedriveSubset", testRedriveSubset},
	{"RedriveOrderWithinStory", testRedriveOrder},
	{"RedriveBehindInFlightHead", testRedriveBehindInFlight},
	{"MaintainMovesWithoutReceive", testMaintainMoves},
	{"GiveBackUndoesTheClaim", testGiveBack},
	{"MissingQueue", testDLMissingQueue},
}

// testDLMissingQueue: purge, the dead-letter listing and redrive of a
// queue whose connection was removed (by a DELETE that overlapped the
// bus's check that it exists), or never existed, are ErrNotFound and write
// nothing, not even their audit entry.
func testDLMissingQueue(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "s1", "m1")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "m1")
	e.nackOK(f.Q, 0, at(time.Second), d.Handle) // attempt limit 1: a dead letter now
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(f.Q) })
	audits := len(e.auditIDs(f.WS))
	now := at(2 * time.Second)
	for _, q := range []string{f.Q, bus.NewID(bus.PrefixConnection)} {
		_, err := e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: q, Now: now, Audit: auditEntry(f.WS, "queue.purge", now)})
		e.wantErr("QueuePurge of a missing queue", err, bus.ErrNotFound)
		_, err = e.s.DeadLetterList(e.ctx, q, 10, 0)
		e.wantErr("DeadLetterList of a missing queue", err, bus.ErrNotFound)
		_, err = e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: q, Now: now, Audit: auditEntry(f.WS, "dead_letters.redrive", now)})
		e.wantErr("DeadLetterRedrive of a missing queue", err, bus.ErrNotFound)
		_, err = e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: q, MessageIDs: []string{"m1"}, Now: now, Audit: auditEntry(f.WS, "dead_letters.redrive", now)})
		e.wantErr("DeadLetterRedrive of named ids of a missing queue", err, bus.ErrNotFound)
	}
	if n := len(e.auditIDs(f.WS)); n != audits {
		e.t.Errorf("%d audit entries after the refused calls, want %d (none written)", n, audits)
	}
}

// wantDL checks a dead letter against what was published.
func wantDL(e *env, dl bus.DeadLetter, id, corr, producer string, count int, enqueued, deadAt time.Time) {
	e.t.Helper()
	if dl.MessageID != id || dl.CorrelationID != corr || dl.MessageType != "story.context" || dl.Topic != "som.story.context" || dl.ProducerID != producer {
		e.t.Errorf("dead letter %+v, want message %q of story %q from %q", dl, id, corr, producer)
	}
	if dl.ReceiveCount != count {
		e.t.Errorf("dead letter %s ReceiveCount = %d, want %d", id, dl.ReceiveCount, count)
	}
	sameTime(e.t, "DeadLetter.EnqueuedAt", dl.EnqueuedAt, enqueued)
	sameTime(e.t, "DeadLetter.DeadLetteredAt", dl.DeadLetteredAt, deadAt)
	if !bytes.Equal(dl.Envelope, envelope(id, "story.context", corr)) {
		e.t.Errorf("dead letter envelope %q, want the accepted bytes", dl.Envelope)
	}
	if dl.ID <= 0 {
		e.t.Errorf("dead letter id %d, want positive", dl.ID)
	}
}

func testAttemptLimitPerConnection(e *env) {
	f := e.fixture(1)
	q3 := e.consumer(f.WS, 3, "som.>")
	e.pub(f, T0, "a", "a1")
	for _, q := range []string{f.Q, q3} {
		e.receiveOne(q, 10*time.Second, at(time.Second), "a1")
	}
	// Visible again at 11s: q1 (limit 1) moves it, q3 (limit 3) delivers it.
	wantIDs(e.t, e.receive(f.Q, 10, 10*time.Second, at(11*time.Second)))
	dl := e.allDeadLetters(f.Q)
	if len(dl) != 1 {
		e.t.Fatalf("limit 1: %d dead letters, want 1", len(dl))
	}
	wantDL(e, dl[0], "a1", "a", f.P, 1, T0, at(11*time.Second))
	if d := e.receiveOne(q3, 10*time.Second, at(11*time.Second), "a1"); d.ReceiveCount != 2 {
		e.t.Errorf("limit 3: ReceiveCount = %d, want 2", d.ReceiveCount)
	}
	if d := e.receiveOne(q3, 10*time.Second, at(21*time.Second), "a1"); d.ReceiveCount != 3 {
		e.t.Errorf("limit 3: ReceiveCount = %d, want 3", d.ReceiveCount)
	}
	wantIDs(e.t, e.receive(q3, 10, 10*time.Second, at(31*time.Second)))
	if dl := e.allDeadLetters(q3); len(dl) != 1 || dl[0].ReceiveCount != 3 {
		e.t.Errorf("limit 3: dead letters %+v, want a1 with receive count 3", dl)
	}
	e.wantStats(q3, at(31*time.Second), bus.QueueStats{DeadLetters: 1})
	e.wantStats(f.Q, at(31*time.Second), bus.QueueStats{DeadLetters: 1})
}

func testAttemptLimitChange(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1")
	e.receiveOne(f.Q, 10*time.Second, at(11*time.Second), "a1")
	e.setAttemptLimit(f.Q, 2)
	wantIDs(e.t, e.receive(f.Q, 10, 10*time.Second, at(21*time.Second)))
	if dl := e.allDeadLetters(f.Q); len(dl) != 1 {
		e.t.Errorf("after lowering the attempt limit to 2: %d dead letters, want 1", len(dl))
	}
	// Raising it lets a message go on.
	e.pub(f, at(30*time.Second), "b", "b1")
	e.receiveOne(f.Q, 10*time.Second, at(30*time.Second), "b1")
	e.receiveOne(f.Q, 10*time.Second, at(40*time.Second), "b1")
	e.setAttemptLimit(f.Q, 4)
	if d := e.receiveOne(f.Q, 10*time.Second, at(50*time.Second), "b1"); d.ReceiveCount != 3 {
		e.t.Errorf("after raising the limit: ReceiveCount = %d, want 3", d.ReceiveCount)
	}
}

func testDLMoveAtReceive(e *env) {
	f := e.fixture(2)
	e.pub(f, T0, "a", "a1", "a2")
	e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1")
	e.receiveOne(f.Q, 10*time.Second, at(11*time.Second), "a1") // count 2, visible at 21s
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(21*time.Second - time.Millisecond)})
	wantIDs(e.t, r.Deliveries)
	if dl := e.allDeadLetters(f.Q); len(dl) != 0 {
		e.t.Fatalf("moved to the dead letters before its visibility ran out: %q", dlIDs(dl))
	}
	// The story moves on in the same receive: a2 is returned at once.
	r = e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(21 * time.Second)})
	wantIDs(e.t, r.Deliveries, "a2")
	if r.Deliveries[0].ReceiveCount != 1 {
		e.t.Errorf("a2 ReceiveCount = %d, want 1", r.Deliveries[0].ReceiveCount)
	}
	if !contains(r.Woken, f.Q) {
		e.t.Errorf("Woken = %q, want the queue whose story advanced", r.Woken)
	}
	dl := e.allDeadLetters(f.Q)
	if len(dl) != 1 {
		e.t.Fatalf("%d dead letters, want 1", len(dl))
	}
	wantDL(e, dl[0], "a1", "a", f.P, 2, T0, at(21*time.Second))
	e.wantStats(f.Q, at(22*time.Second), bus.QueueStats{InFlight: 1, DeadLetters: 1})
	// Never delivered again.
	e.ackOK(f.Q, at(23*time.Second), r.Deliveries[0].Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(time.Hour)))
}

func testDLExpiredStillAcks(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1")
	d := e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1")
	// Visibility ran out and the limit is reached, but nothing moved it yet.
	e.ackOK(f.Q, at(time.Minute), d.Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(2*time.Minute)))
	if dl := e.allDeadLetters(f.Q); len(dl) != 0 {
		e.t.Errorf("acknowledged message dead-lettered: %q", dlIDs(dl))
	}
}

func testDLMoveAtNack(e *env) {
	f := e.fixture(2)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.nackOK(f.Q, 0, at(2*time.Second), d.Handle) // count 1 < 2: released
	if n := len(e.allDeadLetters(f.Q)); n != 0 {
		e.t.Fatalf("nack below the limit dead-lettered (%d)", n)
	}
	d = e.receiveOne(f.Q, time.Minute, at(3*time.Second), "a1") // count 2
	// Exhausted: moved now, whatever the delay.
	e.nackOK(f.Q, time.Hour, at(4*time.Second), d.Handle)
	dl := e.allDeadLetters(f.Q)
	if len(dl) != 1 {
		e.t.Fatalf("%d dead letters after exhausted nack, want 1", len(dl))
	}
	wantDL(e, dl[0], "a1", "a", f.P, 2, T0, at(4*time.Second))
	// The story moved on at once, despite the delay.
	if d2 := e.receiveOne(f.Q, time.Minute, at(4*time.Second), "a2"); d2.ReceiveCount != 1 {
		e.t.Errorf("a2 ReceiveCount = %d, want 1", d2.ReceiveCount)
	}
	wantSettle(e.t, "nack of the dead-lettered delivery", e.nack(f.Q, 0, at(5*time.Second), d.Handle), false)
}

func testDLHandleFails(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1", "a2")
	d := e.receiveOne(f.Q, 10*time.Second, at(time.Second), "a1")
	d2 := e.receiveOne(f.Q, time.Minute, at(11*time.Second), "a2") // a1 moved first
	if n := len(e.allDeadLetters(f.Q)); n != 1 {
		e.t.Fatalf("%d dead letters, want 1", n)
	}
	wantSettle(e.t, "ack of a dead-lettered message", e.ack(f.Q, at(12*time.Second), d.Handle), false)
	wantSettle(e.t, "nack of a dead-lettered message", e.nack(f.Q, 0, at(12*time.Second), d.Handle), false)
	e.wantStats(f.Q, at(12*time.Second), bus.QueueStats{InFlight: 1, DeadLetters: 1})
	e.ackOK(f.Q, at(13*time.Second), d2.Handle)
}

// deadLetter publishes messages (one story each) to a limit-1 queue,
// receives them and nacks them into the dead letters, in order.
func (e *env) deadLetter(f fixture, now time.Time, msgs ...bus.PublishMessage) {
	e.t.Helper()
	for _, m := range msgs {
		e.publish(f.WS, f.P, now, m)
		ds := e.receive(f.Q, 1, time.Minute, now)
		wantIDs(e.t, ds, m.MessageID)
		e.nackOK(f.Q, 0, now, ds[0].Handle)
	}
}

func testDLPaging(e *env) {
	f := e.fixture(1)
	other := e.consumer(f.WS, 1, "som.nothing")
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("m%d", i)
		e.deadLetter(f, at(time.Duration(i)*time.Second), msg(id, fmt.Sprintf("s%d", 4-i)))
		want = append(want, id)
	}
	var got []string
	var last int64
	for page := 0; page < 10; page++ {
		dl := e.deadLetters(f.Q, 2, last)
		if len(dl) > 2 {
			e.t.Fatalf("DeadLetterList(limit 2) = %d", len(dl))
		}
		if len(dl) == 0 {
			break
		}
		for _, d := range dl {
			if d.ID <= last {
				e.t.Errorf("dead letter id %d not after %d", d.ID, last)
			}
			last = d.ID
			got = append(got, d.MessageID)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("dead letters paged %q, want %q", got, want)
	}
	all := e.allDeadLetters(f.Q)
	if len(all) == 5 {
		if mid := e.deadLetters(f.Q, 10, all[2].ID); !slices.Equal(dlIDs(mid), want[3:]) {
			e.t.Errorf("DeadLetterList(after the third) = %q, want %q", dlIDs(mid), want[3:])
		}
	}
	if dl := e.allDeadLetters(other); len(dl) != 0 {
		e.t.Errorf("another queue lists %d dead letters", len(dl))
	}
}

func testRedrive(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, at(time.Millisecond), "b", "b1")
	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	e.nackOK(f.Q, 0, at(2*time.Second), ds[0].Handle, ds[1].Handle) // both dead
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{Ready: 1, DeadLetters: 2, OldestReadyAgeSeconds: 2})
	a2 := e.receiveOne(f.Q, time.Minute, at(3*time.Second), "a2")
	e.ackOK(f.Q, at(3*time.Second), a2.Handle) // story a is now empty and gone
	e.pub(f, at(4*time.Second), "b", "b2")     // story b: b2

	audit := auditEntry(f.WS, "queue.redrive", at(5*time.Second))
	n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, Now: at(5 * time.Second), Audit: audit})
	if err != nil {
		e.t.Fatalf("DeadLetterRedrive: %v", err)
	}
	if n != 2 {
		e.t.Errorf("DeadLetterRedrive = %d, want 2", n)
	}
	if dl := e.allDeadLetters(f.Q); len(dl) != 0 {
		e.t.Errorf("dead letters after redrive: %q", dlIDs(dl))
	}
	if !contains(e.auditIDs(f.WS), audit.ID) {
		e.t.Errorf("redrive audit entry not written")
	}
	e.wantStats(f.Q, at(5*time.Second), bus.QueueStats{Ready: 3, OldestReadyAgeSeconds: 5})
	// a1 starts story a again; b1 goes behind b2, the end of story b.
	now := at(6 * time.Second)
	got := map[string]bus.Delivery{}
	var order []string
	for range 10 {
		ds := e.receive(f.Q, 10, time.Minute, now)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			got[d.MessageID] = d
			order = append(order, d.MessageID)
			e.ackOK(f.Q, now, d.Handle)
		}
	}
	if len(order) != 3 || slices.Index(order, "b2") > slices.Index(order, "b1") || !contains(order, "a1") {
		e.t.Errorf("delivered after redrive %q, want a1, and b2 before b1", order)
	}
	for id, d := range got {
		if d.ReceiveCount != 1 {
			e.t.Errorf("%s ReceiveCount after redrive = %d, want 1", id, d.ReceiveCount)
		}
	}
	sameTime(e.t, "a1 EnqueuedAt after redrive", got["a1"].EnqueuedAt, T0)
	sameTime(e.t, "b1 EnqueuedAt after redrive", got["b1"].EnqueuedAt, at(time.Millisecond))
	if !bytes.Equal(got["b1"].Envelope, envelope("b1", "story.context", "b")) || got["b1"].ProducerID != f.P || got["b1"].Topic != "som.story.context" {
		e.t.Errorf("redriven b1 lost fields: %+v", got["b1"])
	}
	// Nothing left to redrive.
	if n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, Now: now, Audit: auditEntry(f.WS, "queue.redrive", now)}); err != nil || n != 0 {
		e.t.Errorf("redrive of an empty dead-letter queue = %d, %v", n, err)
	}
}

func testRedriveSubset(e *env) {
	f := e.fixture(1)
	for i := range 4 {
		e.deadLetter(f, at(time.Duration(i)*time.Second), msg(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i)))
	}
	now := at(10 * time.Second)
	n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, MessageIDs: []string{"m2", "unknown", "m0"}, Now: now, Audit: auditEntry(f.WS, "queue.redrive", now)})
	if err != nil {
		e.t.Fatalf("DeadLetterRedrive: %v", err)
	}
	if n != 2 {
		e.t.Errorf("DeadLetterRedrive(m2, unknown, m0) = %d, want 2", n)
	}
	if dl := dlIDs(e.allDeadLetters(f.Q)); !slices.Equal(dl, []string{"m1", "m3"}) {
		e.t.Errorf("dead letters after a partial redrive = %q, want m1, m3", dl)
	}
	wantIDSet(e.t, e.receive(f.Q, 10, time.Minute, now), "m0", "m2")
	// Ids of another queue's dead letters are not taken.
	q2 := e.consumer(f.WS, 1, "som.>")
	n, err = e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: q2, MessageIDs: []string{"m1"}, Now: now, Audit: auditEntry(f.WS, "queue.redrive", now)})
	if err != nil || n != 0 {
		e.t.Errorf("redrive of another queue's dead letter = %d, %v; want 0", n, err)
	}
	if dl := dlIDs(e.allDeadLetters(f.Q)); !slices.Equal(dl, []string{"m1", "m3"}) {
		e.t.Errorf("dead letters after a redrive on another queue = %q, want m1, m3", dl)
	}
}

func testRedriveOrder(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "s", "x1", "x2", "x3")
	now := at(time.Second)
	for _, id := range []string{"x1", "x2"} {
		d := e.receiveOne(f.Q, time.Minute, now, id)
		e.nackOK(f.Q, 0, now, d.Handle)
	}
	// Story s holds x3; dead letters x1, x2 (in that order). Redrive all:
	// they go behind x3 in dead-letter order.
	n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, MessageIDs: []string{"x2", "x1"}, Now: now, Audit: auditEntry(f.WS, "queue.redrive", now)})
	if err != nil || n != 2 {
		e.t.Fatalf("DeadLetterRedrive = %d, %v; want 2", n, err)
	}
	var got []string
	for range 5 {
		ds := e.receive(f.Q, 10, time.Minute, now)
		if len(ds) == 0 {
			break
		}
		if len(ds) > 1 {
			e.t.Fatalf("two messages of one story in one receive: %q", ids(ds))
		}
		got = append(got, ds[0].MessageID)
		e.ackOK(f.Q, now, ds[0].Handle)
	}
	if !slices.Equal(got, []string{"x3", "x1", "x2"}) {
		e.t.Errorf("order after redrive %q, want x3, x1, x2", got)
	}
}

func testRedriveBehindInFlight(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "s", "x1", "x2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "x1")
	e.nackOK(f.Q, 0, at(time.Second), d.Handle)
	x2 := e.receiveOne(f.Q, time.Minute, at(2*time.Second), "x2")
	now := at(3 * time.Second)
	if n, err := e.s.DeadLetterRedrive(e.ctx, &bus.RedriveParams{QueueID: f.Q, Now: now, Audit: auditEntry(f.WS, "queue.redrive", now)}); err != nil || n != 1 {
		e.t.Fatalf("DeadLetterRedrive = %d, %v; want 1", n, err)
	}
	// x2 is still in flight: x1 waits behind it, and x2's handle still works.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
	e.wantStats(f.Q, now, bus.QueueStats{Ready: 1, InFlight: 1, OldestReadyAgeSeconds: 3})
	e.ackOK(f.Q, now, x2.Handle)
	d = e.receiveOne(f.Q, time.Minute, now, "x1")
	if d.ReceiveCount != 1 {
		e.t.Errorf("redriven x1 ReceiveCount = %d, want 1", d.ReceiveCount)
	}
}

func testMaintainMoves(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1")
	ds := e.receive(f.Q, 10, 10*time.Second, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	// Before the visibility ran out nothing moves.
	r := e.maintain(longWindows(at(11*time.Second - time.Millisecond)))
	if r.DeadLettered != 0 || len(e.allDeadLetters(f.Q)) != 0 {
		e.t.Errorf("Maintain before expiry dead-lettered %d", r.DeadLettered)
	}
	r = e.maintain(longWindows(at(11 * time.Second)))
	if r.DeadLettered != 2 {
		e.t.Errorf("Maintain DeadLettered = %d, want 2", r.DeadLettered)
	}
	if !contains(r.Woken, f.Q) {
		e.t.Errorf("Maintain Woken = %q, want the queue whose story advanced", r.Woken)
	}
	dl := e.allDeadLetters(f.Q)
	if len(dl) != 2 {
		e.t.Fatalf("dead letters after Maintain = %q", dlIDs(dl))
	}
	slices.SortFunc(dl, func(x, y bus.DeadLetter) int { return strings.Compare(x.MessageID, y.MessageID) })
	wantDL(e, dl[0], "a1", "a", f.P, 1, T0, at(11*time.Second))
	wantDL(e, dl[1], "b1", "b", f.P, 1, T0, at(11*time.Second))
	e.wantStats(f.Q, at(12*time.Second), bus.QueueStats{Ready: 1, DeadLetters: 2, OldestReadyAgeSeconds: 12})
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(12*time.Second)), "a2")
	// Nothing more to do.
	if r := e.maintain(longWindows(at(13 * time.Second))); r.DeadLettered != 0 {
		e.t.Errorf("second Maintain DeadLettered = %d", r.DeadLettered)
	}
}

// giveBack nacks hs with GiveBack (their answer never reached a receiver)
// and wants each to succeed, ready at once and not dead-lettered.
func (e *env) giveBack(q string, now time.Time, hs ...bus.Handle) {
	e.t.Helper()
	r, err := e.s.MessageNack(e.ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: now, GiveBack: true})
	if err != nil || len(r) != len(hs) {
		e.t.Fatalf("give back: %v, %d results for %d handles", err, len(r), len(hs))
	}
	for i, x := range r {
		if !x.OK || x.DeadLettered || !x.Woken {
			e.t.Errorf("give back of handle %d: %+v, want OK, woken, not dead-lettered", i, x)
		}
	}
}

// testGiveBack: deliveries whose answer never reached a receiver are given
// back: ready at once, their receive count one lower, and never moved to
// the dead letters for it, even at an attempt limit of 1.
func testGiveBack(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1")
	e.pub(f, T0, "b", "b1")
	ds := e.receive(f.Q, 10, 10*time.Second, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	e.giveBack(f.Q, at(2*time.Second), ds[0].Handle, ds[1].Handle)
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{Ready: 2, OldestReadyAgeSeconds: 2})
	if dl := e.allDeadLetters(f.Q); len(dl) != 0 {
		e.t.Fatalf("given back at an attempt limit of 1: %d dead letters, want none", len(dl))
	}
	// The given-back handles no longer settle anything.
	for i, r := range e.ack(f.Q, at(2*time.Second), ds[0].Handle, ds[1].Handle) {
		if r.OK || r.Code != bus.CodeReceiptHandleIsInvalid {
			e.t.Errorf("ack of given-back handle %d: %+v, want ReceiptHandleIsInvalid", i, r)
		}
	}
	if r := e.nack(f.Q, time.Minute, at(2*time.Second), ds[0].Handle); r[0].OK {
		e.t.Errorf("delayed nack of a given-back handle: %+v, want ReceiptHandleIsInvalid", r[0])
	}
	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{Ready: 2, OldestReadyAgeSeconds: 2})
	ds = e.receive(f.Q, 10, 10*time.Second, at(3*time.Second))
	wantIDs(e.t, ds, "a1", "b1")
	for _, d := range ds {
		if d.ReceiveCount != 1 {
			e.t.Errorf("%s received after its give-back: ReceiveCount = %d, want 1", d.MessageID, d.ReceiveCount)
		}
	}
	// The attempt limit still holds for real deliveries: released, the
	// first delivery's message moves to the dead letters.
	if r := e.nack(f.Q, 0, at(4*time.Second), ds[0].Handle); !r[0].OK || !r[0].DeadLettered {
		e.t.Errorf("release after a real delivery at limit 1: %+v, want dead-lettered", r[0])
	}

	// At a higher limit, a give-back after a second delivery leaves the
	// count at one: the next delivery is the second.
	q3 := e.consumer(f.WS, 3, "som.>")
	e.pub(f, at(5*time.Second), "c", "c1")
	e.receiveOne(q3, 10*time.Second, at(6*time.Second), "c1")
	d := e.receiveOne(q3, 10*time.Second, at(16*time.Second), "c1")
	if d.ReceiveCount != 2 {
		e.t.Fatalf("c1 second delivery: ReceiveCount = %d, want 2", d.ReceiveCount)
	}
	e.giveBack(q3, at(17*time.Second), d.Handle)
	if d := e.receiveOne(q3, 10*time.Second, at(17*time.Second), "c1"); d.ReceiveCount != 2 {
		e.t.Errorf("c1 after the give-back: ReceiveCount = %d, want 2", d.ReceiveCount)
	}
}
