package storetest

import (
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var receiveTests = []test{
	{"EmptyQueue", testReceiveEmpty},
	{"Max", testReceiveMax},
	{"OneMessagePerStory", testOnePerStory},
	{"OrderPerStory", testOrderPerStory},
	{"OldestHeadFirst", testOldestHeadFirst},
	{"TiesByStoryCreation", testTiesByStory},
	{"InFlightStoryBlocksLaterMessages", testInFlightBlocks},
	{"VisibilityExpiry", testVisibilityExpiry},
	{"VisibilityZero", testVisibilityZero},
	{"NextVisibleAt", testNextVisibleAt},
	{"PublishBehindInFlightHead", testPublishBehindInFlight},
}

func testReceiveEmpty(e *env) {
	f := e.fixture(5)
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: T0})
	if len(r.Deliveries) != 0 || !r.NextVisibleAt.IsZero() || len(r.Woken) != 0 {
		e.t.Errorf("receive of an empty queue = %+v, want nothing", r)
	}
}

func testReceiveMax(e *env) {
	f := e.fixture(5)
	for i := range 5 {
		e.pub(f, at(time.Duration(i)*time.Millisecond), fmt.Sprintf("s%d", i), fmt.Sprintf("m%d", i))
	}
	now := at(time.Second)
	wantIDs(e.t, e.receive(f.Q, 3, time.Minute, now), "m0", "m1", "m2")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now), "m3", "m4")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
}

func testOnePerStory(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2", "a3")
	e.pub(f, T0, "b", "b1", "b2")
	now := at(time.Second)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now), "a1", "b1")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
}

func testOrderPerStory(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, at(time.Millisecond), "b", "b1")
	e.pub(f, at(2*time.Millisecond), "a", "a3")
	now := at(time.Second)
	var got []string
	for range 10 {
		ds := e.receive(f.Q, 1, time.Minute, now)
		if len(ds) == 0 {
			break
		}
		got = append(got, ds[0].MessageID)
		e.ackOK(f.Q, now, ds[0].Handle)
	}
	// a1 (story a created first) -> a2 (ready again at its enqueued_at T0,
	// older than b1) -> b1 -> a3.
	want := []string{"a1", "a2", "b1", "a3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("receive order %q, want %q", got, want)
	}
}

// testOldestHeadFirst: ready heads are offered by (visible_at, story id), and
// an advanced head is visible from its own enqueued_at, not from the ack.
func testOldestHeadFirst(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "x", "x1")                // story X, id smallest
	e.pub(f, at(1*time.Second), "y", "y1") // story Y
	e.pub(f, at(2*time.Second), "x", "x2") // behind x1
	x1 := e.receiveOne(f.Q, time.Hour, at(3*time.Second), "x1")
	e.pub(f, at(3500*time.Millisecond), "z", "z1") // story Z, newest
	ack := e.ack(f.Q, at(4*time.Second), x1.Handle)
	wantSettle(e.t, "ack x1", ack, true)
	if !ack[0].Woken {
		e.t.Errorf("ack that advanced story X to a ready head: Woken = false")
	}
	// X's head x2 is visible since T0+2s (its enqueued_at): y1 (T0+1s), x2
	// (T0+2s), z1 (T0+3.5s). Ordering by story id would give x2 first;
	// making x2 visible at the ack (T0+4s) would put z1 before it.
	now := at(5 * time.Second)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now), "y1", "x2", "z1")
}

func testTiesByStory(e *env) {
	f := e.fixture(5)
	// One call, one Now: the stories tie on visible_at and go by creation.
	e.publish(f.WS, f.P, T0, msg("m-c", "c"), msg("m-a", "a"), msg("m-b", "b"), msg("m-c2", "c"))
	now := at(time.Second)
	var got []string
	for range 3 {
		ds := e.receive(f.Q, 1, time.Minute, now)
		if len(ds) != 1 {
			e.t.Fatalf("receive(max 1) = %q", ids(ds))
		}
		got = append(got, ds[0].MessageID)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{"m-c", "m-a", "m-b"}) {
		e.t.Errorf("receive order %q, want stories in creation order c, a, b", got)
	}
}

func testInFlightBlocks(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	a1 := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.pub(f, at(2*time.Second), "b", "b1")
	// a2 waits behind the in-flight a1; b is not held up.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(3*time.Second)), "b1")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(4*time.Second)))
	e.ackOK(f.Q, at(5*time.Second), a1.Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(5*time.Second)), "a2")
}

