package loadcheck

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The rules the checker proves.
const (
	// RuleLost: a publish the bus accepted was never delivered, even after
	// the drain.
	RuleLost = "LOST"
	// RuleOrder: within a story, a message was first delivered before an
	// earlier one, or two messages of the story were in flight together
	// (handed out by different receives).
	RuleOrder = "ORDER"
	// RuleResurrected: a message whose acknowledgement was answered OK was
	// delivered again by a receive answered after that answer.
	RuleResurrected = "RESURRECTED"
)

// maxExamples bounds the violations the checker describes in words.
const maxExamples = 50

// Delivery is one message of one receive answer, as the checker sees it.
type Delivery struct {
	MessageID string
	Story     int
	Seq       int
	Handle    string
	// ReceiveID names the receive (its attempt id): messages handed out
	// by one receive may be consecutive messages of one story.
	ReceiveID    string
	ReceiveCount int
	// Sent is when the receive was first sent, Answered when its answer
	// was read: the bus handed the message out in between.
	Sent, Answered time.Time
	// Visibility is the receive's visibility timeout.
	Visibility time.Duration
}

// delivery is a Delivery with what became of it.
type delivery struct {
	Delivery
	// settleSent is when an ack or nack of its handle was first sent:
	// from then on it may no longer be in flight.
	settleSent time.Time
}

// end is the latest instant at which the delivery is certainly still in
// flight: its settlement was sent, or its visibility (counted from the
// receive's sending, the earliest the bus can have handed it out) ran
// out, less a margin for the two clocks.
func (d *delivery) end() time.Time {
	margin := 50*time.Millisecond + d.Visibility/100
	e := d.Sent.Add(d.Visibility - margin)
	if !d.settleSent.IsZero() && d.settleSent.Before(e) {
		e = d.settleSent
	}
	return e
}

// forgetAfter is how long after its acknowledgement was answered OK the
// checker keeps what it knows of a message that was accepted, delivered
// and acknowledged; then only the story's count of such messages remains
// (see story.base). A delivery recorded later is certainly answered after
// that acknowledgement, by a later receive: a resurrection. Far longer
// than a receive's answer takes to be recorded.
const forgetAfter = time.Minute

// recordSlack bounds how long after its answer was read a delivery is
// recorded (Delivered): a receiver records its answer's messages at once,
// and a delivery that ended longer ago than this before the latest one
// recorded can overlap no delivery recorded from then on. Each delivery
// recorded is compared with its story's deliveries of this span, so it
// is short: at 4,000 deliveries a second over 10 stories a minute would
// be 24,000 comparisons a delivery.
const recordSlack = 10 * time.Second

// Message flags.
const (
	accepted uint8 = 1 << iota
	delivered
	acked
)

// message is what the checker keeps of one message: no pointers, so that a
// long run's messages cost the garbage collector nothing to scan. Handles
// are kept as hashes.
type message struct {
	flags uint8
	// ackedRC is the receive count of the delivery the first
	// acknowledgement answered OK acknowledged, ackedHandle its handle,
	// ackedAt when that answer was read (as Checker.since).
	ackedRC     int32
	ackedHandle uint64
	ackedAt     int64
	// lastRC, lastHandle and lastAnswered are those of the delivery
	// recorded with the latest answer.
	lastRC       int32
	lastHandle   uint64
	lastAnswered int64
}

// resurrects says whether a delivery (receive count rc, handle h,
// answered at ans) of m comes back after an acknowledgement answered OK:
// a later delivery (another handle, not an earlier receive count) whose
// receive was answered after the ack's.
func (m *message) resurrects(rc int32, h uint64, ans int64) bool {
	return m.flags&acked != 0 && h != m.ackedHandle && rc >= m.ackedRC && ans > m.ackedAt
}

// story is what the checker knows about one story.
type story struct {
	// base counts the story's first messages that were forgotten: each
	// was accepted, delivered, and acknowledged OK more than forgetAfter
	// before. msgs are the messages from base on, by sequence number.
	base int
	msgs []message
	// recent are its deliveries that may still be in flight, or were
	// recently.
	recent []*delivery
}

// maxAhead bounds how far past a story's known messages a delivery's
// sequence number may go before the checker refuses to make room for it
// (a corrupt payload must not make it allocate without bound).
const maxAhead = 1 << 20

// at returns message seq of s, making room for it; nil for a forgotten
// message or one too far ahead.
func (s *story) at(seq int) *message {
	i := seq - s.base
	if i < 0 || i >= len(s.msgs)+maxAhead {
		return nil
	}
	if i >= len(s.msgs) {
		s.msgs = append(s.msgs, make([]message, i+1-len(s.msgs))...)
	}
	return &s.msgs[i]
}

