package storetest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var concurrencyTests = []test{
	{"ReceiveAckExactlyOnceInOrder", testConcurrentReceiveAck},
	{"PublishWhileReceiving", testConcurrentPublishReceive},
	{"ReceiveNackRedeliver", testConcurrentNack},
}

// checker tracks deliveries of concurrent receivers: no two messages of a
// story in flight at once, order per story, each message once.
type checker struct {
	t         *testing.T
	mu        sync.Mutex
	inFlight  map[string]string // story -> message in flight
	next      map[string]int    // story (or story/producer) -> next index expected
	delivered map[string]int    // message id -> deliveries
	errs      int
	stop      context.CancelFunc // ends the workers at the first broken rule
}

func newChecker(t *testing.T, stop context.CancelFunc) *checker {
	return &checker{t: t, inFlight: map[string]string{}, next: map[string]int{}, delivered: map[string]int{}, stop: stop}
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.errs++
	c.stop()
	if c.errs <= 20 {
		c.t.Errorf(format, args...)
	}
}

// took records deliveries that a receive returned; orderKey and index say
// where a message stands in its sequence.
func (c *checker) took(ds []bus.Delivery, orderKey func(bus.Delivery) (string, int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range ds {
		if other, busy := c.inFlight[d.CorrelationID]; busy {
			c.errorf("story %s: %s delivered while %s is in flight", d.CorrelationID, d.MessageID, other)
		}
		c.inFlight[d.CorrelationID] = d.MessageID
		c.delivered[d.MessageID]++
		if c.delivered[d.MessageID] > 1 {
			c.errorf("%s delivered %d times", d.MessageID, c.delivered[d.MessageID])
		}
		key, idx := orderKey(d)
		if want := c.next[key]; idx != want {
			c.errorf("%s: delivered #%d, want #%d (order broken)", key, idx, want)
		}
		c.next[key] = idx + 1
	}
}

// settling is called just before the ack of ds is sent.
func (c *checker) settling(ds []bus.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range ds {
		delete(c.inFlight, d.CorrelationID)
	}
}

// receiveBatch is one receive of up to 10 with an hour's visibility; false
// when the call failed (an error unless the run is ending).
func (e *env) receiveBatch(ctx context.Context, q string, now time.Time) (*bus.ReceiveResult, bool) {
	r, err := e.s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
	if err != nil {
		if ctx.Err() == nil {
			e.t.Errorf("MessageReceive: %v", err)
		}
		return nil, false
	}
	return r, true
}

// ackTaken acknowledges deliveries in one call (the checker first marks
// them settled) and counts them; false when the call failed.
func (e *env) ackTaken(ctx context.Context, c *checker, q string, ds []bus.Delivery, now time.Time, acked *atomic.Int64) bool {
	hs := make([]bus.Handle, len(ds))
	for i, d := range ds {
		hs[i] = d.Handle
	}
	c.settling(ds)
	res, err := e.s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: now})
	if err != nil {
		if ctx.Err() == nil {
			e.t.Errorf("MessageAck: %v", err)
		}
		return false
	}
	for i, x := range res {
		if !x.OK {
			e.t.Errorf("ack of %s failed: %+v", ds[i].MessageID, x)
		}
	}
	acked.Add(int64(len(hs)))
	return true
}

// waitDrained waits for the workers, then fails the test unless no rule
// broke, nothing timed out and every one of total messages was delivered.
func (e *env) waitDrained(ctx context.Context, wg *sync.WaitGroup, c *checker, acked *atomic.Int64, total int64) {
	wg.Wait()
	if e.t.Failed() {
		e.t.FailNow()
	}
	if ctx.Err() != nil {
		e.t.Fatalf("timed out with %d of %d acknowledged", acked.Load(), total)
	}
	if got := int64(len(c.delivered)); got != total {
		e.t.Errorf("%d distinct messages delivered, want %d", got, total)
	}
}

