package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// TestQuickReceiveDeadlockFallsBack: a receive whose one-statement claim
// the database ends as a deadlock's victim runs the full receive, with its
// retries, instead of failing, as the quick publish and ack fall back. The
// deadlock is made as a migration's locks can make it: another transaction
// holds one of the two tables the statement reads (stories, messages),
// the statement waits for it holding the other, and the transaction then
// asks for that other one. Which table the statement locks first depends
// on whether its connection has it prepared already, so both orders are
// tried until one makes the deadlock.
func TestQuickReceiveDeadlockFallsBack(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ws, prod, q := setupQueue(t, s, 5)
	ctx := t.Context()
	recv := func() (*bus.ReceiveResult, error) {
		return s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: time.Now()})
	}
	other, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	count := func(query string, args ...any) int {
		var n int
		if err := s.pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	tested := false
	for i := range 8 {
		first, second := "messages", "stories"
		if i%2 == 1 {
			first, second = second, first
		}
		id := fmt.Sprint("m", i)
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{testMessage(id, id)}, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+first+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		type result struct {
			res *bus.ReceiveResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := recv()
			done <- result{res, err}
		}()
		for deadline := time.Now().Add(10 * time.Second); count(`SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass`, first) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the receive never waited for %s", first)
			}
		}
		// The receive's statement holds second: asking for it makes the
		// deadlock. The receive, which waited first, is usually its
		// victim; when the other transaction is, nothing was tested and
		// the next round tries again.
		victim := false
		if count(`SELECT count(*) FROM pg_locks WHERE granted AND relation = $1::regclass AND pid NOT IN (pg_backend_pid(), $2)`,
			second, int32(other.PgConn().PID())) > 0 { //nolint:gosec // a backend pid fits
			_, err := tx.Exec(ctx, `LOCK TABLE `+second+` IN ACCESS EXCLUSIVE MODE`)
			if err != nil && !isRetryable(err) {
				t.Fatal(err)
			}
			victim = err == nil
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("receive (%s locked first, the receive the deadlock's victim: %v): %v", first, victim, r.err)
		}
		if len(r.res.Deliveries) != 1 || r.res.Deliveries[0].MessageID != id {
			t.Fatalf("receive got %+v, want %s", r.res.Deliveries, id)
		}
		if victim {
			tested = true
			break
		}
	}
	if !tested {
		t.Fatal("in 8 rounds the receive was never a deadlock's victim")
	}
}
