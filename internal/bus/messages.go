package bus

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PublishResult is the answer for one published envelope.
type PublishResult struct {
	Accepted   bool        `json:"accepted"`
	MessageID  string      `json:"message_id,omitempty"`
	Topic      string      `json:"topic,omitempty"`
	Deliveries *int        `json:"deliveries,omitempty"`
	Duplicate  bool        `json:"duplicate,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// Publish checks envelopes and accepts the good ones in order, in one
// transaction; the answer has one result per envelope.
func (s *Service) Publish(ctx context.Context, workspaceID, producerID string, envelopes [][]byte) ([]PublishResult, error) {
	results := make([]PublishResult, len(envelopes))
	msgs := make([]PublishMessage, 0, len(envelopes))
	idx := make([]int, 0, len(envelopes))
	for i, raw := range envelopes {
		m, vs := CheckEnvelope(raw)
		if len(vs) > 0 {
			results[i] = PublishResult{Accepted: false, Violations: vs}
			continue
		}
		msgs = append(msgs, m)
		idx = append(idx, i)
	}
	if len(msgs) == 0 {
		return results, nil
	}
	outs, err := s.store.MessagePublish(ctx, &PublishParams{
		WorkspaceID: workspaceID, ProducerID: producerID, Messages: msgs, Now: s.clock.Now(), DedupWindow: DedupWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	s.metrics.Published(len(outs))
	placed := map[string]int{}           // queue -> messages placed in it
	deliveries := make([]int, len(outs)) // one allocation for every result's count
	for j, o := range outs {
		deliveries[j] = o.Deliveries
		results[idx[j]] = PublishResult{Accepted: true, MessageID: msgs[j].MessageID, Topic: msgs[j].Topic, Deliveries: &deliveries[j], Duplicate: o.Duplicate}
		for _, q := range o.QueueIDs {
			placed[q]++
		}
	}
	for q, n := range placed {
		s.notifier.Notify(q, n) // at most one waiter per new message
	}
	return results, nil
}

// ReceiveRequest is a checked receive.
type ReceiveRequest struct {
	QueueID    string
	Max        int
	Wait       time.Duration
	Visibility time.Duration
	AttemptID  string
}

// Receive takes up to Max messages, waiting up to Wait for the first. It
// answers as soon as at least one is ready, and with none when Wait runs
// out, the client goes away, or the server stops. When the store cannot be
// reached the answer is the 503 consumer.queue_unavailable refusal; any
// other store error is returned wrapped, a fault of the server.
func (s *Service) Receive(ctx context.Context, r ReceiveRequest) ([]Delivery, error) {
	// One timer for the whole wait, made when the first look finds nothing.
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		// Register for a wake-up before looking, so a publish landing between
		// the look and the wait is not missed.
		woken, cancel := s.notifier.Wait(r.QueueID)
		ds, done, err := s.look(ctx, &r, cancel)
		if done {
			return ds, err
		}
		if deadline == nil {
			if r.Wait <= 0 {
				s.passOn(r.QueueID, cancel)
				return nil, nil
			}
			deadline = time.NewTimer(r.Wait)
		}
		if !s.wait(ctx, woken, deadline.C) {
			s.passOn(r.QueueID, cancel)
			return nil, nil
		}
	}
}

// Waiting is a long poll that waits without a goroutine of its own (see
// ReceiveOrWait). Its methods are not safe for concurrent use: its owner
// calls them one at a time.
type Waiting struct {
	s      *Service
	r      ReceiveRequest
	wake   func()
	cancel func() bool
	ended  bool
}

// ReceiveOrWait is Receive for a caller that waits on its own, with no
// goroutine blocked meanwhile. It looks once, as Receive does; when nothing
// is ready and the request may wait it returns a *Waiting registered for
// the queue's wake-ups: wake is called (on the waker's goroutine; it must
// not block) once for each wake-up that picks this poll, after which the
// owner calls Look, or End when it stops waiting (its deadline, its client
// gone, the server stopping). The answer is then empty.
func (s *Service) ReceiveOrWait(ctx context.Context, r ReceiveRequest, wake func()) ([]Delivery, *Waiting, error) {
	cancel := s.notifier.WaitFunc(r.QueueID, wake)
	ds, done, err := s.look(ctx, &r, cancel)
	if done {
		return ds, nil, err
	}
	if r.Wait <= 0 {
		s.passOn(r.QueueID, cancel)
		return nil, nil, nil
	}
	s.metrics.LongPollWaiting(1)
	return nil, &Waiting{s: s, r: r, wake: wake, cancel: cancel}, nil
}

// Look looks at the store again after a wake-up: done with the answer
// (messages, none because the server is stopping, or an error), not done
// when nothing was ready, the poll registered again for the next wake-up.
func (w *Waiting) Look(ctx context.Context) (ds []Delivery, done bool, err error) {
	if w.ended {
		return nil, true, nil
	}
	select {
	case <-w.s.stopping:
		w.End()
		return nil, true, nil
	default:
	}
	// The wake-up that picked this poll took it off the queue's waiters
	// (cancel is then a no-op; this look consumes the wake-up): register
	// again before looking, so that a publish landing between the look and
	// the next wait is not missed.
	w.cancel()
	w.cancel = w.s.notifier.WaitFunc(w.r.QueueID, w.wake)
	ds, done, err = w.s.look(ctx, &w.r, w.cancel)
	if done {
		w.ended = true
		w.s.metrics.LongPollWaiting(-1)
	}
	return ds, done, err
}

// End stops the wait; a wake-up that had picked this poll meanwhile goes
// to the queue's next waiter.
func (w *Waiting) End() {
	if w.ended {
		return
	}
	w.ended = true
	w.s.passOn(w.r.QueueID, w.cancel)
	w.s.metrics.LongPollWaiting(-1)
}

// look is one look of Receive at the store, its waiter registered: done
// when it has the answer (messages, none, or an error), not done when
// nothing was ready and Receive should wait. It is a function of its own
// so that what it needs is off the stack of a waiting receive (a waiting
// goroutine keeps its stack; see wait).
//
//go:noinline
func (s *Service) look(ctx context.Context, r *ReceiveRequest, cancel func() bool) (ds []Delivery, done bool, err error) {
	if ClientGone(ctx) {
		s.passOn(r.QueueID, cancel)
		return nil, true, nil // the client has gone: take nothing for it
	}
	now := s.clock.Now()
	res, err := s.store.MessageReceive(ctx, &ReceiveParams{
		QueueID: r.QueueID, Max: r.Max, Visibility: r.Visibility,
		AttemptID: r.AttemptID, AttemptWindow: AttemptWindow, Now: now,
	})
	if err != nil {
		s.passOn(r.QueueID, cancel)
		if ClientGone(ctx) {
			return nil, true, nil
		}
		if IsUnavailable(err) || TimedOut(ctx) {
			s.log.WarnContext(ctx, "receive: queue unavailable", "queue_id", r.QueueID, "err", err)
			return nil, true, Unavailable(RuleQueueUnavailable)
		}
		return nil, true, fmt.Errorf("receive: %w", err) // a fault: 500
	}
	s.metrics.DeadLettered(res.DeadLettered)
	for _, q := range res.Woken {
		s.notifier.NotifyAll(q) // dead-letter moves: how many became ready is not known
	}
	if !res.NextVisibleAt.IsZero() {
		// Release delays and visibility timeouts send no wake-up: the
		// queue's timer wakes a waiter when the earliest story becomes
		// visible again.
		s.notifier.WakeAfter(r.QueueID, res.NextVisibleAt.Sub(now))
	}
	if len(res.Deliveries) > 0 {
		if res.Replayed {
			for i := range res.Deliveries {
				res.Deliveries[i].Replayed = true
			}
		}
		s.metrics.Delivered(len(res.Deliveries))
		// What we take becomes visible again when its visibility runs
		// out unless acknowledged: a waiter should look then.
		s.notifier.WakeAfter(r.QueueID, r.Visibility)
		// A wake that reached us while we were claiming, or a full batch
		// (more may be ready), is passed on to the next waiter.
		if cancel() || len(res.Deliveries) == r.Max {
			s.notifier.Notify(r.QueueID, 1)
		}
		if ClientGone(ctx) {
			// The client went away while we claimed: give them back at once.
			s.releaseDeliveries(res.Deliveries, r.QueueID)
			return nil, true, nil
		}
		return res.Deliveries, true, nil
	}
	if res.Replayed {
		s.passOn(r.QueueID, cancel)
		return nil, true, nil // a retried attempt takes nothing new: answer at once
	}
	if r.Wait > 0 && s.announcer != nil {
		announced, err := s.announcer.WaitAnnounce(ctx, r.QueueID)
		if err != nil && ctx.Err() == nil {
			// Other nodes may not send this queue's wake-ups: the poll
			// still answers when its wait runs out.
			s.log.WarnContext(ctx, "receive: announcing the wait to other nodes failed", "queue_id", r.QueueID, "err", err)
		}
		if announced {
			// What committed before the other nodes heard may not reach
			// this node as a wake-up: look once more (the store announces
			// a queue again only after a while, so this look normally does
			// not announce again; if it does, it looks once more too).
			return s.look(ctx, r, cancel)
		}
	}
	return nil, false, nil
}

// wait waits for a wake-up (true): a publish, an ack or release that made
// a message ready, another node's notice, or the queue's timer for its
// next visible message. Nothing is read from the store until then; when
// the wait runs out, the client goes away or the server stops (false) the
// answer is empty at once (the client's next receive looks again).
//
// A waiting receive keeps its goroutine's stack, which the runtime shrinks
// (at a collection) only to four times what is in use: the frames under
// the wait are kept small (look, and the HTTP handler's own helpers, hold
// what they need in frames of their own) so that the stack a request grew
// while it was read and checked can shrink to 8 KiB while it waits.
//
//go:noinline
func (s *Service) wait(ctx context.Context, woken <-chan struct{}, deadline <-chan time.Time) bool {
	s.metrics.LongPollWaiting(1)
	defer s.metrics.LongPollWaiting(-1)
	select {
	case <-woken:
		return true
	case <-deadline:
	case <-ctx.Done():
	case <-s.stopping:
	}
	return false
}

// passOn deregisters a waiter that is done; if a wake-up had already picked
// it, the wake-up goes to the next waiter instead of being lost.
func (s *Service) passOn(queueID string, cancel func() bool) {
	if cancel() {
		s.notifier.Notify(queueID, 1)
	}
}

// Release gives deliveries back at once, their claim undone (see
// SettleParams.GiveBack): used when their answer could not be written.
// Replayed deliveries stay in flight.
func (s *Service) Release(queueID string, ds []Delivery) {
	s.releaseDeliveries(ds, queueID)
}

func (s *Service) releaseDeliveries(ds []Delivery, queueID string) {
	hs := make([]Handle, 0, len(ds))
	for _, d := range ds {
		if !d.Replayed { // left in flight: a retry of the attempt gets it again
			hs = append(hs, d.Handle)
		}
	}
	if len(hs) == 0 {
		return
	}
	// A fresh context: the request's is done, and the release must happen.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.store.MessageNack(ctx, &SettleParams{QueueID: queueID, Handles: hs, Now: s.clock.Now(), GiveBack: true})
	if err != nil {
		s.log.Error("release undelivered messages", "queue_id", queueID, "err", err)
		return
	}
	n, released, dead := 0, 0, 0
	for _, r := range res {
		if r.Woken {
			n++
		}
		if r.OK {
			released++
		}
		if r.DeadLettered {
			dead++
		}
	}
	s.metrics.Released(released)
	s.metrics.DeadLettered(dead)
	s.notifier.Notify(queueID, n)
}

// HandleResult is the outcome of one receipt handle of an ack or nack.
type HandleResult struct {
	ReceiptHandle string `json:"receipt_handle"`
	Code          string `json:"code,omitempty"`
	Message       string `json:"message,omitempty"`
	OK            bool   `json:"-"`
}

// Settle acknowledges (nack=false) or releases handles of a queue. Store
// errors are answered as Receive answers them.
func (s *Service) Settle(ctx context.Context, queueID string, receipts []string, nack bool, delay time.Duration) ([]HandleResult, error) {
	out := make([]HandleResult, len(receipts))
	hs := make([]Handle, 0, len(receipts))
	idx := make([]int, 0, len(receipts))
	for i, rh := range receipts {
		out[i].ReceiptHandle = rh
		h, err := s.cfg.Handles.DecodeFor(rh, queueID)
		if err != nil || h.QueueID != queueID {
			out[i].Code, out[i].Message = CodeReceiptHandleIsInvalid, MsgHandleMalformed
			continue
		}
		hs = append(hs, h)
		idx = append(idx, i)
	}
	if len(hs) > 0 {
		p := &SettleParams{QueueID: queueID, Handles: hs, Delay: delay, Now: s.clock.Now()}
		var res []SettleResult
		var err error
		if nack {
			res, err = s.store.MessageNack(ctx, p)
		} else {
			res, err = s.store.MessageAck(ctx, p)
		}
		if err != nil {
			if IsUnavailable(err) {
				s.log.WarnContext(ctx, "settle: queue unavailable", "queue_id", queueID, "err", err)
				return nil, Unavailable(RuleQueueUnavailable)
			}
			return nil, fmt.Errorf("settle: %w", err) // a fault: 500
		}
		woke, settled, dead := 0, 0, 0
		for j, r := range res {
			i := idx[j]
			out[i].OK = r.OK
			if !r.OK {
				out[i].Code, out[i].Message = r.Code, r.Message
				if out[i].Code == "" {
					out[i].Code = CodeReceiptHandleIsInvalid
				}
				if out[i].Message == "" {
					out[i].Message = "The receipt handle is not from this message's latest delivery."
				}
			}
			if r.OK {
				settled++
			}
			if r.DeadLettered {
				dead++
			}
			if r.Woken {
				woke++
			}
		}
		s.metrics.DeadLettered(dead)
		if nack {
			s.metrics.Released(settled)
		} else {
			s.metrics.Acked(settled)
		}
		s.notifier.Notify(queueID, woke)
		if nack && delay > 0 && settled > 0 {
			// Released with a delay: visible again then, with no wake-up.
			s.notifier.WakeAfter(queueID, delay)
		}
	}
	return out, nil
}

// ConsumerSkills reads a consumer's skill registrations for the pull API:
// 503 skills.unavailable when the store cannot be reached, 403
// producer.not_registered when the connection was removed since its token
// was checked, and any other store error wrapped, a fault of the server.
func (s *Service) ConsumerSkills(ctx context.Context, connectionID string) (Skills, error) {
	sk, err := s.readSkills(ctx, connectionID)
	if err != nil {
		if IsUnavailable(err) {
			s.log.WarnContext(ctx, "read skills: unavailable", "connection_id", connectionID, "err", err)
			return Skills{}, Unavailable(RuleSkillsUnavailable)
		}
		if errors.Is(err, ErrNotFound) {
			return Skills{}, Errorf(RuleNotRegistered, "Connection %s no longer exists (it was removed): use the credentials of an existing consumer connection.", connectionID)
		}
		return Skills{}, fmt.Errorf("read skills: %w", err) // a fault: 500
	}
	if sk.Registrations == nil {
		sk.Registrations = []SkillRegistration{}
	}
	return sk, nil
}

// requireConsumer reads a consumer connection for a caller with min.
func (s *Service) requireConsumer(ctx context.Context, a *Actor, workspaceID, id string, min Role) (Connection, error) {
	c, err := s.ConnectionOf(ctx, a, workspaceID, id, min)
	if err != nil {
		return c, err
	}
	if c.Kind != KindConsumer {
		// A producer has no queue: its queue routes do not exist.
		return c, Errorf(RuleManageNotFound, "Connection %s is a producer: it has no queue, dead letters or skills.", id)
	}
	return c, nil
}

// PutSkills replaces a consumer's skill registrations (admins).
func (s *Service) PutSkills(ctx context.Context, a *Actor, workspaceID, id string, regs []SkillRegistration) (Skills, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, id, RoleAdmin); err != nil {
		return Skills{}, err
	}
	if regs == nil {
		return Skills{}, Errorf(RuleManageBadRequest, "registrations is required (an empty list clears them).")
	}
	if len(regs) > MaxRegistrations {
		return Skills{}, Errorf(RuleManageBadRequest, "registrations may hold at most %d entries.", MaxRegistrations)
	}
	seen := map[string]bool{}
	for i, r := range regs {
		switch {
		case r.InstanceID == "" || len(r.InstanceID) > MaxIDLength:
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].instance_id must be 1 to 128 characters.", i)
		case seen[r.InstanceID]:
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].instance_id %q is repeated.", i, r.InstanceID)
		case r.Skill == "" || len(r.Skill) > MaxNameLength:
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].skill must be 1 to %d characters.", i, MaxNameLength)
		case r.Name == "" || len(r.Name) > MaxNameLength:
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].name must be 1 to %d characters.", i, MaxNameLength)
		case r.AuthorityScale < 0 || r.AuthorityScale > 100:
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].authority_scale must be between 0 and 100.", i)
		}
		for _, f := range []struct{ name, v string }{{"instance_id", r.InstanceID}, {"skill", r.Skill}, {"name", r.Name}} {
			field := fmt.Sprintf("registrations[%d].%s", i, f.name)
			if err := checkText(field, f.v); err != nil {
				return Skills{}, err
			}
			if err := checkVisible(field, f.v); err != nil {
				return Skills{}, err
			}
		}
		if err := checkJSONText(fmt.Sprintf("registrations[%d].values", i), r.Values); err != nil {
			return Skills{}, err
		}
		if len(r.Values) == 0 || string(r.Values) == "null" {
			regs[i].Values = []byte("{}")
		} else if r.Values[0] != '{' {
			return Skills{}, Errorf(RuleManageBadRequest, "registrations[%d].values must be a JSON object.", i)
		}
		seen[r.InstanceID] = true
	}
	sk := Skills{Registrations: regs, UpdatedAt: s.clock.Now()}
	err := s.store.Update(ctx, func(tx Tx) error {
		if err := tx.SkillsPut(id, sk); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "skills.update", id, map[string]any{"registrations": len(regs)}))
	})
	if err != nil {
		return Skills{}, connectionErr("put skills", workspaceID, id, err)
	}
	return sk, nil
}

// GetSkills reads a consumer's skill registrations (viewers).
func (s *Service) GetSkills(ctx context.Context, a *Actor, workspaceID, id string) (Skills, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, id, RoleViewer); err != nil {
		return Skills{}, err
	}
	sk, err := s.readSkills(ctx, id)
	if err != nil {
		return Skills{}, connectionErr("get skills", workspaceID, id, err)
	}
	return sk, nil
}

// readSkills reads a connection's registrations; before the first put they
// are empty and dated from the connection's creation, so updated_at is
// always a time.
func (s *Service) readSkills(ctx context.Context, connectionID string) (Skills, error) {
	var sk Skills
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		sk, err = tx.SkillsGet(connectionID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if sk.UpdatedAt.IsZero() {
			c, err := tx.ConnectionGet(connectionID)
			if err != nil {
				return err
			}
			sk.UpdatedAt = c.CreatedAt
		}
		return nil
	})
	if sk.Registrations == nil {
		sk.Registrations = []SkillRegistration{}
	}
	return sk, err
}

// DeadLetterPage is the answer of the dead-letter listing.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  *string      `json:"next_cursor"`
}

// ListDeadLetters reads a page of a consumer's dead letters, oldest first,
// after cursor ("" for the first page) (viewers). A cursor is accepted
// only by the listing of the connection that returned it.
func (s *Service) ListDeadLetters(ctx context.Context, a *Actor, workspaceID, id string, limit int, cursor string) (DeadLetterPage, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, id, RoleViewer); err != nil {
		return DeadLetterPage{}, err
	}
	after, err := s.deadLetterAfter(workspaceID, id, cursor)
	if err != nil {
		return DeadLetterPage{}, err
	}
	dls, err := s.store.DeadLetterList(ctx, id, limit+1, after)
	if err != nil {
		return DeadLetterPage{}, connectionErr("list dead letters", workspaceID, id, err)
	}
	page := DeadLetterPage{DeadLetters: dls}
	if len(dls) > limit {
		page.DeadLetters = dls[:limit]
		next := s.deadLetterCursor(workspaceID, id, dls[limit-1].ID)
		page.NextCursor = &next
	}
	if page.DeadLetters == nil {
		page.DeadLetters = []DeadLetter{}
	}
	return page, nil
}

// Redrive moves dead letters (all when ids is nil) back to the end of their
// stories (developers).
func (s *Service) Redrive(ctx context.Context, a *Actor, workspaceID, id string, ids []string) (int, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, id, RoleDeveloper); err != nil {
		return 0, err
	}
	details := map[string]any{"all": ids == nil}
	if ids != nil {
		if len(ids) == 0 || len(ids) > 100 {
			return 0, Errorf(RuleManageBadRequest, "message_ids must hold 1 to 100 ids, or be left out to redrive all.")
		}
		seen := make(map[string]int, len(ids))
		for i, m := range ids {
			if !validIDText(m) {
				return 0, Errorf(RuleManageBadRequest, "message_ids[%d] is not a message id: message ids are 1 to %d printable ASCII characters.", i, MaxIDLength)
			}
			if j, dup := seen[m]; dup {
				return 0, Errorf(RuleManageBadRequest, "message_ids[%d] repeats message_ids[%d]: each id at most once.", i, j)
			}
			seen[m] = i
		}
		details["message_ids"] = len(ids)
	}
	n, err := s.store.DeadLetterRedrive(ctx, &RedriveParams{QueueID: id, MessageIDs: ids, Now: s.clock.Now(),
		Audit: s.audit(a, workspaceID, "dead_letters.redrive", id, details)})
	if err != nil {
		return 0, connectionErr("redrive", workspaceID, id, err)
	}
	s.metrics.Redriven(n)
	s.notifier.Notify(id, n)
	return n, nil
}

// Purge drops every message of a consumer's queue (admins).
func (s *Service) Purge(ctx context.Context, a *Actor, workspaceID, id string) (int, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, id, RoleAdmin); err != nil {
		return 0, err
	}
	n, err := s.store.QueuePurge(ctx, &PurgeParams{QueueID: id, Now: s.clock.Now(), Audit: s.audit(a, workspaceID, "queue.purge", id, nil)})
	if err != nil {
		return 0, connectionErr("purge", workspaceID, id, err)
	}
	return n, nil
}

// EncodeHandle returns the receipt handle text of h.
func (s *Service) EncodeHandle(h Handle) string { return s.cfg.Handles.Encode(h) }

// AppendHandle appends the receipt handle text of h to dst.
func (s *Service) AppendHandle(dst []byte, h Handle) []byte {
	return s.cfg.Handles.AppendEncode(dst, h)
}
