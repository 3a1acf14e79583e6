package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestGathererGroups: a call alone runs at once; the calls that come while
// the runs are under way wait in one group, which runs once a run ends; a
// call too large, or one that may not join, runs by itself at once.
func TestGathererGroups(t *testing.T) {
	type call struct {
		id   int
		done bool
	}
	g := &gatherer[call]{inFlight: 1, maxSize: 4, maxCall: 2,
		join: func(calls []*call, c *call) bool { return c.id != 99 }}
	release := make(chan struct{})
	started := make(chan []int, 10)
	run := func(calls []*call) {
		var ids []int
		for _, c := range calls {
			ids = append(ids, c.id)
		}
		started <- ids
		if ids[0] == 1 {
			<-release
		}
		for _, c := range calls {
			c.done = true
		}
	}
	var wg sync.WaitGroup
	calls := map[int]*call{}
	for _, id := range []int{1, 2, 3, 4, 5, 99, 100} {
		calls[id] = &call{id: id}
	}
	wg.Go(func() { g.do("k", calls[1], 1, run) })
	if got := <-started; !slices.Equal(got, []int{1}) {
		t.Fatalf("first run %v, want [1]", got)
	}
	for _, id := range []int{2, 3, 4} { // 2 leads the group; 3 and 4 join it
		wg.Go(func() { g.do("k", calls[id], 1, run) })
		waitUntil(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.keys["k"].next != nil && len(g.keys["k"].next.calls) == id-1
		})
	}
	// 5 (2 items) would make the group too large (4 items at most): it
	// runs by itself, as do 99 (may not join) and 100 (too large to
	// gather), while 1 still runs.
	wg.Go(func() { g.do("k", calls[5], 2, run) })
	wg.Go(func() { g.do("k", calls[99], 1, run) })
	wg.Go(func() { g.do("k", calls[100], 3, run) })
	alone := map[int]bool{}
	for range 3 {
		got := <-started
		if len(got) != 1 {
			t.Fatalf("run %v while the first runs, want calls by themselves", got)
		}
		alone[got[0]] = true
	}
	if !alone[5] || !alone[99] || !alone[100] {
		t.Fatalf("ran by themselves: %v, want 5, 99 and 100", alone)
	}
	close(release)
	if got := <-started; !slices.Equal(got, []int{2, 3, 4}) {
		t.Fatalf("group %v, want [2 3 4]", got)
	}
	wg.Wait()
	for id, c := range calls {
		if !c.done {
			t.Errorf("call %d not run", id)
		}
	}
	if len(g.keys) != 0 {
		t.Errorf("keys left: %v", g.keys)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGatheredCalls: concurrent single publishes (some of one message id
// at once), receives and acks (some of one handle at once) of one queue go
// through the gatherers. Each distinct message is delivered once, in order
// per story; a repeated id is a duplicate once; every ack, repeated or
// not, succeeds; the queue ends empty.
func TestGatheredCalls(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ws, prod, q := setupQueue(t, s, 1000)
	const publishers, perPublisher, dups = 8, 30, 10
	publish := func(id, story string) bus.PublishOutcome {
		out, err := s.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{testMessage(id, story)}, Now: time.Now(), DedupWindow: time.Hour})
		if err != nil {
			t.Errorf("publish %s: %v", id, err)
			return bus.PublishOutcome{}
		}
		return out[0]
	}
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range perPublisher {
				if o := publish(fmt.Sprintf("p%d-%d", p, i), fmt.Sprint("s", p)); o.Duplicate || o.Deliveries != 1 {
					t.Errorf("p%d-%d: %+v", p, i, o)
				}
			}
		})
	}
	var duplicates atomic.Int64
	for d := range dups {
		for range 2 {
			wg.Go(func() {
				if publish(fmt.Sprint("dup-", d), fmt.Sprint("d", d)).Duplicate {
					duplicates.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if n := duplicates.Load(); n != dups {
		t.Fatalf("%d duplicates, want %d", n, dups)
	}

	const total = publishers*perPublisher + dups
	var (
		mu   sync.Mutex
		got  = map[string]int{} // message id -> deliveries
		next = map[string]int{} // story -> index of the next message
		done atomic.Int64
	)
	deadline := time.Now().Add(60 * time.Second)
	for range 8 {
		wg.Go(func() {
			for done.Load() < total && !t.Failed() {
				if time.Now().After(deadline) {
					t.Errorf("not drained in time: %d of %d", done.Load(), total)
					return
				}
				res, err := s.MessageReceive(t.Context(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: time.Now()})
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				if len(res.Deliveries) > 10 {
					t.Errorf("receive of up to 10 got %d", len(res.Deliveries))
				}
				var handles []bus.Handle
				mu.Lock()
				for _, d := range res.Deliveries {
					got[d.MessageID]++
					if d.CorrelationID[0] == 's' {
						if want := fmt.Sprintf("p%s-%d", d.CorrelationID[1:], next[d.CorrelationID]); d.MessageID != want {
							t.Errorf("story %s: got %s, want %s", d.CorrelationID, d.MessageID, want)
						}
						next[d.CorrelationID]++
					}
					handles = append(handles, d.Handle)
				}
				mu.Unlock()
				if len(handles) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				// Every other batch is acknowledged twice at once.
				times := 1 + len(handles)%2
				var acks sync.WaitGroup
				for range times {
					acks.Go(func() {
						rs, err := s.MessageAck(t.Context(), &bus.SettleParams{QueueID: q, Handles: handles, Now: time.Now()})
						if err != nil {
							t.Errorf("ack: %v", err)
							return
						}
						for i, r := range rs {
							if !r.OK {
								t.Errorf("ack of %v: %+v", handles[i], r)
							}
						}
					})
				}
				acks.Wait()
				done.Add(int64(len(handles)))
			}
		})
	}
	wg.Wait()
	if len(got) != total {
		t.Errorf("%d distinct messages delivered, want %d", len(got), total)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}

	// Many acks at once, each of one handle, each handle acknowledged
	// twice (the second may find the first's group: it runs by itself).
	const many = 60
	for i := range many {
		publish(fmt.Sprint("m-", i), fmt.Sprint("m", i))
	}
	res, err := s.MessageReceive(t.Context(), &bus.ReceiveParams{QueueID: q, Max: many, Visibility: time.Minute, Now: time.Now()})
	if err != nil || len(res.Deliveries) != many {
		t.Fatalf("receive: %v, %d deliveries, want %d", err, len(res.Deliveries), many)
	}
	for _, d := range res.Deliveries {
		for range 2 {
			wg.Go(func() {
				rs, err := s.MessageAck(t.Context(), &bus.SettleParams{QueueID: q, Handles: []bus.Handle{d.Handle}, Now: time.Now()})
				if err != nil || !rs[0].OK {
					t.Errorf("ack of %s: %v %+v", d.MessageID, err, rs)
				}
			})
		}
	}
	wg.Wait()
	// A stale handle fails in a group as by itself.
	rs, err := s.MessageAck(t.Context(), &bus.SettleParams{QueueID: q, Handles: []bus.Handle{{QueueID: q, StoryID: res.Deliveries[0].Handle.StoryID, Seq: 1, Nonce: 1}}, Now: time.Now()})
	if err != nil || rs[0].OK {
		t.Errorf("ack of a stale handle: %v %+v", err, rs)
	}
	st, err := s.QueueStats(t.Context(), q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.InFlight+st.Delayed != 0 {
		t.Errorf("queue not empty at the end: %+v", st)
	}
}

// TestGathererPanic: a run that panics still hands its place on.
func TestGathererPanic(t *testing.T) {
	type call struct{}
	g := &gatherer[call]{inFlight: 1, maxSize: 10, maxCall: 10}
	func() {
		defer func() { _ = recover() }()
		g.do("k", &call{}, 1, func([]*call) { panic("boom") })
	}()
	done := make(chan struct{})
	go func() {
		g.do("k", &call{}, 1, func([]*call) {})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call after a panicking run did not run")
	}
}

// TestGathererHold: after a run of several calls, a call that comes while
// its callers may still come back waits for them, up to the hold but no
// longer than that run took, and runs with them as soon as they are all
// there; a call that comes after a run of one runs at once; the keys kept
// for their latest run are swept later. Where a wrong wait would be long,
// the test makes it an hour (the run before "took" that long), so that a
// slow machine cannot make a right answer look wrong.
func TestGathererHold(t *testing.T) {
	type call struct{ id int }
	g := &gatherer[call]{inFlight: 1, maxSize: 10, maxCall: 1, hold: time.Hour}
	type ran struct {
		ids []int
		at  time.Time
	}
	runs := make(chan ran, 10)
	var gate sync.Mutex // held to keep the first run going
	run := func(calls []*call) {
		start := time.Now()
		gate.Lock()
		gate.Unlock() //nolint:staticcheck // a gate, not a critical section
		time.Sleep(20 * time.Millisecond)
		var ids []int
		for _, c := range calls {
			ids = append(ids, c.id)
		}
		runs <- ran{ids: ids, at: start}
	}
	var wg sync.WaitGroup
	do := func(id int) { wg.Go(func() { g.do("k", &call{id: id}, 1, run) }) }
	next := func(want ...int) ran {
		t.Helper()
		select {
		case r := <-runs:
			if !slices.Equal(r.ids, want) {
				t.Fatalf("run %v, want %v", r.ids, want)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no run in 10 s, want %v", want)
			return ran{}
		}
	}
	key := func(f func(k *gatherKey[call])) {
		g.mu.Lock()
		defer g.mu.Unlock()
		f(g.keys["k"])
	}
	idle := func() {
		t.Helper()
		waitUntil(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			k := g.keys["k"]
			return k != nil && k.running == 0 && k.next == nil
		})
	}
	groupOf := func(n int) func() bool {
		return func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			k := g.keys["k"]
			return k != nil && k.next != nil && len(k.next.calls) == n
		}
	}

	// A run of one (1), and behind it a group of three (2, 3, 4): the run
	// before it had one call, so the group runs as soon as 1 ends.
	gate.Lock()
	do(1)
	waitUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.keys["k"] != nil })
	for id := 2; id <= 4; id++ {
		do(id)
		waitUntil(t, groupOf(id-1))
	}
	gate.Unlock()
	next(1)
	next(2, 3, 4)
	idle() // its run has ended (a run reports before it ends)

	// Right after a run of three (which "took" an hour): 5 waits for two
	// more, and runs with 6 and 7 as soon as they come.
	key(func(k *gatherKey[call]) { k.lastTook = time.Hour })
	do(5)
	waitUntil(t, groupOf(1))
	do(6)
	waitUntil(t, groupOf(2))
	do(7)
	next(5, 6, 7)
	idle()

	// Right after it, 8 waits for two more that never come: it runs
	// alone once its hold (as long as the run before took) is out.
	var hold time.Duration
	key(func(k *gatherKey[call]) { hold, k.comeBack = k.lastTook, time.Nanosecond })
	start := time.Now()
	do(8)
	if r := next(8); r.at.Sub(start) < hold {
		t.Errorf("8 alone started after %v, want its hold (%v) first", r.at.Sub(start), hold)
	}
	idle()

	// After a run of one, 9 does not wait (it would wait an hour).
	key(func(k *gatherKey[call]) { k.lastTook = time.Hour })
	do(9)
	next(9)
	wg.Wait()

	// The key is kept for its latest run; a finish a second later sweeps
	// it, keeping its own key.
	key(func(k *gatherKey[call]) {
		if k == nil {
			t.Fatal("key dropped before a sweep")
		}
		k.lastEnd = time.Now().Add(-2 * time.Hour)
		g.swept = time.Time{}
	})
	g.do("other", &call{id: 10}, 1, run)
	next(10)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys["k"] != nil || g.keys["other"] == nil {
		t.Errorf("after the sweep: k %v, other %v; want k gone, other kept", g.keys["k"], g.keys["other"])
	}
}

// TestGathererNoHoldForLateCallers: when calls usually come later after a
// run ends than a hold would wait, a call that comes right after a run of
// several does not hold: it runs at once (held, it would wait an hour).
func TestGathererNoHoldForLateCallers(t *testing.T) {
	type call struct{ id int }
	g := &gatherer[call]{inFlight: 1, maxSize: 10, maxCall: 1, hold: time.Hour}
	runs := make(chan []int, 10)
	var gate sync.Mutex
	run := func(calls []*call) {
		gate.Lock()
		gate.Unlock() //nolint:staticcheck // a gate, not a critical section
		var ids []int
		for _, c := range calls {
			ids = append(ids, c.id)
		}
		runs <- ids
	}
	var wg sync.WaitGroup
	do := func(id int) { wg.Go(func() { g.do("k", &call{id: id}, 1, run) }) }
	gate.Lock()
	do(1)
	waitUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.keys["k"] != nil })
	do(2)
	waitUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.keys["k"].next != nil })
	do(3)
	waitUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.keys["k"].next.calls) == 2 })
	gate.Unlock()
	<-runs // 1
	if ids := <-runs; len(ids) != 2 {
		t.Fatalf("run %v, want the group of two", ids)
	}
	wg.Wait()
	g.mu.Lock()
	k := g.keys["k"]
	k.lastTook, k.lastEnd = time.Hour, time.Now() // a hold would wait an hour
	k.comeBack = 2 * time.Hour                    // but calls usually come later than that
	g.mu.Unlock()
	do(4)
	select {
	case ids := <-runs:
		if len(ids) != 1 {
			t.Fatalf("run %v, want 4 alone", ids)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("4 held for its late callers")
	}
	wg.Wait()
}

