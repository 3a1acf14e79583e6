package storetest

import (
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var sampleTests = []test{
	{"CountLikeQueueStats", testSampleCounts},
	{"EveryConsumerQueue", testSampleEveryQueue},
	{"ManyQueues", testSampleManyQueues},
	{"OncePerInterval", testSampleOnce},
	{"ConcurrentSamplersWriteOnce", testSampleConcurrent},
	{"Since", testSamplesSince},
	{"Prune", testSamplePrune},
	{"UnchangedCarriedForward", testSampleUnchanged},
	{"PruneKeepsLatest", testSamplePruneKeepsLatest},
	{"GoWithTheirConnection", testSamplesDeleted},
}

// sample records one sample of every queue under at, counted as of now,
// and returns how many samples were written.
func (e *env) sample(at, now time.Time) int {
	e.t.Helper()
	n, err := e.s.QueueSample(e.ctx, &bus.QueueSampleParams{Now: now, At: at})
	if err != nil {
		e.t.Fatalf("QueueSample: %v", err)
	}
	return n
}

func (e *env) samples(q string, since time.Time) []bus.QueueSample {
	e.t.Helper()
	got, err := e.s.QueueSamples(e.ctx, q, since)
	if err != nil {
		e.t.Fatalf("QueueSamples: %v", err)
	}
	return got
}

// sampleOf is the sample QueueStats st makes at at.
func sampleOf(at time.Time, st bus.QueueStats) bus.QueueSample {
	return bus.QueueSample{At: at, Ready: st.Ready, InFlight: st.InFlight, Delayed: st.Delayed, DeadLetters: st.DeadLetters}
}

func (e *env) wantSamples(q string, since time.Time, want ...bus.QueueSample) {
	e.t.Helper()
	got := e.samples(q, since)
	if len(got) != len(want) {
		e.t.Fatalf("QueueSamples(%s) = %d samples %+v, want %d %+v", since.Sub(T0), len(got), got, len(want), want)
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Ready != want[i].Ready || got[i].InFlight != want[i].InFlight ||
			got[i].Delayed != want[i].Delayed || got[i].DeadLetters != want[i].DeadLetters {
			e.t.Errorf("QueueSamples(%s)[%d]:\n got  %+v\n want %+v", since.Sub(T0), i, got[i], want[i])
		}
	}
}

// testSampleCounts: a sample holds what QueueStats counts at the same
// moment: ready, in flight, delayed and dead letters.
func testSampleCounts(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")                // in flight
	e.pub(f, at(1*time.Second), "b", "b1") // delayed
	e.pub(f, at(2*time.Second), "a", "a2") // behind a1: ready
	e.pub(f, at(3*time.Second), "b", "b2") // behind b1: ready
	e.pub(f, at(4*time.Second), "c", "c1") // released at once: ready
	e.pub(f, at(5*time.Second), "e", "e1") // dead letter
	now := at(7 * time.Second)
	ds := e.receive(f.Q, 10, time.Minute, now)
	wantIDs(e.t, ds, "a1", "b1", "c1", "e1")
	e.nackOK(f.Q, 2*time.Minute, now, ds[1].Handle)
	e.nackOK(f.Q, 0, now, ds[2].Handle)
	e.setAttemptLimit(f.Q, 1)
	e.nackOK(f.Q, 0, now, ds[3].Handle)
	e.setAttemptLimit(f.Q, 5)

	var want []bus.QueueSample
	for _, d := range []time.Duration{10 * time.Second, 67 * time.Second, 127 * time.Second} {
		now := at(d)
		st := e.stats(f.Q, now)
		if n := e.sample(now, now); n != 1 {
			e.t.Fatalf("QueueSample at %s wrote %d samples, want 1", d, n)
		}
		want = append(want, sampleOf(now, st))
	}
	// The moments differ: in flight, then the visibility ran out, then the
	// delay too.
	if want[0] == want[1] || want[1] == want[2] || want[0].InFlight != 1 || want[0].Delayed != 1 || want[0].DeadLetters != 1 {
		e.t.Fatalf("setup: the stats do not change as planned: %+v", want)
	}
	e.wantSamples(f.Q, T0, want...)
}

// testSampleEveryQueue: one call samples every consumer queue of every
// workspace, empty ones included, and no producer.
func testSampleEveryQueue(e *env) {
	f := e.fixture(5)
	other := e.workspace()
	q2 := e.consumer(other, 5, "som.>")
	q3 := e.consumer(f.WS, 5, "nothing.matches")
	e.pub(f, T0, "a", "a1", "a2")
	if n := e.sample(at(10*time.Second), at(10*time.Second)); n != 3 {
		e.t.Fatalf("QueueSample wrote %d samples, want 3 (one per consumer queue)", n)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: at(10 * time.Second), Ready: 2})
	e.wantSamples(q2, T0, bus.QueueSample{At: at(10 * time.Second)})
	e.wantSamples(q3, T0, bus.QueueSample{At: at(10 * time.Second)})
	e.wantSamples(f.P, T0)
}

