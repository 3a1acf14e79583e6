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
