package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notifyChannel is the channel that carries ready queue ids between nodes.
const notifyChannel = "sombus_ready"

// helloChannel carries a node's hello each time its listener starts
// listening, so that the other nodes send their notifications again at
// once: "<node id>" (earlier versions) or "<node id>,<listener's backend
// pid>", and ",r" after it in an answer to another node's hello (see
// notifier).
const helloChannel = "sombus_listeners"

// waitChannel carries the queues a node's polls are about to wait on
// (see notifier): "<node id>,<queue id>,…".
const waitChannel = "sombus_waiting"

// The timings of the wait announcements (see notifier): what a node heard
// holds for interestTTL; a node's checks say a queue's wait again once its
// last announcement of it is interestRenew old while its polls still wait
// on it; a poll waits for an announcement of its own only when no earlier
// one holds past its longest wait (maxPollWait, with pollSlack to spare);
// a post of a queue nobody waits on is kept for interestReplay (the
// longest an announcement may take to arrive).
const (
	maxPollWait    = 20 * time.Second
	pollSlack      = 5 * time.Second
	interestRenew  = time.Minute
	interestTTL    = 2 * time.Minute
	interestReplay = 10 * time.Second
)

// listenStatement is the last statement of every listener connection, the
// one by which pg_stat_activity shows it (its query column): nodes of
// earlier versions, which listen on notifyChannel alone, run the same.
const listenStatement = `LISTEN ` + notifyChannel

// checkEvery is how often a node that listens looks whether another
// listener is connected to the database.
const checkEvery = time.Second

// maxPayload keeps each notification under PostgreSQL's 8000-byte payload
// limit; longer id lists are split over several notifications.
const maxPayload = 7000

// waker gathers the queues one store call made ready.
type waker struct{ queues map[string]struct{} }

// wake marks queueID as having a ready message.
func (w *waker) wake(queueID string) {
	if w.queues == nil {
		w.queues = map[string]struct{}{}
	}
	w.queues[queueID] = struct{}{}
}

// has reports whether queueID was woken.
func (w *waker) has(queueID string) bool { _, ok := w.queues[queueID]; return ok }