// testSampleManyQueues: every queue of many is sampled once, however the
// store splits the work (the embedded store samples some hundreds of queues
// a transaction), and a second call for the interval writes nothing.
func testSampleManyQueues(e *env) {
	f := e.fixture(5)
	const extra = 1234
	ids := make([]string, 0, extra)
	e.update(func(tx bus.Tx) error {
		ids = ids[:0]
		for range extra {
			c := connection(f.WS, bus.KindConsumer, 5, bus.Subscription{Topic: "som.>"})
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
			ids = append(ids, c.ID)
		}
		return nil
	})
	e.pub(f, T0, "a", "a1")
	bucket := at(10 * time.Second)
	if n := e.sample(bucket, at(10*time.Second)); n != extra+1 {
		e.t.Fatalf("QueueSample wrote %d samples, want %d (one per consumer queue)", n, extra+1)
	}
	if n := e.sample(bucket, at(11*time.Second)); n != 0 {
		e.t.Fatalf("second QueueSample of the same interval wrote %d, want 0", n)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: bucket, Ready: 1})
	for _, q := range []string{ids[0], ids[extra/2], ids[extra-1]} {
		e.wantSamples(q, T0, bus.QueueSample{At: bucket, Ready: 1})
	}
}

// testSampleOnce: an interval already sampled keeps its first sample, and
// a second call for it writes nothing, not even for a queue created since.
func testSampleOnce(e *env) {
	f := e.fixture(5)
	bucket := at(10 * time.Second)
	e.pub(f, T0, "a", "a1")
	if n := e.sample(bucket, at(11*time.Second)); n != 1 {
		e.t.Fatalf("first QueueSample wrote %d, want 1", n)
	}
	e.pub(f, at(12*time.Second), "b", "b1")
	late := e.consumer(f.WS, 5, "som.>")
	if n := e.sample(bucket, at(13*time.Second)); n != 0 {
		e.t.Fatalf("second QueueSample of the same interval wrote %d, want 0", n)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: bucket, Ready: 1})
	e.wantSamples(late, T0)
	// The next interval is sampled again, for every queue.
	if n := e.sample(at(20*time.Second), at(20*time.Second)); n != 2 {
		e.t.Fatalf("QueueSample of the next interval wrote %d, want 2", n)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: bucket, Ready: 1}, bus.QueueSample{At: at(20 * time.Second), Ready: 2})
}

// testSampleConcurrent: nodes that sample the same interval at once write
// it once, without an error.
func testSampleConcurrent(e *env) {
	f := e.fixture(5)
	for range 4 {
		e.consumer(f.WS, 5, "som.>")
	}
	e.pub(f, T0, "a", "a1")
	bucket := at(10 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := e.s.QueueSample(e.ctx, &bus.QueueSampleParams{Now: bucket.Add(time.Duration(i) * time.Millisecond), At: bucket})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("concurrent QueueSample: %v", err)
	}
	if total != 5 {
		e.t.Fatalf("concurrent QueueSample calls wrote %d samples in all, want 5 (one per queue)", total)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: bucket, Ready: 1})
}

// testSamplesSince: a queue's samples from a time on, oldest first, and
// only its own.
func testSamplesSince(e *env) {
	f := e.fixture(5)
	q2 := e.consumer(f.WS, 5, "nothing.matches")
	var want []bus.QueueSample
	for i := range 5 {
		t := at(time.Duration(i) * 10 * time.Second)
		e.pub(f, t, "s", "m"+string(rune('0'+i)))
		e.sample(t, t)
		want = append(want, bus.QueueSample{At: t, Ready: int64(i + 1)})
	}
	e.wantSamples(f.Q, T0, want...)
	e.wantSamples(f.Q, at(20*time.Second), want[2:]...)
	e.wantSamples(f.Q, at(21*time.Second), want[3:]...)
	e.wantSamples(f.Q, at(41*time.Second))
	if got := e.samples(q2, T0); len(got) != 5 || got[4].Ready != 0 {
		e.t.Fatalf("the other queue's samples: %+v, want 5 empty ones", got)
	}
	e.wantSamples("no-such-queue", T0)
}

// testSamplePrune: pruning deletes the rounds recorded before a time and
// the samples before it that a later one replaces, of every queue, and
// says how many.
func testSamplePrune(e *env) {
	f := e.fixture(5)
	idle := e.consumer(f.WS, 5, "nothing.matches")
	for i := range 4 {
		t := at(time.Duration(i) * 10 * time.Second)
		e.pub(f, t, "s", "m"+string(rune('0'+i)))
		e.sample(t, t)
	}
	n, err := e.s.QueueSamplePrune(e.ctx, at(20*time.Second))
	if err != nil {
		e.t.Fatalf("QueueSamplePrune: %v", err)
	}
	// f.Q's samples of 0 s and 10 s go (the one of 20 s replaces them);
	// the idle queue's only sample, of 0 s, stays: it carries forward.
	if n != 2 {
		e.t.Fatalf("QueueSamplePrune deleted %d, want 2 (2 intervals of the busy queue)", n)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: at(20 * time.Second), Ready: 3}, bus.QueueSample{At: at(30 * time.Second), Ready: 4})
	e.wantSamples(idle, T0, bus.QueueSample{At: at(20 * time.Second)}, bus.QueueSample{At: at(30 * time.Second)})
	if n, err := e.s.QueueSamplePrune(e.ctx, at(20*time.Second)); err != nil || n != 0 {
		e.t.Fatalf("QueueSamplePrune again = %d, %v; want 0, nil", n, err)
	}
}

