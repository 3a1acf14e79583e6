package postgres

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The quick pool takes a quarter of the node's connections (at least one)
// out of the main pool's, so pool_max_conns and pool_min_conns stay the
// node's totals.
func TestQuickPoolConfig(t *testing.T) {
	slot := func(context.Context, *pgx.Conn) error { return nil }
	for _, c := range []struct{ total, min, quick, main, quickMin, mainMin int32 }{
		{20, 0, 5, 15, 0, 0}, {20, 20, 5, 15, 5, 15}, {20, 3, 5, 15, 3, 0}, {8, 8, 2, 6, 2, 6},
		{4, 2, 1, 3, 1, 1}, {2, 2, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0},
	} {
		cfg, err := pgxpool.ParseConfig("postgres://u@127.0.0.1:5432/db?application_name=x")
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = c.total, c.min
		q := quickPoolConfig(cfg, slot, slog.New(slog.DiscardHandler))
		if q.MaxConns != c.quick || cfg.MaxConns != c.main || q.MinConns != c.quickMin || cfg.MinConns != c.mainMin {
			t.Errorf("pool_max_conns %d, pool_min_conns %d: quick %d (min %d), main %d (min %d); want %d (%d) and %d (%d)",
				c.total, c.min, q.MaxConns, q.MinConns, cfg.MaxConns, cfg.MinConns, c.quick, c.quickMin, c.main, c.mainMin)
		}
		if q.ConnConfig.RuntimeParams["application_name"] != "x" || q.AfterConnect == nil {
			t.Errorf("the quick pool lost the node's runtime parameters or its AfterConnect")
		}
	}
}

// A quick pool connection has the quick settings for its session (READ
// COMMITTED among them, set by the session whatever the role's or
// database's default); a main pool connection keeps the server's.
func TestQuickPoolSessions(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ctx := t.Context()
	qc, err := s.quick.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.Release()
	mc, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Release()
	for k, v := range quickPlanSettings {
		var quick, main string
		if err := qc.QueryRow(ctx, `SELECT current_setting($1)`, k).Scan(&quick); err != nil {
			t.Fatal(err)
		}
		if err := mc.QueryRow(ctx, `SELECT current_setting($1)`, k).Scan(&main); err != nil {
			t.Fatal(err)
		}
		if quick != v {
			t.Errorf("quick session %s = %q, want %q", k, quick, v)
		}
		if main == v && k != "default_transaction_isolation" {
			t.Errorf("main session %s = %q, want the server's default", k, main)
		}
	}
}

// The quick ack sends its lock of the stories and its statement in one
// pipeline without BEGIN or COMMIT, on the assumption that the statements
// up to the pipeline's Sync run in one implicit transaction: the locks
// of the first are held through the second, and the commit is done when
// the batch is closed. A pipeline of two reads of the transaction id and a
// check of the transaction's state afterwards hold pgx and the server to
// it.
func TestQuickPipelineOneTransaction(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ctx := t.Context()
	conn, err := s.quick.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_current_xact_id()::text`)
	b.Queue(`SELECT pg_current_xact_id()::text`)
	br := conn.SendBatch(ctx, b)
	var first, second string
	err = br.QueryRow().Scan(&first)
	if err == nil {
		err = br.QueryRow().Scan(&second)
	}
	if err = endPipeline(conn, br, err); err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("the pipeline's statements ran in transactions %s and %s, want one", first, second)
	}
	var now string
	if err := conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&now); err != nil || now == first {
		t.Fatalf("the next statement ran in transaction %s (%v), want a new one after %s", now, err, first)
	}
}
