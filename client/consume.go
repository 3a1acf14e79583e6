package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Handler handles one message. Returning nil acknowledges it; returning an
// error releases it, to be delivered again after a backoff. The context is
// not cancelled when Consume shuts down: a handler in flight finishes (bound
// its work yourself if it may take long).
type Handler func(ctx context.Context, m *Message) error

// ConsumeOptions tune Consume. Zero values are sensible defaults.
type ConsumeOptions struct {
	// Workers is how many messages are handled at once, across stories;
	// messages of one story are always handled one at a time, in order.
	// 0 is 10.
	Workers int
	// Buffer is the most messages held at once (received and not yet
	// settled); receives ask for no more than there is room for. 0 is
	// twice Workers, at least Max.
	Buffer int
	// Max is the most messages asked for per receive (1 to 10); 0 is 10.
	Max int
	// Wait is the long poll of each receive; 0 is 20 s.
	Wait time.Duration
	// Visibility is how long received messages stay hidden; 0 is 60 s. A
	// message whose handler takes longer may be delivered again.
	Visibility time.Duration
	// Backoff is the release delay of a message whose handler failed, by
	// its receive count (1 for the first delivery). nil is exponential:
	// MinBackoff·2^(receive_count−1), capped at MaxBackoff.
	Backoff func(receiveCount int) time.Duration
	// MinBackoff and MaxBackoff shape the default Backoff; 0 is 1 s and
	// 5 min.
	MinBackoff, MaxBackoff time.Duration
	// DedupSize is how many handled message ids are remembered, to drop a
	// message delivered again after it was handled (acknowledged without
	// calling the handler). 0 is 10,000; negative turns deduplication off.
	DedupSize int
	// Snapshots turns on the snapshot filter: a message whose envelope (or,
	// failing that, payload) carries story_id and sequence_number is dropped
	// (acknowledged without calling the handler) when a message with a
	// higher sequence_number of the same story_id was handled already.
	Snapshots bool
	// SnapshotSize is how many story_ids the filter remembers; 0 is 10,000.
	SnapshotSize int
	// OnError is told about errors Consume carries on after: handler
	// errors, failed receives that will be retried, settle failures. It
	// may be called from several goroutines at once. nil ignores them.
	OnError func(error)
	// Logger is told the same errors, at Warn, as a message and snake_case
	// attributes (error, message_id, retry_in …); it never sees a secret,
	// token or receipt handle. nil logs nothing.
	Logger *slog.Logger
	// ShutdownTimeout bounds the final acknowledgements and releases after
	// the context is cancelled and the handlers in flight finished; 0 is 10 s.
	ShutdownTimeout time.Duration
	// maxSettlers bounds concurrent ack/nack requests.
	maxSettlers int
}