// testSampleUnchanged: a queue whose counts did not change since its
// latest sample writes none, and reads the same counts at every round
// after it; a round no caller recorded (no node ran) stays a gap; counts
// that change with time alone (a visibility running out) are sampled.
func testSampleUnchanged(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1", "a2")
	if n := e.sample(at(10*time.Second), at(10*time.Second)); n != 1 {
		e.t.Fatalf("first QueueSample wrote %d, want 1", n)
	}
	if n := e.sample(at(20*time.Second), at(20*time.Second)); n != 0 {
		e.t.Fatalf("QueueSample of an unchanged queue wrote %d, want 0", n)
	}
	// 30 s: no round. 40 s: a1 taken for 15 s.
	ds := e.receive(f.Q, 1, 15*time.Second, at(40*time.Second))
	wantIDs(e.t, ds, "a1")
	if n := e.sample(at(40*time.Second), at(40*time.Second)); n != 1 {
		e.t.Fatalf("QueueSample after a receive wrote %d, want 1", n)
	}
	// 60 s: the visibility ran out with no write: a1 is ready again.
	if n := e.sample(at(60*time.Second), at(60*time.Second)); n != 1 {
		e.t.Fatalf("QueueSample after the visibility ran out wrote %d, want 1", n)
	}
	if n := e.sample(at(70*time.Second), at(70*time.Second)); n != 0 {
		e.t.Fatalf("QueueSample of an unchanged queue wrote %d, want 0", n)
	}
	e.wantSamples(f.Q, T0,
		bus.QueueSample{At: at(10 * time.Second), Ready: 2},
		bus.QueueSample{At: at(20 * time.Second), Ready: 2},
		bus.QueueSample{At: at(40 * time.Second), Ready: 1, InFlight: 1},
		bus.QueueSample{At: at(60 * time.Second), Ready: 2},
		bus.QueueSample{At: at(70 * time.Second), Ready: 2})
	// Since a time between two samples: the earlier one carries.
	e.wantSamples(f.Q, at(45*time.Second),
		bus.QueueSample{At: at(60 * time.Second), Ready: 2},
		bus.QueueSample{At: at(70 * time.Second), Ready: 2})
	e.wantSamples(f.Q, at(15*time.Second),
		bus.QueueSample{At: at(20 * time.Second), Ready: 2},
		bus.QueueSample{At: at(40 * time.Second), Ready: 1, InFlight: 1},
		bus.QueueSample{At: at(60 * time.Second), Ready: 2},
		bus.QueueSample{At: at(70 * time.Second), Ready: 2})
}

// testSamplePruneKeepsLatest: a queue idle for longer than the keep time
// still reads its counts at the rounds kept, and its one sample is not
// pruned.
func testSamplePruneKeepsLatest(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "a", "a1")
	for i := range 6 {
		t := at(time.Duration(i) * 10 * time.Second)
		want := 0 // unchanged after the first
		if i == 0 {
			want = 1
		}
		if n := e.sample(t, t); n != want {
			e.t.Fatalf("QueueSample at %ds wrote %d, want %d", i*10, n, want)
		}
	}
	for _, before := range []time.Duration{30 * time.Second, 50 * time.Second, 50 * time.Second} {
		if n, err := e.s.QueueSamplePrune(e.ctx, at(before)); err != nil || n != 0 {
			e.t.Fatalf("QueueSamplePrune(%s) = %d, %v; want 0, nil (the only sample carries forward)", before, n, err)
		}
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: at(50 * time.Second), Ready: 1})
	// Once it changes, the new sample replaces the old one at the next
	// prune past it.
	e.pub(f, at(55*time.Second), "b", "b1")
	if n := e.sample(at(60*time.Second), at(60*time.Second)); n != 1 {
		e.t.Fatalf("QueueSample after a change wrote %d, want 1", n)
	}
	if n, err := e.s.QueueSamplePrune(e.ctx, at(60*time.Second)); err != nil || n != 1 {
		e.t.Fatalf("QueueSamplePrune past the new sample = %d, %v; want 1, nil", n, err)
	}
	e.wantSamples(f.Q, T0, bus.QueueSample{At: at(60 * time.Second), Ready: 2})
}

// testSamplesDeleted: removing a connection removes its samples.
func testSamplesDeleted(e *env) {
	f := e.fixture(5)
	e.sample(T0, T0)
	e.wantSamples(f.Q, T0, bus.QueueSample{At: T0})
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(f.Q) })
	e.wantSamples(f.Q, T0)
}
