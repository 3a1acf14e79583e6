package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestConnectionDeleteAfterStoryWriter: a removal that finds a story of
// its queue held by a writer (here: a publish to an existing story, held
// open after its story upsert) waits for it on the story and does not
// deadlock with it. The writer then counts its message into its counter
// row of the queue, which the removal has not touched yet: the removal
// takes the stories before it deletes the connection's row, whose cascade
// deletes the counter rows. In the other order (the cascade first, as a
// removal that deletes the connection's row first does) the writer's
// counter update waits for the removal, which waits for the writer's story:
// a deadlock, and the removal (or the writer) runs again.
func TestConnectionDeleteAfterStoryWriter(t *testing.T) {
	t.Parallel()
	app := "sombus_order_" + strings.ToLower(bus.NewID(""))[:12]
	s := openURL(t, pgtest.URL(t)+"&application_name="+app)
	ctx := t.Context()
	ws, prod, q := setupQueue(t, s, 5)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{testMessage("m1", "s1")}, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// A counter row of every slot, so that the writer updates its own.
	if _, err := s.pool.Exec(ctx, `INSERT INTO queue_counts (queue_id, slot, messages, dead_letters)
		SELECT $1, g, 0, 0 FROM generate_series(0, 63) AS g ON CONFLICT DO NOTHING`, q); err != nil {
		t.Fatal(err)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op once committed
	var story, tail int64
	if err := tx.QueryRow(ctx, `UPDATE stories SET tail_seq = tail_seq + 1 WHERE queue_id = $1 AND story_key = 's1'
		RETURNING id, tail_seq`, q).Scan(&story, &tail); err != nil {
		t.Fatal(err)
	}

	runs := 0
	removal := make(chan error, 1)
	go func() {
		removal <- s.Update(ctx, func(tx bus.Tx) error {
			runs++
			return tx.ConnectionDelete(q)
		})
	}()
	if waitLockedOrEnded(t, s, app, removal, "the removal neither waited for the story nor ended") {
		t.Fatalf("the removal ended without waiting for the story: %v", <-removal)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope)
		VALUES ($1, $2, $3, 'm2', 't.x', 't.x', 's1', $4, $5, '')`, story, tail, q, prod, ms(time.Now())); err != nil {
		t.Fatalf("writer's message: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := <-removal; err != nil {
		t.Fatalf("removal: %v", err)
	}
	if runs != 1 {
		t.Errorf("the removal ran %d times, want once (it deadlocked with the writer)", runs)
	}
	if left := queueRows(t, s, q); len(left) > 0 {
		t.Errorf("rows of the removed queue left: %v", left)
	}
}
