package loadcheck

import (
	"fmt"
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
	msg *message
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

// message is what the checker knows about one message.
type message struct {
	id         string
	story, seq int
	accepted   bool
	deliveries []*delivery
	// ackedAt is when the first acknowledgement answered OK was read,
	// ackedRC the receive count of the delivery it acknowledged.
	ackedAt     time.Time
	ackedHandle string
	ackedRC     int
}

// story is what the checker knows about one story.
type story struct {
	seqs map[int]*message
	// recent are its deliveries that may still be in flight, or were
	// recently.
	recent []*delivery
}

// Checker checks a run's events as they happen and at the end. Its
// methods are safe for concurrent use; events must be reported in the
// order they happened: a settlement before it is sent (SettleSent), a
// delivery and an acknowledgement after their answers were read.
type Checker struct {
	mu         sync.Mutex
	msgs       map[string]*message
	stories    map[int]*story
	handles    map[string]*delivery
	violations map[string]int64
	examples   []string

	accepted, delivered, deliveries, duplicates, acked int64
	// ackedAccepted counts the accepted messages acknowledged OK.
	ackedAccepted int64
}

// NewChecker returns a checker with no events.
func NewChecker() *Checker {
	return &Checker{
		msgs: map[string]*message{}, stories: map[int]*story{}, handles: map[string]*delivery{},
		violations: map[string]int64{RuleLost: 0, RuleOrder: 0, RuleResurrected: 0},
	}
}

func (c *Checker) message(id string, st, seq int) *message {
	m := c.msgs[id]
	if m == nil {
		m = &message{id: id, story: st, seq: seq}
		c.msgs[id] = m
		s := c.story(st)
		s.seqs[seq] = m
	}
	return m
}

func (c *Checker) story(st int) *story {
	s := c.stories[st]
	if s == nil {
		s = &story{seqs: map[int]*message{}}
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

// Accepted records that the bus accepted the publish of message seq of
// story st (its answer was read).
func (c *Checker) Accepted(id string, st, seq int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.message(id, st, seq)
	if !m.accepted {
		m.accepted = true
		c.accepted++
		if !m.ackedAt.IsZero() {
			c.ackedAccepted++
		}
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
	m := c.message(d.MessageID, d.Story, d.Seq)
	dl := &delivery{Delivery: d, msg: m}
	c.handles[d.Handle] = dl
	c.deliveries++
	first = len(m.deliveries) == 0
	m.deliveries = append(m.deliveries, dl)
	s := c.story(d.Story)
	if first {
		c.delivered++
		if d.Seq > 0 {
			if prev := s.seqs[d.Seq-1]; prev == nil || len(prev.deliveries) == 0 {
				c.violate(RuleOrder, "story %d: message %d (%s) first delivered before message %d", d.Story, d.Seq, d.MessageID, d.Seq-1)
			}
		}
	} else {
		c.duplicates++
	}
	if c.resurrects(m, dl) {
		c.violate(RuleResurrected, "%s delivered again (receive answered %s) after its ack was answered OK at %s",
			m.id, d.Answered.Format(time.RFC3339Nano), m.ackedAt.Format(time.RFC3339Nano))
	}
	// Two messages of the story in flight together: both certainly held at
	// one instant, by different receives.
	kept := s.recent[:0]
	for _, o := range s.recent {
		if o.end().Before(d.Answered.Add(-time.Minute)) {
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

// resurrects says whether delivery d of m comes back after an
// acknowledgement answered OK: a later delivery (another handle, not an
// earlier receive count) whose receive was answered after the ack's.
func (c *Checker) resurrects(m *message, d *delivery) bool {
	return !m.ackedAt.IsZero() && d.Handle != m.ackedHandle && d.ReceiveCount >= m.ackedRC && d.Answered.After(m.ackedAt)
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

// Acked records that the bus answered an ack of handle OK at at.
func (c *Checker) Acked(handle string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.handles[handle]
	if d == nil {
		return
	}
	m := d.msg
	if !m.ackedAt.IsZero() {
		return
	}
	m.ackedAt, m.ackedHandle, m.ackedRC = at, handle, d.ReceiveCount
	c.acked++
	if m.accepted {
		c.ackedAccepted++
	}
	// A redelivery recorded before this answer could be.
	for _, o := range m.deliveries {
		if c.resurrects(m, o) {
			c.violate(RuleResurrected, "%s delivered again (receive answered %s) after its ack was answered OK at %s",
				m.id, o.Answered.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
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
	for _, m := range c.msgs {
		if m.accepted && len(m.deliveries) == 0 {
			c.violate(RuleLost, "%s (story %d, message %d) accepted, never delivered", m.id, m.story, m.seq)
		}
	}
	ex := append([]string(nil), c.examples...)
	c.mu.Unlock()
	return c.Counts(), ex
}