// TestGathererHoldInFlight2: with two runs of a key at once, a call that
// takes the free place and holds is not handed a place again when the
// other run ends (that closed its ready channel twice and kept the ended
// run's place for ever).
func TestGathererHoldInFlight2(t *testing.T) {
	type call struct{ id int }
	g := &gatherer[call]{inFlight: 2, maxSize: 10, maxCall: 1, hold: 2 * time.Second}
	gate := make(chan struct{})
	run := func(calls []*call) {
		if calls[0].id == 1 {
			<-gate
		}
	}
	panicked := make(chan any, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() { panicked <- recover() }()
		g.do("k", &call{id: 1}, 1, run) // alone: running 1
	})
	waitUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.keys["k"] != nil })
	// As if a run of three had just ended beside it.
	g.mu.Lock()
	k := g.keys["k"]
	k.lastServed, k.lastEnd, k.lastTook = 3, time.Now(), 2*time.Second
	g.mu.Unlock()
	wg.Go(func() { g.do("k", &call{id: 2}, 1, run) }) // the free place: holds (running 2)
	waitUntil(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return k.next != nil && k.next.target > 0
	})
	close(gate) // run 1 ends beside the holding group
	if p := <-panicked; p != nil {
		t.Errorf("run 1's finish panicked: %v", p)
	}
	g.mu.Lock()
	if k.running != 1 {
		t.Errorf("running %d after run 1 ended, want 1 (the holding group)", k.running)
	}
	g.mu.Unlock()
	wg.Go(func() { g.do("k", &call{id: 3}, 1, run) })
	wg.Go(func() { g.do("k", &call{id: 4}, 1, run) }) // fills 2's group
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if k.running != 0 || k.next != nil {
		t.Errorf("at the end: running %d, next %v; want 0, none", k.running, k.next)
	}
}