func testConcurrentReceiveAck(e *env) {
	stories, per, workers := 200, 10, 8
	if testing.Short() {
		stories = 40
	}
	f := e.fixture(5)
	var batch []bus.PublishMessage
	for i := 0; i < per; i++ {
		for s := 0; s < stories; s++ {
			batch = append(batch, msg(fmt.Sprintf("s%03d-%02d", s, i), fmt.Sprintf("story-%03d", s)))
			if len(batch) == 100 {
				e.publish(f.WS, f.P, T0, batch...)
				batch = nil
			}
		}
	}
	if len(batch) > 0 {
		e.publish(f.WS, f.P, T0, batch...)
	}
	total := int64(stories * per)
	now := at(time.Second)
	orderKey := func(d bus.Delivery) (string, int) {
		var s, i int
		_, _ = fmt.Sscanf(d.MessageID, "s%03d-%02d", &s, &i)
		return d.CorrelationID, i
	}
	var acked atomic.Int64
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	c := newChecker(e.t, cancel)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for acked.Load() < total && ctx.Err() == nil {
				r, ok := e.receiveBatch(ctx, f.Q, now)
				if !ok {
					return
				}
				if len(r.Deliveries) == 0 {
					runtime.Gosched()
					continue
				}
				if len(r.Deliveries) > 10 {
					e.t.Errorf("receive(max 10) returned %d", len(r.Deliveries))
				}
				c.took(r.Deliveries, orderKey)
				for _, d := range r.Deliveries {
					if d.ReceiveCount != 1 {
						e.t.Errorf("%s ReceiveCount = %d, want 1", d.MessageID, d.ReceiveCount)
					}
				}
				if !e.ackTaken(ctx, c, f.Q, r.Deliveries, now, &acked) {
					return
				}
			}
		})
	}
	e.waitDrained(ctx, &wg, c, &acked, total)
	for s := 0; s < stories; s++ {
		if n := c.next[fmt.Sprintf("story-%03d", s)]; n != per {
			e.t.Errorf("story-%03d: %d messages delivered, want %d", s, n, per)
		}
	}
	e.wantStats(f.Q, now, bus.QueueStats{})
	wantIDs(e.t, e.receive(f.Q, 10, time.Hour, now))
}

// testConcurrentPublishReceive: producers publish one message per call into
// shared stories while receivers drain the queue. Each producer's messages
// of a story must come in the order it published them.
func testConcurrentPublishReceive(e *env) {
	producers, per, stories, receivers := 4, 40, 5, 4
	if testing.Short() {
		per = 15
	}
	f := e.fixture(5)
	ps := make([]string, producers)
	for i := range ps {
		ps[i] = e.producer(f.WS)
	}
	total := int64(producers * per)
	now := at(time.Second)
	orderKey := func(d bus.Delivery) (string, int) {
		var p, i int
		_, _ = fmt.Sscanf(d.MessageID, "p%d-%d", &p, &i)
		return fmt.Sprintf("%s/p%d", d.CorrelationID, p), i / stories
	}
	var acked atomic.Int64
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	c := newChecker(e.t, cancel)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range per {
				m := msg(fmt.Sprintf("p%d-%d", p, i), fmt.Sprintf("story-%d", i%stories))
				out, err := e.s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: f.WS, ProducerID: ps[p], Messages: []bus.PublishMessage{m}, Now: now, DedupWindow: dedupWindow})
				if err != nil {
					if ctx.Err() == nil {
						e.t.Errorf("MessagePublish: %v", err)
					}
					return
				}
				if len(out) != 1 || out[0].Deliveries != 1 || out[0].Duplicate {
					e.t.Errorf("publish outcome %+v", out)
				}
			}
		})
	}
	for range receivers {
		wg.Go(func() {
			for acked.Load() < total && ctx.Err() == nil {
				r, ok := e.receiveBatch(ctx, f.Q, now)
				if !ok {
					return
				}
				if len(r.Deliveries) == 0 {
					runtime.Gosched()
					continue
				}
				c.took(r.Deliveries, orderKey)
				if !e.ackTaken(ctx, c, f.Q, r.Deliveries, now, &acked) {
					return
				}
			}
		})
	}
	e.waitDrained(ctx, &wg, c, &acked, total)
	e.wantStats(f.Q, now, bus.QueueStats{})
}

