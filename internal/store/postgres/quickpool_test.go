package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The quick pool takes a quarter of the node's connections (at least one)
// out of the main pool's, so pool_max_conns stays the node's total, and
// its planner settings stay out of the main pool's sessions.
func TestQuickPoolConfig(t *testing.T) {
	slot := func(context.Context, *pgx.Conn) error { return nil }
	for _, c := range []struct{ total, quick, main int32 }{
		{20, 5, 15}, {8, 2, 6}, {4, 1, 3}, {2, 1, 1}, {1, 1, 1},
	} {
		cfg, err := pgxpool.ParseConfig("postgres://u@127.0.0.1:5432/db?application_name=x")
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = c.total, c.total
		q := quickPoolConfig(cfg, slot)
		if q.MaxConns != c.quick || cfg.MaxConns != c.main {
			t.Errorf("pool_max_conns %d: quick %d, main %d; want %d and %d", c.total, q.MaxConns, cfg.MaxConns, c.quick, c.main)
		}
		if q.MinConns > q.MaxConns || cfg.MinConns > cfg.MaxConns {
			t.Errorf("pool_max_conns %d: min conns %d and %d above the pools' sizes", c.total, q.MinConns, cfg.MinConns)
		}
		for k, v := range quickPlanSettings {
			if got := q.ConnConfig.RuntimeParams[k]; got != v {
				t.Errorf("quick pool %s = %q, want %q", k, got, v)
			}
			if _, ok := cfg.ConnConfig.RuntimeParams[k]; ok {
				t.Errorf("the main pool's sessions set %s", k)
			}
		}
		if q.ConnConfig.RuntimeParams["application_name"] != "x" || q.AfterConnect == nil {
			t.Errorf("the quick pool lost the node's runtime parameters or its AfterConnect")
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
