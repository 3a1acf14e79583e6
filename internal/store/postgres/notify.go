package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notifyChannel is the channel that carries ready queue ids between nodes.
const notifyChannel = "sombus_ready"

// helloChannel carries a node's id each time its listener starts
// listening, so that the other nodes send their notifications again at
// once (see notifier).
const helloChannel = "sombus_listeners"

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
	return &notifier{s: s, id: hex.EncodeToString(b[:])}
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
	n.alone = false
	held := make([]string, 0, len(n.held))
	for id := range n.held {
		held = append(held, id)
	}
	n.held = nil
	n.queue(held)
}

// heardHello is called with the payload of each hello: another node's
// listener has just started listening.
func (n *notifier) heardHello(from string) {
	if from == n.id {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hellos++
	n.notifyAll("another node started listening")
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
	n.mu.Unlock()

	var alone bool
	var err error
	if ownPID != 0 {
		alone, err = n.s.noOtherListener(ctx, ownPID)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
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
		n.notifyAll(why)
	}
}

// noOtherListener reports whether no session connected to the database
// but the node's own listener (ownPID) listens on notifyChannel, from the
// last statement that pg_stat_activity shows of each session. It answers
// false when it cannot be sure: when the own listener is not seen (as when
// track_activities is off, or a pooler stands between), or when a session
// with an application name belongs to another role whose statements this
// role may not see (unless it has pg_read_all_stats).
func (s *Store) noOtherListener(ctx context.Context, ownPID uint32) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var own, others, hidden int
	err := s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE pid = $1 AND query = $2),
			count(*) FILTER (WHERE pid <> $1 AND query = $2),
			count(*) FILTER (WHERE query = '<insufficient privilege>' AND application_name <> '')
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`,
		int32(ownPID), listenStatement).Scan(&own, &others, &hidden) //nolint:gosec // a backend pid fits
	if err != nil {
		return false, err
	}
	return own == 1 && others == 0 && hidden == 0, nil
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
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		ownPID.Store(0)
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
	if _, err := conn.Exec(ctx, listenStatement); err != nil {
		return interpretError(err)
	}
	*listening = true
	// Tell the other nodes, which may hold their notifications, that this
	// one listens now; through the pool, so that the listener's last
	// statement stays listenStatement. Should it fail, their next check
	// sees this listener.
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := s.pool.Exec(hctx, `SELECT pg_notify('`+helloChannel+`', $1)`, s.notify.id); err != nil && ctx.Err() == nil {
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
		for _, id := range strings.Split(n.Payload, ",") {
			if id != "" {
				s.idle.forget(id)
				fn(id)
			}
		}
	}
}