func testVisibilityExpiry(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d1 := e.receiveOne(f.Q, 30*time.Second, at(time.Second), "a1")
	if d1.ReceiveCount != 1 {
		e.t.Errorf("first ReceiveCount = %d", d1.ReceiveCount)
	}
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(31*time.Second-time.Millisecond)))
	// visible_at <= Now: visible again, exactly at the end of the visibility.
	ds := e.receive(f.Q, 10, time.Minute, at(31*time.Second))
	wantIDs(e.t, ds, "a1")
	d2 := ds[0]
	if d2.ReceiveCount != 2 {
		e.t.Errorf("ReceiveCount after expiry = %d, want 2", d2.ReceiveCount)
	}
	if d2.Handle.StoryID != d1.Handle.StoryID || d2.Handle.Seq != d1.Handle.Seq || d2.Handle.QueueID != d1.Handle.QueueID {
		e.t.Errorf("redelivery handle %+v does not address the same message as %+v", d2.Handle, d1.Handle)
	}
	if d2.Handle.Nonce == d1.Handle.Nonce {
		e.t.Errorf("redelivery kept the nonce %d", d1.Handle.Nonce)
	}
	if d2.Handle.Nonce <= 0 {
		e.t.Errorf("nonce %d is not positive", d2.Handle.Nonce)
	}
	sameTime(e.t, "EnqueuedAt of the redelivery", d2.EnqueuedAt, T0)
	// Still one message per story: a2 waits.
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(32*time.Second)))
	d3 := e.receiveOne(f.Q, time.Minute, at(91*time.Second), "a1")
	if d3.ReceiveCount != 3 {
		e.t.Errorf("ReceiveCount of the third delivery = %d, want 3", d3.ReceiveCount)
	}
}

func testVisibilityZero(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	d1 := e.receiveOne(f.Q, 0, at(time.Second), "a1")
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(time.Second)})
	wantIDs(e.t, r.Deliveries, "a1")
	if r.Deliveries[0].ReceiveCount != 2 || r.Deliveries[0].Handle.Nonce == d1.Handle.Nonce {
		e.t.Errorf("redelivery after visibility 0 = %+v, want receive count 2 and a new nonce", r.Deliveries[0])
	}
}

func testNextVisibleAt(e *env) {
	f := e.fixture(5)
	next := func(now time.Time) time.Time {
		e.t.Helper()
		r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: now})
		if len(r.Deliveries) != 0 {
			e.t.Fatalf("unexpected deliveries %q", ids(r.Deliveries))
		}
		return r.NextVisibleAt
	}
	if n := next(T0); !n.IsZero() {
		e.t.Errorf("NextVisibleAt of an empty queue = %v, want zero", n)
	}
	e.pub(f, T0, "a", "a1")
	e.pub(f, T0, "b", "b1")
	e.pub(f, T0, "c", "c1")
	e.receiveOne(f.Q, 50*time.Second, at(time.Second), "a1") // visible at 51s
	e.receiveOne(f.Q, 20*time.Second, at(time.Second), "b1") // visible at 21s
	c := e.receiveOne(f.Q, 90*time.Second, at(time.Second), "c1")
	e.nackOK(f.Q, 10*time.Second, at(2*time.Second), c.Handle) // delayed until 12s
	sameTime(e.t, "NextVisibleAt", next(at(3*time.Second)), at(12*time.Second))
	// At 12s c1 is delivered again (visible 1 minute: 72s); next is b at 21s.
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(12 * time.Second)})
	wantIDs(e.t, r.Deliveries, "c1")
	sameTime(e.t, "NextVisibleAt after c1 is claimed", next(at(13*time.Second)), at(21*time.Second))
	wantIDs(e.t, e.receive(f.Q, 10, 100*time.Second, at(21*time.Second)), "b1") // b: 121s
	sameTime(e.t, "NextVisibleAt", next(at(22*time.Second)), at(51*time.Second))
}

func testPublishBehindInFlight(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	a1 := e.receiveOne(f.Q, time.Minute, at(time.Second), "a1")
	e.pub(f, at(2*time.Second), "a", "a2")
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(3*time.Second)))
	e.ackOK(f.Q, at(4*time.Second), a1.Handle)
	a2 := e.receiveOne(f.Q, time.Minute, at(4*time.Second), "a2")
	if a2.Handle.StoryID != a1.Handle.StoryID || a2.Handle.Seq != 2 || a2.ReceiveCount != 1 {
		e.t.Errorf("a2 handle %+v count %d, want story %d seq 2 count 1", a2.Handle, a2.ReceiveCount, a1.Handle.StoryID)
	}
}