// list returns the woken queues, sorted.
func (w *waker) list() []string {
	if len(w.queues) == 0 {
		return nil
	}
	out := make([]string, 0, len(w.queues))
	for q := range w.queues {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// payloads joins ids with commas into payloads of at most maxPayload bytes.
func payloads(ids []string) []string {
	var out []string
	var b strings.Builder
	for _, id := range ids {
		if id == "" {
			continue
		}
		if b.Len() > 0 && b.Len()+1+len(id) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// execer is a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// notifier sends the wake-ups of one node (post) from one goroutine, one
// send at a time: the first goes out at once, and the ids posted while a
// send is on its way go together in the next.
//
// It sends nothing while no other node listens. The node's Listen checks
// pg_stat_activity every checkEvery, and at once when its own listener
// (re)connects, for another listener connected to the database (check);
// while the latest check found none, posts are held instead of sent. The
// ids held since the check before the latest began are kept, and sent the
// moment a listener is seen: by a check, or by the hello that every
// listener sends as soon as it listens (helloChannel). So a node that
// starts listening still gets the wake-ups of every change committed after
// it listened, a few milliseconds late, and no later than the next check.
// Without a working check (no Listen running, the own listener not
// connected or not seen, the check failing) every post is sent.
//
// With other nodes listening, a queue's wake-ups go only to nodes that
// wait on it. A node whose poll is about to wait on a queue says so on
// waitChannel (waitAnnounce, again once interestRenew old) and
// looks at the queue once more after that notification committed; the
// other nodes keep what they heard for interestTTL and send that queue's
// posts. While its polls keep waiting on the queue, its checks say it
// again in the background before that runs out, so re-issued polls
// neither wait for an announcement nor look twice. A
// post of a queue no node waits on is kept (unsent) for
// interestReplay: if a node's announcement of it arrives meanwhile, the
// post is sent then. So a change committed after the waiting node's last
// look reaches it: either the poster had heard the announcement when it
// posted, or it hears it later and sends the kept post (the announcement
// committed before that look, so before the change and its post). A node
// that starts listening says hello, in one transaction with every queue
// its polls may rely on (mayWait); the others answer the same way, their
// hello marked as an answer.
// The posts go only where announced when every other listener seen in
// the check said hello with its backend pid (gated): a listener of an
// earlier version, which never announces, gets every post as before.
type notifier struct {
	s *Store
	// id names this node in its hellos, so that it ignores its own.
	id string

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	pending map[string]struct{} // posted ids not yet being sent
	sending bool                // the post sender goroutine runs

	alone  bool                // the latest check found no other listener: posts are held
	held   map[string]struct{} // ids posted while alone since the latest check began
	hellos uint64              // hellos heard from other nodes

	sent atomic.Int64 // NOTIFY statements sent, for tests

	// Interest (see above). ownPID is the own listener's backend pid (0
	// when not listening); gated: the latest check saw only listeners that
	// said hello (pids in known); interest: queue → until when another
	// node waits on it; unsent: queue → when a post of it was kept;
	// wanted: queue → when a poll of this node was last about to wait on
	// it; announced: queue → when this node last said so.
	ownPID    uint32
	gated     bool
	known     map[uint32]bool
	interest  map[string]time.Time
	unsent    map[string]time.Time
	wanted    map[string]time.Time
	announced map[string]time.Time
	// ttl, renew and replay are interestTTL, interestRenew and
	// interestReplay (tests shorten them).
	ttl, renew, replay time.Duration
	announces          *gatherer[announceCall]
	// refresh: queues to announce again in the background, with when
	// they were queued (sendRefreshes, running while refreshing);
	// renewing: those being sent. announced takes the queued time only
	// once the renewal committed.
	refresh    map[string]time.Time
	renewing   map[string]bool
	refreshing bool

	// lastSend is when the latest send began; only the sender goroutine
	// (one at a time, handed over under mu) touches it.
	lastSend time.Time
}

// notifyGap is the least time between the starts of two sends of one
// node. A NOTIFY is a transaction of its own that wakes every listener
// of the database; under a steady stream of changes the ids posted during
// the gap go in one statement instead of one statement per change. A node
// that has not sent for the gap sends at once, so a wake-up waits at most
// this long more than it would without the gap.
const notifyGap = 2 * time.Millisecond

// post queues ids for the post sender and returns at once, or holds them
// while no other node listens. A failed send is logged: a waiter whose
// wake-up is lost answers when its wait runs out, and its client's next
// receive finds the message.
func (n *notifier) post(ids []string) {
	if len(ids) == 0 {
		return
	}
	n.s.idle.forget(ids...)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.alone {
		if n.held == nil {
			n.held = map[string]struct{}{}
		}
		for _, id := range ids {
			n.held[id] = struct{}{}
		}
		return
	}
	if n.gated {
		now := time.Now()
		send := make([]string, 0, len(ids))
		for _, id := range ids {
			if now.Before(n.interest[id]) {
				send = append(send, id)
				continue
			}
			if n.unsent == nil {
				n.unsent = map[string]time.Time{}
			}
			n.unsent[id] = now
		}
		ids = send
	}
	n.queue(ids)
}

// queue adds ids to the pending ones and starts the sender; n.mu is held.
func (n *notifier) queue(ids []string) {
	if n.closed || len(ids) == 0 {
		return
	}
	if n.pending == nil {
		n.pending = map[string]struct{}{}
	}
	for _, id := range ids {
		n.pending[id] = struct{}{}
	}
	if !n.sending {
		n.sending = true
		n.wg.Add(1)
		go n.sendPosted()
	}
}

// sendPosted sends the posted ids until none are left.
func (n *notifier) sendPosted() {
	defer n.wg.Done()
	for {
		if wait := time.Until(n.lastSend.Add(notifyGap)); wait > 0 {
			time.Sleep(wait)
		}
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		w := waker{queues: n.pending}
		n.pending = nil
		n.mu.Unlock()

		n.lastSend = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent, err := sendNotify(ctx, n.s.pool, w.list())
		n.sent.Add(int64(sent))
		if err != nil {
			n.s.logger.Warn("postgres: notify ready queues failed; other nodes' waiters answer when their wait runs out", "err", interpretError(err))
		}
		cancel()
	}
}

// sendNotify sends the queue ids on notifyChannel through q (a pool: each
// payload is a statement of its own), in statements whose commit does not
// wait for its WAL flush: a notification carries no data, and one a crash
// loses only delays a wake-up, as any lost notification does. The setting
// is local to the statement's implicit transaction. It returns how many
// statements it sent.
func sendNotify(ctx context.Context, q execer, ids []string) (int, error) {
	sent := 0
	for _, p := range payloads(ids) {
		if _, err := q.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify('`+notifyChannel+`', $1)`, p); err != nil {
			return sent, fmt.Errorf("notify: %w", err)
		}
		sent++
	}
	return sent, nil
}

func newNotifier(s *Store) *notifier {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &notifier{s: s, id: hex.EncodeToString(b[:]), ttl: interestTTL, renew: interestRenew, replay: interestReplay,
		announces: &gatherer[announceCall]{inFlight: 1, maxSize: announceMax, maxCall: 1}}
}

// close refuses new posts and waits for the sender to finish.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
}

// notifyAll ends holding: posts are sent again, and the held ones at once.
// n.mu is held.
func (n *notifier) notifyAll(why string) {
	if n.alone {
		n.s.logger.Debug("postgres: notifying other nodes again", "why", why)
	}
	n.sendHeld()
	n.queue(n.ungate(nil))
}

// sendHeld ends holding and sends the held posts. n.mu is held.
func (n *notifier) sendHeld() {
	n.alone = false
	held := make([]string, 0, len(n.held))
	for id := range n.held {
		held = append(held, id)
	}
	n.held = nil
	n.queue(held)
}

// ungate sends every post from now on, until a check gates them again, and
// appends the kept posts (unsent) to ids. n.mu is held.
func (n *notifier) ungate(ids []string) []string {
	n.gated = false
	for id := range n.unsent {
		ids = append(ids, id)
	}
	n.unsent = nil
	return ids
}

// heardHello is called with the payload of each hello: another node's
// listener has just started listening.
func (n *notifier) heardHello(payload string) {
	from, rest, _ := strings.Cut(payload, ",")
	if from == n.id {
		return
	}
	pidText, reply, _ := strings.Cut(rest, ",")
	n.mu.Lock()
	defer n.mu.Unlock()
	if pid, err := strconv.ParseUint(pidText, 10, 32); err == nil && pid != 0 {
		if n.known == nil {
			n.known = map[uint32]bool{}
		}
		n.known[uint32(pid)] = true
	}
	if reply != "" {
		// An answer to a hello: the node was listening already, and what
		// it waits on comes in its announcements.
		return
	}
	n.hellos++
	n.notifyAll("another node started listening")
	// The new node heard none of the announcements made before it
	// listened: answer, and say again what this node's polls wait on.
	if n.ownPID != 0 && !n.closed {
		n.wg.Add(1)
		go n.answerHello(n.ownPID, n.mayWait(time.Now()))
	}
}

// mayWait lists the queues a poll of this node may be waiting on, or may
// wait on without announcing it (an announcement of it holds past such a
// poll's wait): what a node that starts listening must hear, having
// missed the announcements. n.mu is held.
func (n *notifier) mayWait(now time.Time) []string {
	ids := n.waitingNow(now)
	for id, at := range n.announced {
		if _, waiting := n.wanted[id]; !waiting && now.Sub(at) < n.ttl-maxPollWait-pollSlack {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitingNow lists the queues a poll of this node may still wait on at
// now (wanted within a poll's longest wait). n.mu is held.
func (n *notifier) waitingNow(now time.Time) []string {
	var ids []string
	for id, at := range n.wanted {
		if now.Sub(at) < maxPollWait+pollSlack {
			ids = append(ids, id)
		} else {
			delete(n.wanted, id)
		}
	}
	return ids
}

// answerHello says hello back (with pid, marked as an answer) and
// announces ids again, in one statement (sayHello).
func (n *notifier) answerHello(pid uint32, ids []string) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.sayHello(ctx, n.helloPayload(pid)+",r", ids); err != nil {
		// The new node then sends every post to this one: it gates only
		// once it knows this listener's pid.
		n.s.logger.Warn("postgres: answering another node's hello failed", "err", interpretError(err))
	}
}

// sayHello sends hello on helloChannel after announcing ids (the queues
// this node's polls may be waiting on) on waitChannel, in one statement:
// one transaction, whose notifications arrive in order, so a node that
// learns this listener's pid from the hello (and may then send only
// announced queues to it) has heard the announcements first. With hello
// empty it only announces (sendWaits). The commit does not wait for a WAL
// flush: only the order of the notifications matters (each commits before
// its poll looks again), not their durability.
func (n *notifier) sayHello(ctx context.Context, hello string, ids []string) error {
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString(`SELECT set_config('synchronous_commit', 'off', true)`)
	var args []any
	for _, p := range payloads(ids) {
		args = append(args, n.id+","+p)
		fmt.Fprintf(&b, `, pg_notify('%s', $%d)`, waitChannel, len(args))
	}
	if hello != "" {
		args = append(args, hello)
		fmt.Fprintf(&b, `, pg_notify('%s', $%d)`, helloChannel, len(args))
	}
	if len(args) == 0 {
		return nil
	}
	_, err := n.s.pool.Exec(ctx, b.String(), args...)
	return err
}

// helloPayload is this node's hello with its listener's backend pid.
func (n *notifier) helloPayload(pid uint32) string {
	return n.id + "," + strconv.FormatUint(uint64(pid), 10)
}

// heardWaits records another node's announcement ("<node id>,<queue
// id>,…") and sends the kept posts of those queues.
func (n *notifier) heardWaits(payload string) {
	from, rest, _ := strings.Cut(payload, ",")
	if from == n.id || rest == "" {
		return
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.interest == nil {
		n.interest = map[string]time.Time{}
	}
	var send []string
	for _, id := range strings.Split(rest, ",") {
		if id == "" {
			continue
		}
		n.interest[id] = now.Add(n.ttl)
		if at, ok := n.unsent[id]; ok {
			delete(n.unsent, id)
			if now.Sub(at) <= n.replay {
				send = append(send, id)
			}
		}
	}
	n.queue(send)
}

// WaitAnnounce tells the other nodes that a poll of this node is about to
// wait on queueID (bus.WaitAnnouncer; see notifier).
func (s *Store) WaitAnnounce(ctx context.Context, queueID string) (bool, error) {
	return s.notify.waitAnnounce(ctx, queueID)
}

// announceCall is one waitAnnounce in the announce gatherer.
type announceCall struct {
	ctx     context.Context
	queueID string
	err     error
}

// announceMax bounds the queues of one announcement statement.
const announceMax = 200

// waitAnnounce is called before a poll of this node waits on queueID. It
// says so to the other nodes, unless an earlier announcement of the queue
// holds past the poll's wait, and reports whether it did: it waited for
// the announcement to commit, and the caller looks at the queue once more
// (see notifier). The checks renew the announcements of the queues polls
// keep waiting on (renewWaits), so a poll re-issued on the same queue
// finds its announcement holding. A node alone says
// nothing (no node would hear it), only remembers the queue for a node
// that starts listening.
func (n *notifier) waitAnnounce(ctx context.Context, queueID string) (bool, error) {
	now := time.Now()
	n.mu.Lock()
	if n.wanted == nil {
		n.wanted = map[string]time.Time{}
	}
	if len(n.wanted) >= maxIdleQueues || len(n.announced) >= maxIdleQueues {
		// Swept by the checks; without them (no Listen) bounded here.
		clear(n.wanted)
		clear(n.announced)
	}
	n.wanted[queueID] = now
	at, ok := n.announced[queueID]
	age := now.Sub(at)
	if n.alone || ok && age < n.ttl-maxPollWait-pollSlack {
		// What the other nodes heard holds past this poll's wait (the
		// checks renew it in the background, renewWaits).
		n.mu.Unlock()
		return false, nil
	}
	n.mu.Unlock()
	c := &announceCall{ctx: ctx, queueID: queueID}
	n.announces.do("", c, 1, n.runAnnounces)
	if c.err != nil {
		return false, c.err
	}
	n.mu.Lock()
	if n.announced == nil {
		n.announced = map[string]time.Time{}
	}
	n.announced[queueID] = now
	n.mu.Unlock()
	return true, nil
}

// renewWaits queues in the background the announcements of the queues this
// node's polls may still be waiting on once they are n.renew old (the
// check calls it every second, so renewals spread over time rather than
// come with a wave of re-issued polls). n.mu is held.
func (n *notifier) renewWaits(now time.Time) {
	if n.alone || n.closed {
		return
	}
	for _, id := range n.waitingNow(now) {
		if _, queued := n.refresh[id]; queued || n.renewing[id] {
			continue
		}
		if at, ok := n.announced[id]; ok && now.Sub(at) >= n.renew {
			if n.refresh == nil {
				n.refresh = map[string]time.Time{}
			}
			n.refresh[id] = now
		}
	}
	if len(n.refresh) > 0 {
		n.startRefreshes()
	}
}

// startRefreshes starts sendRefreshes unless it runs (the refreshes go
// out after the poll's request, on no request's context). n.mu is held.
func (n *notifier) startRefreshes() {
	if n.refreshing || n.closed {
		return
	}
	n.refreshing = true
	n.wg.Add(1)
	go n.sendRefreshes()
}

// sendRefreshes sends the queued refreshes until none are left.
func (n *notifier) sendRefreshes() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(n.refresh) == 0 {
			n.refreshing = false
			n.mu.Unlock()
			return
		}
		batch := n.refresh
		n.refresh = nil
		if n.renewing == nil {
			n.renewing = map[string]bool{}
		}
		ids := make([]string, 0, len(batch))
		for id := range batch {
			ids = append(ids, id)
			n.renewing[id] = true
		}
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.sendWaits(ctx, ids)
		cancel()
		if err != nil {
			// What was said before still holds past the waits of the polls
			// that relied on it; once it is too old the next poll of the
			// queue announces anew and looks again.
			n.s.logger.Warn("postgres: announcing waiting polls again failed", "err", interpretError(err))
		}
		n.mu.Lock()
		for id, at := range batch {
			delete(n.renewing, id)
			if err == nil && at.After(n.announced[id]) {
				n.announced[id] = at
			}
		}
		n.mu.Unlock()
	}
}

// runAnnounces sends a group of announcements together.
func (n *notifier) runAnnounces(calls []*announceCall) {
	ctx := calls[0].ctx
	if len(calls) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.queueID
	}
	err := n.sendWaits(ctx, ids)
	for _, c := range calls {
		c.err = err
	}
}

// sendWaits announces ids on waitChannel (sayHello without a hello).
func (n *notifier) sendWaits(ctx context.Context, ids []string) error {
	if err := n.sayHello(ctx, "", ids); err != nil {
		return fmt.Errorf("announce waits: %w", err)
	}
	return nil
}

// check looks whether a listener other than the node's own (whose backend
// pid is ownPID, 0 when it is not connected) is connected, and holds posts
// from now on when none is; otherwise it sends every post, the held ones
// at once. The ids held before the check began are dropped when it finds
// none: a listener that LISTENs after the check's look did so after they
// were posted.
func (n *notifier) check(ctx context.Context, ownPID uint32) {
	n.mu.Lock()
	before := n.held
	n.held = nil
	hellos := n.hellos
	knownBefore := maps.Clone(n.known)
	n.mu.Unlock()

	var alone bool
	var others []uint32
	var err error
	if ownPID != 0 {
		alone, others, err = n.s.noOtherListener(ctx, ownPID)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	n.sweepInterest(time.Now(), others, knownBefore, err == nil && ownPID != 0)
	defer n.renewWaits(time.Now()) // after the switch, which may end alone
	gated := err == nil && ownPID != 0 && !alone
	for _, pid := range others {
		gated = gated && n.known[pid]
	}
	// After the switch: notifyAll sends every post until this gates them.
	defer func() {
		if gated {
			n.gated = true
		} else if n.gated {
			n.queue(n.ungate(nil))
		}
	}()
	switch {
	case err == nil && alone && n.hellos == hellos:
		if !n.alone {
			n.s.logger.Debug("postgres: no other node listens; holding notifications")
		}
		n.alone = true
	default:
		// Put the ids held before the check back, to be sent with the rest.
		for id := range before {
			if n.held == nil {
				n.held = map[string]struct{}{}
			}
			n.held[id] = struct{}{}
		}
		why := "another listener is connected"
		switch {
		case ownPID == 0:
			why = "own listener not connected"
		case err != nil:
			why = "listener check failed: " + interpretError(err).Error()
			if ctx.Err() == nil {
				n.s.logger.Warn("postgres: listener check failed; notifying every change", "err", interpretError(err))
			}
		case !alone:
		default:
			why = "another node started listening during the check"
		}
		if n.alone {
			n.s.logger.Debug("postgres: notifying other nodes again", "why", why)
		}
		// Whether the posts go to announced queues only is decided above
		// (the deferred gating).
		n.sendHeld()
	}
}

// noOtherListener reports whether no session connected to the database
// but the node's own listener (ownPID) listens on notifyChannel, from the
// last statement that pg_stat_activity shows of each session. It answers
// false when it cannot be sure: when the own listener is not seen (as when
// track_activities is off, or a pooler stands between), or when a session
// with an application name belongs to another role whose statements this
// role may not see (unless it has pg_read_all_stats).
func (s *Store) noOtherListener(ctx context.Context, ownPID uint32) (alone bool, others []uint32, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var own, hidden int
	var pids []int32
	err = s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE pid = $1 AND query = $2),
			coalesce(array_agg(pid) FILTER (WHERE pid <> $1 AND query = $2), '{}'),
			count(*) FILTER (WHERE query = '<insufficient privilege>' AND application_name <> '')
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`,
		int32(ownPID), listenStatement).Scan(&own, &pids, &hidden) //nolint:gosec // a backend pid fits
	if err != nil {
		return false, nil, err
	}
	for _, p := range pids {
		others = append(others, uint32(p)) //nolint:gosec // a backend pid is positive
	}
	// A session this role may not see, or the own listener not seen:
	// gated stays off as well (the caller reads others only when alone is
	// false and the own listener is seen).
	if own != 1 || hidden != 0 {
		return false, append(others, 0), nil
	}
	return len(others) == 0, others, nil
}

// sweepInterest drops what has run out: other nodes' interest past its
// time, kept posts past interestReplay, this node's announcements and
// waits that no longer count, and (when looked: the check saw the
// listeners, others) the pids of listeners no longer seen, of those known
// before the check began (knownBefore; a hello heard during the check may
// name a listener it did not see yet). n.mu is held.
func (n *notifier) sweepInterest(now time.Time, others []uint32, knownBefore map[uint32]bool, looked bool) {
	for id, until := range n.interest {
		if !now.Before(until) {
			delete(n.interest, id)
		}
	}
	for id, at := range n.unsent {
		if now.Sub(at) > n.replay {
			delete(n.unsent, id)
		}
	}
	for id, at := range n.announced {
		if now.Sub(at) >= n.ttl {
			delete(n.announced, id)
		}
	}
	n.waitingNow(now) // drops the waits that have run out
	if !looked {
		return
	}
	seen := make(map[uint32]bool, len(others))
	for _, p := range others {
		seen[p] = true
	}
	for p := range knownBefore {
		if !seen[p] {
			delete(n.known, p)
		}
	}
}

// Listen holds one dedicated connection (not from the pool: it must stay
// in LISTEN for as long as ctx lives) and calls fn with each queue id that
// any node notifies, its own included. When the connection fails it
// reconnects with backoff; notifications sent meanwhile are lost, which
// waiters survive: they answer when their wait runs out. While it runs the
// node's notifier sends nothing as long as no other listener is connected
// (see notifier). It returns nil when ctx ends. A store runs one Listen at
// a time.
func (s *Store) Listen(ctx context.Context, fn func(queueID string)) error {
	var ownPID atomic.Uint32
	kick := make(chan struct{}, 1)
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		s.watchListeners(ctx, &ownPID, kick)
	}()
	defer func() {
		watch.Wait()
		s.notify.mu.Lock()
		s.notify.notifyAll("listen ended")
		s.notify.mu.Unlock()
	}()

	const maxBackoff = 10 * time.Second
	backoff := 100 * time.Millisecond
	for {
		listening := false
		err := s.listenOnce(ctx, fn, &listening, func(pid uint32) {
			ownPID.Store(pid)
			s.notify.mu.Lock()
			s.notify.ownPID = pid
			// Gate only on the pids of the answers to this hello: one of
			// them may have missed announcements made while this listener
			// was away.
			s.notify.known = nil
			s.notify.mu.Unlock()
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		ownPID.Store(0)
		s.notify.mu.Lock()
		s.notify.ownPID = 0
		s.notify.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		// Without a listener of its own the node cannot check: it notifies.
		s.notify.mu.Lock()
		s.notify.notifyAll("own listener lost")
		s.notify.mu.Unlock()
		if listening {
			backoff = 100 * time.Millisecond // it worked for a while: start over
		}
		s.logger.WarnContext(ctx, "postgres: listen connection failed; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// watchListeners runs the notifier's check every checkEvery and at each
// kick (the own listener listens again) until ctx ends.
func (s *Store) watchListeners(ctx context.Context, ownPID *atomic.Uint32, kick <-chan struct{}) {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		s.notify.check(ctx, ownPID.Load())
	}
}

// listenOnce connects, listens and dispatches until an error or ctx ends.
// Once listening it calls listening with the connection's backend pid and
// sends the node's hello.
func (s *Store) listenOnce(ctx context.Context, fn func(string), listening *bool, started func(pid uint32)) error {
	// The pool's own settings (host, credentials, runtime parameters).
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return interpretError(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// The backend's own pid (a pooler may show the client another), then
	// the hellos, then the wake-ups: listenStatement comes last, so that
	// pg_stat_activity shows it as the connection's statement.
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return interpretError(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+helloChannel); err != nil {
		return interpretError(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+waitChannel); err != nil {
		return interpretError(err)
	}
	if _, err := conn.Exec(ctx, listenStatement); err != nil {
		return interpretError(err)
	}
	*listening = true
	// Tell the other nodes, which may hold their notifications, that this
	// one listens now, and what this node's polls may be waiting on (a
	// node whose listener was away meanwhile missed the announcements);
	// through the pool, so that the listener's last statement stays
	// listenStatement. Should it fail, their next check sees this listener
	// (and, not knowing its pid, they send it every post).
	s.notify.mu.Lock()
	waiting := s.notify.mayWait(time.Now())
	s.notify.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := s.notify.sayHello(hctx, s.notify.helloPayload(uint32(pid)), waiting); err != nil && ctx.Err() == nil { //nolint:gosec // a backend pid is positive
		s.logger.DebugContext(ctx, "postgres: hello failed; other nodes see this listener at their next check", "err", interpretError(err))
	}
	cancel()
	started(uint32(pid)) //nolint:gosec // a backend pid is positive
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return interpretError(err)
		}
		if n.Channel == helloChannel {
			s.notify.heardHello(n.Payload)
			continue
		}
		if n.Channel == waitChannel {
			s.notify.heardWaits(n.Payload)
			continue
		}
		for _, id := range strings.Split(n.Payload, ",") {
			if id != "" {
				s.idle.forget(id)
				fn(id)
			}
		}
	}
}
