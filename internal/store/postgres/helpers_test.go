package postgres

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/storetest"
)

// testLogger returns a logger that writes to t.Log until the test ends.
func testLogger(t testing.TB) *slog.Logger { return storetest.Logger(t) }

// OpenTest opens a store on a fresh schema (see pgtest.URL), logging to t,
// and closes it when the test ends. The package's external tests reach it
// as postgres.OpenTest.
func OpenTest(t testing.TB) *Store {
	t.Helper()
	u := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, u, storetest.Logger(t))
	if err != nil {
		t.Fatalf("postgres: open test store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() }) // runs before the schema drop
	return s
}

// waitLockedOrEnded polls until a session whose application_name is app
// waits for a lock (false) or the buffered channel ended holds a value
// (true; the value stays there for the caller). After 10 s it fails the
// test with stuck.
func waitLockedOrEnded[T any](t *testing.T, s *Store, app string, ended chan T, stuck string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if len(ended) > 0 {
			return true
		}
		var waiting int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatal(stuck)
		}
	}
}

// holdRemoval starts the removal of connection q and holds its
// transaction open after ConnectionDelete's last statement until release
// is closed; it returns once the removal got there. The removal's result
// arrives on removal.
func holdRemoval(t *testing.T, s *Store, q string) (removal chan error, release chan struct{}) {
	t.Helper()
	deleted := make(chan struct{})
	removal, release = make(chan error, 1), make(chan struct{})
	go func() {
		first := true
		removal <- s.Update(t.Context(), func(tx bus.Tx) error {
			if err := tx.ConnectionDelete(q); err != nil {
				return err
			}
			if first { // once: the transaction may be run again
				first = false
				close(deleted)
				// Or the test's end: a test that failed before releasing
				// would otherwise hang in its cleanup (closing the store
				// waits for this transaction), its message never shown.
				select {
				case <-release:
				case <-t.Context().Done():
				}
			}
			return nil
		})
	}()
	select {
	case <-deleted:
	case err := <-removal:
		t.Fatalf("removal: %v", err)
	}
	return removal, release
}

// plantQueueRows writes, as a removal that raced a writer may leave them,
// a story with its message (story key "a", message "a1") and a dead
// letter ("b1") of queue, enqueued at at; the counter triggers count them
// as usual.
func plantQueueRows(t *testing.T, s *Store, queue string, at time.Time) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.pool.Exec(ctx, `WITH st AS (
			INSERT INTO stories (queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
			VALUES ($1, 'a', 1, 1, 0, 0, 0, false) RETURNING id)
		INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic, correlation_id, producer_id, enqueued_at, envelope)
		SELECT id, 1, $1, 'a1', 't.x', 't.x', 'a', 'p', $2, '' FROM st`, queue, ms(at)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO dead_letters (queue_id, message_id, message_type, topic, correlation_id,
			producer_id, receive_count, enqueued_at, dead_lettered_at, envelope)
		VALUES ($1, 'b1', 't.x', 't.x', 'b', 'p', 1, $2, $2, '')`, queue, ms(at)); err != nil {
		t.Fatal(err)
	}
}
