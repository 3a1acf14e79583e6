package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notifyChannel is the channel that carries ready queue ids between nodes.
const notifyChannel = "sombus_ready"

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
type notifier struct {
	s *Store

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	pending map[string]struct{} // posted ids not yet being sent
	sending bool                // the post sender goroutine runs
}

// post queues ids for the post sender and returns at once. A failed send
// is logged: the listeners' fallback polls cover a lost notification.
func (n *notifier) post(ids []string) {
	if len(ids) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
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
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		w := waker{queues: n.pending}
		n.pending = nil
		n.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := sendNotify(ctx, n.s.pool, w.list()); err != nil {
			n.s.logger.Warn("postgres: notify ready queues failed; other nodes' waiters poll", "err", interpretError(err))
		}
		cancel()
	}
}

// sendNotify sends the queue ids on notifyChannel through q (a pool: each
// payload is a statement of its own), in statements whose commit does not
// wait for its WAL flush: a notification carries no data, and one a crash
// loses only delays a wake-up until the fallback poll. The setting is
// local to the statement's implicit transaction.
func sendNotify(ctx context.Context, q execer, ids []string) error {
	for _, p := range payloads(ids) {
		if _, err := q.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify('`+notifyChannel+`', $1)`, p); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	return nil
}

func newNotifier(s *Store) *notifier { return &notifier{s: s} }

// close refuses new posts and waits for the sender to finish.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
}

// Listen holds one dedicated connection (not from the pool: it must stay
// in LISTEN for as long as ctx lives) and calls fn with each queue id that
// any node notifies, its own included. When the connection fails it
// reconnects with backoff; notifications sent meanwhile are lost, which
// waiters survive through their fallback poll. It returns nil when ctx
// ends.
func (s *Store) Listen(ctx context.Context, fn func(queueID string)) error {
	const maxBackoff = 10 * time.Second
	backoff := 100 * time.Millisecond
	for {
		listening := false
		err := s.listenOnce(ctx, fn, &listening)
		if ctx.Err() != nil {
			return nil
		}
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

// listenOnce connects, listens and dispatches until an error or ctx ends.
func (s *Store) listenOnce(ctx context.Context, fn func(string), listening *bool) error {
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
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		return interpretError(err)
	}
	*listening = true
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return interpretError(err)
		}
		for _, id := range strings.Split(n.Payload, ",") {
			if id != "" {
				fn(id)
			}
		}
	}
}