func (o *ConsumeOptions) fill() error {
	if o.Workers <= 0 {
		o.Workers = 10
	}
	if o.Wait < 0 {
		// A receive that answers at once, in a loop, would spend the
		// connection's allowance on empty answers.
		return fmt.Errorf("sombus: ConsumeOptions.Wait must be 0 (20 s) to %s (got %s): Consume long-polls", MaxWait, o.Wait)
	}
	if o.Max == 0 {
		o.Max = MaxReceive
	}
	if o.Max < 1 || o.Max > MaxReceive {
		return fmt.Errorf("sombus: ConsumeOptions.Max must be 1 to %d (got %d)", MaxReceive, o.Max)
	}
	if o.Buffer <= 0 {
		o.Buffer = max(2*o.Workers, o.Max)
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.DedupSize == 0 {
		o.DedupSize = 10000
	}
	if o.SnapshotSize <= 0 {
		o.SnapshotSize = 10000
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.maxSettlers <= 0 {
		o.maxSettlers = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// backoff is the release delay after a failed handling.
func (o *ConsumeOptions) backoff(receiveCount int) time.Duration {
	var d time.Duration
	if o.Backoff != nil {
		d = o.Backoff(receiveCount)
	} else {
		d = ExponentialBackoff(o.MinBackoff, o.MaxBackoff, receiveCount)
	}
	return min(max(d, 0), MaxNackDelay)
}

// ExponentialBackoff is base·2^(receiveCount−1), capped at ceiling.
func ExponentialBackoff(base, ceiling time.Duration, receiveCount int) time.Duration {
	n := max(receiveCount-1, 0)
	if n >= 62 || base<<n <= 0 || base<<n > ceiling {
		return ceiling
	}
	return base << n
}

// HandlerError is a handler's error (or panic) as reported to OnError.
type HandlerError struct {
	MessageID     string
	CorrelationID string
	ReceiveCount  int
	// Released is the release delay the message was given.
	Released time.Duration
	Err      error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("sombus: handler failed for message %s (story %s, delivery %d; released for %s): %v",
		e.MessageID, e.CorrelationID, e.ReceiveCount, e.Released, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }

// Consume runs the pull API's typical loop until ctx is cancelled: receive
// with a long poll, handle each message, acknowledge the handled ones (in
// batches), release the failed ones with a backoff; repeat.
//
//   - Handlers run concurrently across stories (correlation ids), and
//     strictly one at a time and in order within a story, also when a
//     message of a story is delivered again while an earlier one is still
//     being handled. When a handler fails, the story's later messages
//     already received are released too (delay 0), so that they come back
//     after it, in order.
//   - A message whose producer and message id were handled already is
//     acknowledged without calling the handler (bounded memory, see
//     DedupSize); the optional snapshot filter drops older snapshots.
//   - 429 and 503 answers are retried after Retry-After with jitter, and a
//     receive whose answer was lost is retried with the same attempt id,
//     which returns the same messages.
//   - When ctx is cancelled, the receive in progress is abandoned, handlers
//     in flight finish and are acknowledged, and messages received but not
//     started are released at once.
//
// Consume returns nil after a shutdown by ctx, or the error that made it
// stop: a refusal that retrying cannot fix (revoked credentials, a removed
// connection …), after the same orderly shutdown.
func (c *Consumer) Consume(ctx context.Context, h Handler, opts ConsumeOptions) error {
	if h == nil {
		return errors.New("sombus: Consume needs a handler")
	}
	if err := opts.fill(); err != nil {
		return err
	}
	l := &consumeLoop{
		c: c, h: h, o: opts,
		stories:  map[string]*story{},
		slots:    make(chan struct{}, opts.Buffer),
		settleCh: make(chan settleItem, opts.Buffer),
	}
	l.cond = sync.NewCond(&l.mu)
	if opts.DedupSize > 0 {
		l.dedup = newLRU[string, struct{}](opts.DedupSize)
	}
	if opts.Snapshots {
		l.snaps = newLRU[string, int64](opts.SnapshotSize)
	}
	return l.run(ctx)
}

// consumeLoop is one run of Consume.
type consumeLoop struct {
	c *Consumer
	h Handler
	o ConsumeOptions

	mu       sync.Mutex
	cond     *sync.Cond
	stories  map[string]*story // correlation id -> its held messages
	ready    []*story          // stories with messages and no handler running
	stopping bool

	// slots holds one token per held message (received, not yet settled).
	slots chan struct{}
	// settleCh carries every held message's settlement, exactly one each.
	settleCh chan settleItem

	dedup *lru[string, struct{}]
	snaps *lru[string, int64]
}

// story is the held messages of one correlation id, in delivery order.
type story struct {
	key     string
	msgs    []*Message
	running bool // a worker is handling its head
	queued  bool // it is in ready
}

// settleItem is one acknowledgement or release.
type settleItem struct {
	handle string
	nack   bool
	delay  time.Duration
}

// report tells OnError about err and logs msg at Warn with err and attrs
// (snake_case keys; never a secret, token or receipt handle).
func (l *consumeLoop) report(err error, msg string, attrs ...any) {
	if l.o.OnError != nil && err != nil {
		l.o.OnError(err)
	}
	l.o.Logger.Warn(msg, append([]any{"error", err}, attrs...)...)
}

func (l *consumeLoop) run(ctx context.Context) error {
	// Settlements and handlers outlive ctx: in-flight work finishes and is
	// acknowledged after a shutdown.
	base := context.WithoutCancel(ctx)
	sctx, scancel := context.WithCancel(base)
	defer scancel()
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		l.settleLoop(sctx)
	}()
	var workers sync.WaitGroup
	for range l.o.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			l.work(base)
		}()
	}

	err := l.receiveLoop(ctx)

	// Shutdown: no new handler starts; the running ones finish.
	l.mu.Lock()
	l.stopping = true
	l.cond.Broadcast()
	l.mu.Unlock()
	workers.Wait()
	// Release what was received and not started, oldest first per story.
	l.mu.Lock()
	for _, st := range l.stories {
		for _, m := range st.msgs {
			l.settleCh <- settleItem{handle: m.ReceiptHandle, nack: true}
		}
		st.msgs = nil
	}
	l.stories = map[string]*story{}
	l.mu.Unlock()
	close(l.settleCh)
	t := time.NewTimer(l.o.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-settled:
	case <-t.C:
		scancel()
		<-settled
	}
	return err
}

// receiveLoop receives while there is room, until ctx is done or a
// refusal that retrying cannot fix.
func (l *consumeLoop) receiveLoop(ctx context.Context) error {
	attempt := ""
	failures := 0
	for {
		// Wait for room for at least one message, then take what else is free.
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < l.o.Max {
			select {
			case l.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		if attempt == "" {
			attempt = NewAttemptID()
		}
		msgs, err := l.c.Receive(ctx, ReceiveOptions{Max: n, Wait: l.o.Wait, Visibility: l.o.Visibility, AttemptID: attempt})
		if err != nil {
			l.freeSlots(n)
			if ctx.Err() != nil {
				return nil
			}
			wait, ok := transient(err, failures)
			if !ok {
				return err
			}
			failures++
			// Keep the attempt id: if the answer was lost, the retry gets
			// the same messages back instead of waiting for their visibility.
			l.report(fmt.Errorf("sombus: receive failed, retrying in %s: %w", wait.Round(time.Millisecond), err),
				"sombus: receive failed, retrying", "retry_in", wait.Round(time.Millisecond), "failures", failures)
			if sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		attempt, failures = "", 0
		l.freeSlots(n - len(msgs))
		for i := range msgs {
			l.enqueue(&msgs[i])
		}
	}
}

// transient says whether a receive error may go away, and the wait before
// trying again.
func transient(err error, failures int) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable:
			return jitter(e.RetryAfter), true
		case e.Status >= 500:
			return backoff(failures), true
		}
		return 0, false
	}
	return backoff(failures), true
}

func (l *consumeLoop) freeSlots(n int) {
	for range max(n, 0) {
		<-l.slots
	}
}

// enqueue appends m to its story and makes the story ready unless a
// handler of it is running.
func (l *consumeLoop) enqueue(m *Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stories[m.CorrelationID]
	if st == nil {
		st = &story{key: m.CorrelationID}
		l.stories[m.CorrelationID] = st
	}
	st.msgs = append(st.msgs, m)
	if !st.running && !st.queued {
		st.queued = true
		l.ready = append(l.ready, st)
		l.cond.Signal()
	}
}

// work handles the heads of ready stories until shutdown.
func (l *consumeLoop) work(ctx context.Context) {
	for {
		l.mu.Lock()
		for len(l.ready) == 0 && !l.stopping {
			l.cond.Wait()
		}
		if l.stopping {
			l.mu.Unlock()
			return
		}
		st := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		st.queued, st.running = false, true
		m := st.msgs[0]
		st.msgs = st.msgs[1:]
		l.mu.Unlock()

		ok := l.process(ctx, m)

		l.mu.Lock()
		st.running = false
		if !ok {
			// Keep the story's order: what was received after the failed
			// message goes back too, to come again after it.
			for _, later := range st.msgs {
				l.settleCh <- settleItem{handle: later.ReceiptHandle, nack: true}
			}
			st.msgs = nil
		}
		if len(st.msgs) > 0 {
			st.queued = true
			l.ready = append(l.ready, st)
			l.cond.Signal()
		} else {
			delete(l.stories, st.key)
		}
		l.mu.Unlock()
	}
}

// process filters and handles one message and queues its settlement; it
// reports whether the message is done with (false: it was released).
func (l *consumeLoop) process(ctx context.Context, m *Message) bool {
	dk := m.ProducerID + "\x00" + m.MessageID
	if l.dedup != nil && m.MessageID != "" {
		if _, seen := l.dedup.get(dk); seen {
			l.settleCh <- settleItem{handle: m.ReceiptHandle}
			return true
		}
	}
	snapKey, seq, isSnap := "", int64(0), false
	if l.snaps != nil {
		snapKey, seq, isSnap = snapshotOf(m)
		if isSnap {
			if hi, ok := l.snaps.get(snapKey); ok && seq < hi {
				l.settleCh <- settleItem{handle: m.ReceiptHandle}
				return true
			}
		}
	}
	if err := l.call(ctx, m); err != nil {
		delay := l.o.backoff(m.ReceiveCount)
		l.report(&HandlerError{MessageID: m.MessageID, CorrelationID: m.CorrelationID, ReceiveCount: m.ReceiveCount, Released: delay, Err: err},
			"sombus: handler failed, message released", "message_id", m.MessageID, "correlation_id", m.CorrelationID,
			"receive_count", m.ReceiveCount, "release_delay", delay)
		l.settleCh <- settleItem{handle: m.ReceiptHandle, nack: true, delay: delay}
		return false
	}
	if l.dedup != nil && m.MessageID != "" {
		l.dedup.put(dk, struct{}{})
	}
	if isSnap {
		l.snaps.update(snapKey, func(old int64, found bool) int64 {
			if found && old > seq {
				return old
			}
			return seq
		})
	}
	l.settleCh <- settleItem{handle: m.ReceiptHandle}
	return true
}

// call runs the handler, turning a panic into an error.
func (l *consumeLoop) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return l.h(ctx, m)
}

// snapshotOf reads story_id and sequence_number from the envelope, or else
// from its payload.
func snapshotOf(m *Message) (string, int64, bool) {
	type fields struct {
		StoryID json.RawMessage `json:"story_id"`
		Seq     json.RawMessage `json:"sequence_number"`
	}
	read := func(raw json.RawMessage) (string, int64, bool) {
		var f fields
		if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || len(f.StoryID) == 0 || len(f.Seq) == 0 || string(f.StoryID) == "null" {
			return "", 0, false
		}
		seq, err := strconv.ParseInt(string(f.Seq), 10, 64)
		if err != nil {
			fl, ferr := strconv.ParseFloat(string(f.Seq), 64)
			if ferr != nil || math.IsNaN(fl) || math.IsInf(fl, 0) {
				return "", 0, false
			}
			seq = int64(fl)
		}
		return string(f.StoryID), seq, true
	}
	if k, s, ok := read(m.Envelope); ok {
		return k, s, true
	}
	return read(m.Payload)
}

// settleLoop sends the settlements in batches: whatever has queued up, up
// to 10 handles a request, releases grouped by delay, a few requests at once.
func (l *consumeLoop) settleLoop(ctx context.Context) {
	sem := make(chan struct{}, l.o.maxSettlers)
	var wg sync.WaitGroup
	send := func(handles []string, nack bool, delay time.Duration) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var res *SettleResult
			var err error
			if nack {
				res, err = l.c.Nack(ctx, handles, delay)
			} else {
				res, err = l.c.Ack(ctx, handles...)
			}
			verb := "acknowledge"
			if nack {
				verb = "release"
			}
			if err != nil {
				l.report(fmt.Errorf("sombus: %s %d messages: %w", verb, len(handles), err),
					"sombus: "+verb+" failed", "messages", len(handles))
			} else if len(res.Failed) > 0 {
				// A handle of a delivery that is no longer the latest: the
				// message was received again and will be dealt with then.
				l.report(fmt.Errorf("sombus: %s: %d of %d handles failed (%s: %s)", verb, len(res.Failed), len(handles), res.Failed[0].Code, res.Failed[0].Message),
					"sombus: "+verb+": some handles failed", "failed", len(res.Failed), "messages", len(handles),
					"code", res.Failed[0].Code)
			}
			l.freeSlots(len(handles))
		}()
	}
	open := true
	for open {
		it, ok := <-l.settleCh
		if !ok {
			break
		}
		batch := []settleItem{it}
	drain:
		for len(batch) < 100 {
			select {
			case it, ok := <-l.settleCh:
				if !ok {
					open = false
					break drain
				}
				batch = append(batch, it)
			default:
				break drain
			}
		}
		var acks []string
		nacks := map[time.Duration][]string{}
		var delays []time.Duration
		for _, it := range batch {
			if !it.nack {
				acks = append(acks, it.handle)
				continue
			}
			if _, ok := nacks[it.delay]; !ok {
				delays = append(delays, it.delay)
			}
			nacks[it.delay] = append(nacks[it.delay], it.handle)
		}
		for len(acks) > 0 {
			n := min(len(acks), MaxSettleHandles)
			send(acks[:n], false, 0)
			acks = acks[n:]
		}
		for _, d := range delays {
			hs := nacks[d]
			for len(hs) > 0 {
				n := min(len(hs), MaxSettleHandles)
				send(hs[:n], true, d)
				hs = hs[n:]
			}
		}
	}
	wg.Wait()
}
