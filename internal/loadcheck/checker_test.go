package loadcheck

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// dl is a delivery of message seq of story 1 by receive rid, sent at
// sent ms and answered at ans ms, with a 30 s visibility.
func dl(seq int, handle, rid string, rc, sent, ans int) Delivery {
	return Delivery{MessageID: fmt.Sprintf("m-%d", seq), Story: 1, Seq: seq, Handle: handle, ReceiveID: rid,
		ReceiveCount: rc, Sent: at(sent), Answered: at(ans), Visibility: 30 * time.Second}
}

func accept(c *Checker, seqs ...int) {
	for _, s := range seqs {
		c.Accepted(fmt.Sprintf("m-%d", s), 1, s)
	}
}

// want checks the violations by rule after Finish.
func want(t *testing.T, c *Checker, lost, order, resurrected int64) Counts {
	t.Helper()
	counts, ex := c.Finish()
	v := counts.Violations
	if v[RuleLost] != lost || v[RuleOrder] != order || v[RuleResurrected] != resurrected {
		t.Fatalf("violations %v, want LOST %d ORDER %d RESURRECTED %d; %q", v, lost, order, resurrected, ex)
	}
	return counts
}

func TestCheckerInOrderIsClean(t *testing.T) {
	c := NewChecker()
	accept(c, 0, 1, 2)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(12))
	c.Delivered(dl(1, "h1", "r2", 1, 5, 13)) // a long poll sent before the ack, answered after it was sent
	c.SettleSent("h1", at(14))
	c.Acked("h1", at(15))
	c.Delivered(dl(2, "h2", "r3", 1, 16, 17))
	c.SettleSent("h2", at(18))
	c.Acked("h2", at(19))
	counts := want(t, c, 0, 0, 0)
	if counts.Accepted != 3 || counts.Delivered != 3 || counts.Acked != 3 || counts.Duplicates != 0 || !c.Drained() {
		t.Fatalf("counts %+v drained %v", counts, c.Drained())
	}
}

func TestCheckerLost(t *testing.T) {
	c := NewChecker()
	accept(c, 0, 1)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(12))
	if c.Drained() {
		t.Fatal("drained with message 1 never delivered")
	}
	want(t, c, 1, 0, 0)
}

func TestCheckerDeliveredBeforeItsAcceptIsNotLost(t *testing.T) {
	// The consumer may read a message before the publisher reads the 202.
	c := NewChecker()
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(12))
	accept(c, 0)
	if !c.Drained() {
		t.Fatal("not drained")
	}
	want(t, c, 0, 0, 0)
}

func TestCheckerFirstDeliveryOutOfOrder(t *testing.T) {
	c := NewChecker()
	accept(c, 0, 1)
	c.Delivered(dl(1, "h1", "r1", 1, 0, 10))
	c.SettleSent("h1", at(11))
	c.Acked("h1", at(12))
	c.Delivered(dl(0, "h0", "r2", 1, 13, 14))
	want(t, c, 0, 1, 0)
}

func TestCheckerTwoInFlight(t *testing.T) {
	c := NewChecker()
	accept(c, 0, 1)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.Delivered(dl(1, "h1", "r2", 1, 20, 30)) // message 0 neither settled nor timed out
	want(t, c, 0, 1, 0)
}

func TestCheckerTwoInFlightRecordedAfterTheSettle(t *testing.T) {
	// The second receive was answered before the first was even settled,
	// though its receiver recorded it later.
	c := NewChecker()
	accept(c, 0, 1)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(50))
	c.Delivered(dl(1, "h1", "r2", 1, 20, 30))
	want(t, c, 0, 1, 0)
}

func TestCheckerOneReceiveMayHoldConsecutiveMessages(t *testing.T) {
	c := NewChecker()
	accept(c, 0, 1)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.Delivered(dl(1, "h1", "r1", 1, 0, 10))
	want(t, c, 0, 0, 0)
}