// TestGathererHoldPanic: a held group whose run panics still hands its
// place on.
func TestGathererHoldPanic(t *testing.T) {
	type call struct{ id int }
	g := &gatherer[call]{inFlight: 1, maxSize: 10, maxCall: 1, hold: time.Second}
	g.do("k", &call{id: 0}, 1, func([]*call) {})
	g.mu.Lock()
	k := g.keys["k"]
	k.lastServed, k.lastEnd, k.lastTook = 2, time.Now(), time.Second
	g.mu.Unlock()
	var wg sync.WaitGroup
	for id := 1; id <= 2; id++ {
		wg.Go(func() {
			defer func() { _ = recover() }()
			g.do("k", &call{id: id}, 1, func([]*call) { panic("boom") })
		})
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { g.do("k", &call{id: 3}, 1, func([]*call) {}); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call after a panicking held run did not run")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if k.running != 0 || k.next != nil {
		t.Errorf("running %d next %v", k.running, k.next)
	}
}

// TestGroupContextEndsWithItsLastCaller: a group's run goes on while any of
// its callers still waits, and ends once every caller's context has ended,
// with the last one's cause (a store that never answers then holds the
// group no longer than its callers' deadlines).
func TestGroupContextEndsWithItsLastCaller(t *testing.T) {
	t.Parallel()
	type call struct{ ctx context.Context }
	timedOut := errors.New("timed out")
	a, cancelA := context.WithCancelCause(context.Background())
	b, cancelB := context.WithCancelCause(context.Background())
	ctx, done := groupContext([]*call{{a}, {b}}, func(c *call) context.Context { return c.ctx })
	defer done()
	cancelA(nil)
	select {
	case <-ctx.Done():
		t.Fatal("the run ended while a caller still waited for it")
	case <-time.After(50 * time.Millisecond):
	}
	cancelB(timedOut)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run went on after every caller had ended")
	}
	if !errors.Is(context.Cause(ctx), timedOut) {
		t.Fatalf("cause %v, want the last caller's", context.Cause(ctx))
	}
	// Released when the run is over, though its callers still wait.
	c, cancelC := context.WithCancel(context.Background())
	defer cancelC()
	ctx2, done2 := groupContext([]*call{{c}}, func(c *call) context.Context { return c.ctx })
	done2()
	if ctx2.Err() == nil {
		t.Fatal("done did not end the run's context")
	}
}