// forget drops the story's first messages while they were accepted,
// delivered and acknowledged OK before cutoff (as Checker.since). A
// message never acknowledged keeps the ones after it.
func (s *story) forget(cutoff int64) {
	const done = accepted | delivered | acked
	n := 0
	for n < len(s.msgs) && s.msgs[n].flags&done == done && s.msgs[n].ackedAt < cutoff {
		n++
	}
	if n == 0 {
		return
	}
	s.base += n
	s.msgs = s.msgs[n:]
	if len(s.msgs) == 0 {
		s.msgs = nil // let the array go
	}
}

// msgKey names a message by story and sequence number.
type msgKey struct{ story, seq int }

// Checker checks a run's events as they happen and at the end. Its
// methods are safe for concurrent use; events must be reported in the
// order they happened: a settlement before it is sent (SettleSent), a
// delivery and an acknowledgement after their answers were read.
//
// Its memory does not grow with the length of a run: it keeps messages
// until they are acknowledged and a while after (forgetAfter), and the
// handles of deliveries until their settlement was answered (Acked,
// Released).
type Checker struct {
	mu         sync.Mutex
	stories    map[int]*story
	handles    map[string]*delivery
	violations map[string]int64
	examples   []string
	// ids are the message ids of messages accepted and not yet
	// delivered, for the words of a LOST violation.
	ids map[msgKey]string
	// epoch is when the checker was made: the times it keeps are
	// nanoseconds since (time.Time.Sub, on the monotonic clock).
	epoch time.Time

	accepted, delivered, deliveries, duplicates, acked int64
	// ackedAccepted counts the accepted messages acknowledged OK.
	ackedAccepted int64
}

// NewChecker returns a checker with no events.
func NewChecker() *Checker {
	return &Checker{
		stories: map[int]*story{}, handles: map[string]*delivery{}, ids: map[msgKey]string{}, epoch: time.Now(),
		violations: map[string]int64{RuleLost: 0, RuleOrder: 0, RuleResurrected: 0},
	}
}

func (c *Checker) story(st int) *story {
	s := c.stories[st]
	if s == nil {
		s = &story{}
		c.stories[st] = s
	}
	return s
}

func (c *Checker) violate(rule, format string, args ...any) {
	c.violations[rule]++
	if len(c.examples) < maxExamples {
		c.examples = append(c.examples, rule+": "+fmt.Sprintf(format, args...))
	}
}

// since is t as the checker keeps it; wall is the inverse, for the words
// of a violation.
func (c *Checker) since(t time.Time) int64 { return int64(t.Sub(c.epoch)) }
func (c *Checker) wall(n int64) string {
	return c.epoch.Add(time.Duration(n)).UTC().Format(time.RFC3339Nano)
}

// hash is a handle's 64-bit FNV-1a hash.
func hash(h string) uint64 {
	x := uint64(14695981039346656037)
	for i := 0; i < len(h); i++ {
		x ^= uint64(h[i])
		x *= 1099511628211
	}
	return x
}

// Accepted records that the bus accepted the publish of message seq of
// story st (its answer was read).
func (c *Checker) Accepted(id string, st, seq int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.story(st).at(seq)
	if m == nil || m.flags&accepted != 0 {
		return // forgotten: it was accepted before
	}
	m.flags |= accepted
	c.accepted++
	if m.flags&acked != 0 {
		c.ackedAccepted++
	}
	if m.flags&delivered == 0 {
		c.ids[msgKey{st, seq}] = id
	}
}