func TestCheckerVisibilityRanOut(t *testing.T) {
	// Message 0's visibility ran out unsettled: it comes again (a
	// duplicate, allowed), and the next message after its ack.
	c := NewChecker()
	accept(c, 0, 1)
	d := dl(0, "h0", "r1", 1, 0, 10)
	d.Visibility = 2 * time.Second
	c.Delivered(d)
	c.Delivered(dl(0, "h0b", "r2", 2, 2500, 2510))
	c.SettleSent("h0", at(2600)) // the stale handle
	c.SettleSent("h0b", at(2600))
	c.Acked("h0b", at(2610))
	c.Delivered(dl(1, "h1", "r3", 1, 2620, 2630))
	counts := want(t, c, 0, 0, 0)
	if counts.Duplicates != 1 || counts.Deliveries != 3 {
		t.Fatalf("counts %+v, want 1 duplicate of 3 deliveries", counts)
	}
}

func TestCheckerSameMessageTwiceInFlight(t *testing.T) {
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.Delivered(dl(0, "h0b", "r2", 2, 1000, 1010)) // visibility 30 s not run out
	want(t, c, 0, 1, 0)
}

func TestCheckerRetriedReceiveIsNoDuplicate(t *testing.T) {
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.Delivered(dl(0, "h0", "r1", 1, 0, 20)) // the same delivery, answered again under its attempt id
	counts := want(t, c, 0, 0, 0)
	if counts.Duplicates != 0 || counts.Deliveries != 1 {
		t.Fatalf("counts %+v", counts)
	}
}

func TestCheckerResurrected(t *testing.T) {
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(12))
	c.Delivered(dl(0, "h0b", "r2", 2, 13, 20))
	want(t, c, 0, 0, 1)
}

func TestCheckerResurrectedRecordedBeforeTheAck(t *testing.T) {
	// The redelivery's receiver recorded it before the acker recorded its
	// answer, but the receive was answered after the ack's answer.
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Delivered(dl(0, "h0b", "r2", 2, 13, 20))
	c.Acked("h0", at(15))
	want(t, c, 0, 0, 1)
}

func TestCheckerRedeliveryAnsweredBeforeTheAckIsNoResurrection(t *testing.T) {
	// Message 0's visibility ran out; it was received again, and that
	// receive was answered before the (late) ack of the first delivery
	// was answered OK.
	c := NewChecker()
	accept(c, 0)
	d := dl(0, "h0", "r1", 1, 0, 10)
	d.Visibility = time.Second
	c.Delivered(d)
	c.SettleSent("h0", at(900))
	c.Delivered(dl(0, "h0b", "r2", 2, 1500, 1600))
	c.Acked("h0", at(1700))
	want(t, c, 0, 0, 0)
}

func TestCheckerAckedAgainIsNoResurrection(t *testing.T) {
	// An ack retried after a lost answer is answered OK again; the same
	// handle seen again is the same delivery.
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(30))
	c.Acked("h0", at(40))
	c.Delivered(dl(0, "h0", "r1", 1, 0, 50))
	counts := want(t, c, 0, 0, 0)
	if counts.Deliveries != 1 || counts.Duplicates != 0 {
		t.Fatalf("counts %+v: the same delivery counted twice", counts)
	}
}

func TestCheckerReleasedDeliveryRecordedAgain(t *testing.T) {
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Released("h0")
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	if counts := want(t, c, 0, 0, 0); counts.Deliveries != 1 || counts.Duplicates != 0 {
		t.Fatalf("counts %+v", counts)
	}
}

