package storetest

import (
	"slices"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// metricsTests are what a metrics scrape and the bus's counters read.
var metricsTests = []test{
	{"GaugesEmpty", testGaugesEmpty},
	{"GaugesEveryConsumerQueue", testGaugesEveryQueue},
	{"DeadLetterMovesReported", testDeadLetterMovesReported},
}

// gauges reads QueueGauges and returns its counts by connection id.
func (e *env) gauges(now time.Time) map[string]bus.QueueStats {
	e.t.Helper()
	gs, err := e.s.QueueGauges(e.ctx, now)
	if err != nil {
		e.t.Fatalf("QueueGauges: %v", err)
	}
	out := make(map[string]bus.QueueStats, len(gs))
	for _, g := range gs {
		out[g.ConnectionID] = g.QueueStats
	}
	return out
}

func testGaugesEmpty(e *env) {
	gs, err := e.s.QueueGauges(e.ctx, T0)
	if err != nil || len(gs) != 0 {
		e.t.Errorf("QueueGauges of an empty store = %+v, %v; want none", gs, err)
	}
	// A workspace with only a producer has no queue.
	e.producer(e.workspace())
	if gs, err := e.s.QueueGauges(e.ctx, T0); err != nil || len(gs) != 0 {
		e.t.Errorf("QueueGauges with a producer only = %+v, %v; want none", gs, err)
	}
}

func testGaugesEveryQueue(e *env) {
	f := e.fixture(5)
	idle := e.consumer(f.WS, 5, "som.nothing")
	g := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, at(time.Second), "b", "b1")
	e.pub(f, at(2*time.Second), "c", "c1")
	e.pub(g, at(3*time.Second), "x", "x1")
	now := at(10 * time.Second)
	ds := e.receive(f.Q, 10, time.Minute, now)
	wantIDs(e.t, ds, "a1", "b1", "c1")
	e.nackOK(f.Q, time.Minute, now, ds[1].Handle) // b1 delayed
	e.setAttemptLimit(f.Q, 1)
	e.nackOK(f.Q, 0, now, ds[2].Handle) // c1: a dead letter
	e.setAttemptLimit(f.Q, 5)

	gs, err := e.s.QueueGauges(e.ctx, at(20*time.Second))
	if err != nil {
		e.t.Fatalf("QueueGauges: %v", err)
	}
	want := []bus.QueueGauge{
		// a1 in flight, a2 behind it (ready since T0), b1 delayed, c1 dead.
		{WorkspaceID: f.WS, ConnectionID: f.Q, QueueStats: bus.QueueStats{Ready: 1, InFlight: 1, Delayed: 1, DeadLetters: 1, OldestReadyAgeSeconds: 20}},
		{WorkspaceID: f.WS, ConnectionID: idle},
		{WorkspaceID: g.WS, ConnectionID: g.Q, QueueStats: bus.QueueStats{Ready: 1, OldestReadyAgeSeconds: 17}},
	}
	// Ordered by workspace id, then connection id.
	slices.SortFunc(want, func(a, b bus.QueueGauge) int {
		if c := strings.Compare(a.WorkspaceID, b.WorkspaceID); c != 0 {
			return c
		}
		return strings.Compare(a.ConnectionID, b.ConnectionID)
	})
	if len(gs) != len(want) {
		e.t.Fatalf("QueueGauges = %+v\nwant %+v", gs, want)
	}
	for i := range want {
		if gs[i].WorkspaceID != want[i].WorkspaceID || gs[i].ConnectionID != want[i].ConnectionID || !statsEqual(gs[i].QueueStats, want[i].QueueStats) {
			e.t.Errorf("QueueGauges[%d] = %+v, want %+v", i, gs[i], want[i])
		}
	}
}

// Receive and nack say how many messages they moved to the dead letters, so
// the bus can count every move (the sweeper's are in MaintainResult).
func testDeadLetterMovesReported(e *env) {
	f := e.fixture(1)
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, T0, "b", "b1")
	e.pub(f, T0, "c", "c1")
	ds := e.receive(f.Q, 10, time.Second, at(time.Second))
	wantIDs(e.t, ds, "a1", "b1", "c1")
	// A release of a delivery on its last attempt is a move.
	rs := e.nack(f.Q, 0, at(time.Second), ds[2].Handle)
	if !rs[0].OK || !rs[0].DeadLettered {
		e.t.Errorf("nack on the last attempt = %+v, want OK and DeadLettered", rs[0])
	}
	// a1 and b1 run out of visibility: the next receive moves both first,
	// then claims a2.
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(3 * time.Second)})
	wantIDs(e.t, r.Deliveries, "a2")
	if r.DeadLettered != 2 {
		e.t.Errorf("receive DeadLettered = %d, want 2", r.DeadLettered)
	}
	if n := len(e.allDeadLetters(f.Q)); n != 3 {
		e.t.Errorf("%d dead letters, want 3", n)
	}
	// Nothing left to move, and a release that is not the last attempt,
	// or an ack, is no move.
	r = e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(4 * time.Second)})
	if r.DeadLettered != 0 || len(r.Deliveries) != 0 {
		e.t.Errorf("second receive = %d deliveries, DeadLettered %d; want none", len(r.Deliveries), r.DeadLettered)
	}
	e.setAttemptLimit(f.Q, 5)
	e.pub(f, at(5*time.Second), "d", "d1")
	d := e.receiveOne(f.Q, time.Minute, at(5*time.Second), "d1")
	if rs := e.nack(f.Q, 0, at(5*time.Second), d.Handle); !rs[0].OK || rs[0].DeadLettered {
		e.t.Errorf("nack before the last attempt = %+v, want OK and not DeadLettered", rs[0])
	}
	d = e.receiveOne(f.Q, time.Minute, at(6*time.Second), "d1")
	if rs := e.ack(f.Q, at(6*time.Second), d.Handle); !rs[0].OK || rs[0].DeadLettered {
		e.t.Errorf("ack = %+v, want OK and not DeadLettered", rs[0])
	}
	if r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 10, Visibility: time.Minute, Now: at(7 * time.Second)}); r.DeadLettered != 0 {
		e.t.Errorf("receive with nothing exhausted: DeadLettered = %d", r.DeadLettered)
	}
}
