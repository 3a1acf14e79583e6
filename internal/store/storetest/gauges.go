package storetest

import (
	"slices"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var gaugeTests = []test{
	{"Empty", testGaugesEmpty},
	{"EveryConsumerQueue", testGaugesEveryQueue},
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
