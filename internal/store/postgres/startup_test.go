package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestLockStartupSerializesNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	unlockA, err := a.LockStartup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		unlockB, err := b.LockStartup(t.Context())
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- unlockB
	}()
	select {
	case <-got:
		t.Fatal("the second node took the startup lock while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	unlockA()
	select {
	case unlockB := <-got:
		if unlockB == nil {
			t.FailNow()
		}
		unlockB()
	case <-time.After(10 * time.Second):
		t.Fatal("the second node did not get the startup lock after the first released it")
	}
	// Released for good: the first node can take it again.
	unlock, err := a.LockStartup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// TestWarmPublish: a pool connection comes with the quick publish prepared
// and its generic plan built, having written nothing.
func TestWarmPublish(t *testing.T) {
	s := OpenTest(t)
	ctx := context.Background()
	// Three at once: at least two are made after the migrations, which
	// the pool's first connection ran before the tables existed.
	// Released however the test ends: the store's Close, a cleanup, waits
	// for every connection taken from its pool.
	conns := make([]*pgxpool.Conn, 0, 3)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range cap(conns) {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	warmed := 0
	for _, c := range conns {
		var generic int64
		err := c.QueryRow(ctx, `SELECT generic_plans FROM pg_prepared_statements WHERE statement = $1`, quickPublishSQL).Scan(&generic)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if generic < 1 {
			t.Errorf("quick publish prepared with %d generic plans run, want at least 1", generic)
		}
		if c.Conn().PgConn().TxStatus() != 'I' {
			t.Errorf("connection left in a transaction (%c)", c.Conn().PgConn().TxStatus())
		}
		warmed++
	}
	if warmed == 0 {
		t.Fatal("no pool connection has the quick publish prepared")
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM dedup_records) + (SELECT count(*) FROM stories) + (SELECT count(*) FROM messages)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the warm-up wrote %d rows", n)
	}
}

// TestStoriesSequence: the publishes draw story ids from stories_id_seq by
// name; it must be the sequence of the stories' identity column.
func TestStoriesSequence(t *testing.T) {
	s := OpenTest(t)
	var seq, named string
	err := s.pool.QueryRow(context.Background(),
		`SELECT pg_get_serial_sequence('stories', 'id')::regclass::text, 'stories_id_seq'::regclass::text`).Scan(&seq, &named)
	if err != nil {
		t.Fatal(err)
	}
	if seq != named {
		t.Fatalf("the identity of stories.id uses %s, not %s", seq, named)
	}
}