func TestCheckerResurrectedAfterItWasForgotten(t *testing.T) {
	// Message 0 is acknowledged; a minute later the ack of message 1 makes
	// the checker forget message 0; a delivery of it after that is still
	// a resurrection, and message 1's order still holds.
	c := NewChecker()
	accept(c, 0, 1, 2)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Acked("h0", at(12))
	c.Delivered(dl(1, "h1", "r2", 1, 13, 20))
	c.SettleSent("h1", at(21))
	c.Acked("h1", at(12+int(forgetAfter/time.Millisecond)+1))
	if s := c.stories[1]; s.base != 1 || len(s.msgs) != 2 {
		t.Fatalf("story base %d, %d messages kept; want message 0 forgotten", s.base, len(s.msgs))
	}
	if len(c.handles) != 0 {
		t.Fatalf("%d handles kept after their acks", len(c.handles))
	}
	c.Delivered(dl(2, "h2", "r3", 1, 70000, 70010)) // its predecessor known
	c.SettleSent("h2", at(70011))
	c.Acked("h2", at(70012))
	c.Delivered(dl(0, "h0c", "r4", 3, 80000, 80010))
	counts := want(t, c, 0, 0, 1)
	if counts.Duplicates != 1 || counts.Deliveries != 4 || !c.Drained() {
		t.Fatalf("counts %+v drained %v", counts, c.Drained())
	}
}

func TestCheckerReleasedHandlesAreForgotten(t *testing.T) {
	c := NewChecker()
	accept(c, 0)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	c.SettleSent("h0", at(11))
	c.Released("h0") // a nack answered
	c.Delivered(dl(0, "h0b", "r2", 2, 20, 30))
	c.SettleSent("h0b", at(31))
	c.Acked("h0b", at(32))
	if len(c.handles) != 0 || len(c.ids) != 0 {
		t.Fatalf("kept %d handles and %d ids", len(c.handles), len(c.ids))
	}
	counts := want(t, c, 0, 0, 0)
	if counts.Duplicates != 1 || !c.Drained() {
		t.Fatalf("counts %+v", counts)
	}
}

func TestCheckerLostNamesTheMessage(t *testing.T) {
	c := NewChecker()
	c.Accepted("lc-x-1-0", 1, 0)
	c.Accepted("lc-x-1-1", 1, 1)
	c.Delivered(dl(0, "h0", "r1", 1, 0, 10))
	_, ex := c.Finish()
	if len(ex) != 1 || ex[0] != "LOST: lc-x-1-1 (story 1, message 1) accepted, never delivered" {
		t.Fatalf("examples %q", ex)
	}
}

// TestCheckerMemoryIsBounded runs a long clean run through the checker:
// what it keeps must not grow with the number of messages.
func TestCheckerMemoryIsBounded(t *testing.T) {
	c := NewChecker()
	// A message every 2 ms of the clock, each story's every 2 s.
	const stories, perStory = 1000, 200
	kept := 0
	for seq := range perStory {
		for st := range stories {
			ms := 2 * (seq*stories + st)
			id := fmt.Sprintf("m-%d-%d", st, seq)
			h := fmt.Sprintf("h-%d-%d", st, seq)
			c.Accepted(id, st, seq)
			c.Delivered(Delivery{MessageID: id, Story: st, Seq: seq, Handle: h, ReceiveID: h, ReceiveCount: 1,
				Sent: at(ms), Answered: at(ms + 1), Visibility: 30 * time.Second})
			c.SettleSent(h, at(ms+2))
			c.Acked(h, at(ms+3))
		}
	}
	for _, s := range c.stories {
		kept += len(s.msgs)
	}
	recent := 0
	for _, s := range c.stories {
		recent += len(s.recent)
	}
	// A minute of messages is 30 a story, 10 s of deliveries 5 (each
	// story keeps one more: it lets go when its next message comes).
	if kept > stories*31 || recent > stories*6 || len(c.handles) != 0 || len(c.ids) != 0 {
		t.Fatalf("kept %d messages, %d recent deliveries, %d handles, %d ids of %d", kept, recent, len(c.handles), len(c.ids), stories*perStory)
	}
	counts := want(t, c, 0, 0, 0)
	if counts.Accepted != stories*perStory || counts.Acked != stories*perStory || !c.Drained() {
		t.Fatalf("counts %+v", counts)
	}
}