// Delivered records a delivery read in a receive's answer; first reports
// whether it is the message's first.
func (c *Checker) Delivered(d Delivery) (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.handles[d.Handle]; seen {
		return false // the same delivery again (a receive retried under its attempt id)
	}
	s := c.story(d.Story)
	h, rc, ans := hash(d.Handle), int32(d.ReceiveCount), c.since(d.Answered)
	m := s.at(d.Seq)
	if m != nil && m.flags&delivered != 0 && rc == m.lastRC && h == m.lastHandle ||
		m != nil && m.flags&acked != 0 && rc == m.ackedRC && h == m.ackedHandle {
		// The same delivery again, recorded after its settlement was
		// answered (the checker had let its handle go).
		return false
	}
	dl := &delivery{Delivery: d}
	c.handles[d.Handle] = dl
	c.deliveries++
	switch {
	case m == nil && (d.Seq < 0 || d.Seq >= s.base):
		c.violate(RuleOrder, "story %d: message %d (%s) delivered, out of the range of messages known", d.Story, d.Seq, d.MessageID)
	case m == nil:
		// Forgotten: accepted, delivered and acknowledged OK more than
		// forgetAfter ago, and now delivered by a receive answered later.
		c.duplicates++
		c.violate(RuleResurrected, "%s delivered again (receive answered %s) more than %s after its ack was answered OK",
			d.MessageID, d.Answered.UTC().Format(time.RFC3339Nano), forgetAfter)
	default:
		first = m.flags&delivered == 0
		if first {
			m.flags |= delivered
			delete(c.ids, msgKey{d.Story, d.Seq})
			c.delivered++
			if d.Seq > 0 {
				if prev := s.at(d.Seq - 1); prev != nil && prev.flags&delivered == 0 {
					c.violate(RuleOrder, "story %d: message %d (%s) first delivered before message %d", d.Story, d.Seq, d.MessageID, d.Seq-1)
				}
			}
		} else {
			c.duplicates++
		}
		if m.resurrects(rc, h, ans) {
			c.violate(RuleResurrected, "%s delivered again (receive answered %s) after its ack was answered OK at %s",
				d.MessageID, d.Answered.UTC().Format(time.RFC3339Nano), c.wall(m.ackedAt))
		}
		if first || ans >= m.lastAnswered {
			m.lastRC, m.lastHandle, m.lastAnswered = rc, h, ans
		}
	}
	// Two messages of the story in flight together: both certainly held at
	// one instant, by different receives.
	kept := s.recent[:0]
	for _, o := range s.recent {
		if o.end().Before(d.Answered.Add(-recordSlack)) {
			continue // long over: it can overlap nothing recorded from now on
		}
		kept = append(kept, o)
		if o.ReceiveID == d.ReceiveID {
			continue
		}
		if d.Answered.Before(o.end()) && o.Answered.Before(dl.end()) {
			c.violate(RuleOrder, "story %d: message %d (%s) delivered while message %d (%s) was in flight",
				d.Story, d.Seq, d.MessageID, o.Seq, o.MessageID)
		}
	}
	s.recent = append(kept, dl)
	return first
}

// SettleSent records that an ack or a nack of handle is about to be sent
// for the first time.
func (c *Checker) SettleSent(handle string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.handles[handle]; d != nil && d.settleSent.IsZero() {
		d.settleSent = at
	}
}

// Acked records that the bus answered an ack of handle OK at at. The
// handle's delivery is done: the checker forgets the handle.
func (c *Checker) Acked(handle string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.handles[handle]
	if d == nil {
		return
	}
	delete(c.handles, handle)
	s := c.story(d.Story)
	m := s.at(d.Seq)
	if m == nil || m.flags&acked != 0 {
		return
	}
	m.flags |= acked
	m.ackedAt, m.ackedHandle, m.ackedRC = c.since(at), hash(handle), int32(d.ReceiveCount)
	c.acked++
	if m.flags&accepted != 0 {
		c.ackedAccepted++
	}
	// A redelivery recorded before this answer could be (the one
	// answered last is kept).
	if m.resurrects(m.lastRC, m.lastHandle, m.lastAnswered) {
		c.violate(RuleResurrected, "%s delivered again (receive answered %s) after its ack was answered OK at %s",
			d.MessageID, c.wall(m.lastAnswered), at.UTC().Format(time.RFC3339Nano))
	}
	s.forget(c.since(at.Add(-forgetAfter)))
}

// Released records that the settlement of handle was answered without an
// acknowledgement (a release, or a refusal of the handle): its delivery
// is done, and the checker forgets the handle.
func (c *Checker) Released(handle string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.handles, handle)
}

// Counts are the checker's running totals.
type Counts struct {
	// Accepted messages, Delivered at least once, Deliveries in all,
	// Duplicates (deliveries after the first), Acked (acknowledged OK).
	Accepted, Delivered, Deliveries, Duplicates, Acked int64
	// Violations by rule.
	Violations map[string]int64
}

// Counts returns the running totals.
func (c *Checker) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := make(map[string]int64, len(c.violations))
	for k, n := range c.violations {
		v[k] = n
	}
	return Counts{Accepted: c.accepted, Delivered: c.delivered, Deliveries: c.deliveries,
		Duplicates: c.duplicates, Acked: c.acked, Violations: v}
}

// Drained reports whether every accepted message was acknowledged.
func (c *Checker) Drained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ackedAccepted == c.accepted
}

// Finish runs the end checks (LOST) once the drain is over and returns
// the totals and up to 50 violations described in words.
func (c *Checker) Finish() (Counts, []string) {
	c.mu.Lock()
	keys := make([]msgKey, 0, len(c.ids))
	for k := range c.ids {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b msgKey) int { return cmp.Or(cmp.Compare(a.story, b.story), cmp.Compare(a.seq, b.seq)) })
	for _, k := range keys {
		c.violate(RuleLost, "%s (story %d, message %d) accepted, never delivered", c.ids[k], k.story, k.seq)
	}
	ex := append([]string(nil), c.examples...)
	c.mu.Unlock()
	return c.Counts(), ex
}