// testConcurrentNack: receivers release every message once (delay 0) and
// acknowledge it on its second delivery. Order and the one-in-flight rule
// must hold through the releases.
func testConcurrentNack(e *env) {
	stories, per, workers := 30, 5, 6
	if testing.Short() {
		stories = 10
	}
	f := e.fixture(5)
	var batch []bus.PublishMessage
	for i := 0; i < per; i++ {
		for s := 0; s < stories; s++ {
			batch = append(batch, msg(fmt.Sprintf("s%03d-%02d", s, i), fmt.Sprintf("story-%03d", s)))
		}
	}
	e.publish(f.WS, f.P, T0, batch...)
	total := int64(stories * per)
	now := at(time.Second)
	var mu sync.Mutex
	inFlight := map[string]string{}
	seen := map[string]int{} // message -> deliveries
	next := map[string]int{} // story -> next index to be acknowledged
	var errs atomic.Int32
	var acked atomic.Int64
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) {
		cancel() // stop at the first broken rule
		if errs.Add(1) <= 20 {
			e.t.Errorf(format, args...)
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for acked.Load() < total && ctx.Err() == nil {
				r, ok := e.receiveBatch(ctx, f.Q, now)
				if !ok {
					return
				}
				if len(r.Deliveries) == 0 {
					runtime.Gosched()
					continue
				}
				var ack, nack []bus.Handle
				mu.Lock()
				for _, d := range r.Deliveries {
					if other, busy := inFlight[d.CorrelationID]; busy {
						fail("story %s: %s delivered while %s is in flight", d.CorrelationID, d.MessageID, other)
					}
					inFlight[d.CorrelationID] = d.MessageID
					var s, i int
					_, _ = fmt.Sscanf(d.MessageID, "s%03d-%02d", &s, &i)
					if i != next[d.CorrelationID] {
						fail("%s delivered while #%d of its story is not acknowledged", d.MessageID, next[d.CorrelationID])
					}
					seen[d.MessageID]++
					if d.ReceiveCount != seen[d.MessageID] {
						fail("%s ReceiveCount %d on delivery %d", d.MessageID, d.ReceiveCount, seen[d.MessageID])
					}
					switch seen[d.MessageID] {
					case 1:
						nack = append(nack, d.Handle)
					case 2:
						ack = append(ack, d.Handle)
						next[d.CorrelationID] = i + 1
					default:
						fail("%s delivered %d times", d.MessageID, seen[d.MessageID])
					}
				}
				mu.Unlock()
				runtime.Gosched() // let other receivers run while these are marked in flight
				mu.Lock()
				for _, d := range r.Deliveries {
					delete(inFlight, d.CorrelationID)
				}
				mu.Unlock()
				for _, x := range []struct {
					hs   []bus.Handle
					nack bool
				}{{nack, true}, {ack, false}} {
					if len(x.hs) == 0 {
						continue
					}
					p := &bus.SettleParams{QueueID: f.Q, Handles: x.hs, Now: now}
					var res []bus.SettleResult
					var err error
					if x.nack {
						res, err = e.s.MessageNack(ctx, p)
					} else {
						res, err = e.s.MessageAck(ctx, p)
					}
					if err != nil {
						if ctx.Err() == nil {
							e.t.Errorf("settle: %v", err)
						}
						return
					}
					for _, r := range res {
						if !r.OK {
							fail("settle failed: %+v", r)
						}
					}
					if !x.nack {
						acked.Add(int64(len(x.hs)))
					}
				}
			}
		})
	}
	wg.Wait()
	if e.t.Failed() {
		e.t.FailNow()
	}
	if ctx.Err() != nil {
		e.t.Fatalf("timed out with %d of %d acknowledged", acked.Load(), total)
	}
	if int64(len(seen)) != total {
		e.t.Errorf("%d distinct messages delivered, want %d", len(seen), total)
	}
	e.wantStats(f.Q, now, bus.QueueStats{})
}
