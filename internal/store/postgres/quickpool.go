package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The quick receive and the quick ack run on a pool of their own, whose
// sessions start with quickPlanSettings:
//
//   - plan_cache_mode: each statement runs on its generic plan from its
//     first execution on a connection. The plan is the same whatever the
//     values (every row is reached by key), and planning again on every
//     execution (auto mode keeps custom plans for these statements) cost
//     0.1 to 0.3 ms of the database's CPU a statement, more than most of
//     them take to run.
//   - no sequential or bitmap scans, no hash or merge joins: a generic
//     plan is kept for the connection's life (until the tables' statistics
//     change), and one made on tables nearly empty or never analyzed (a new
//     database, a connection readied before the first publishes) reads
//     whole tables, the cheapest way to read an empty table and the
//     costliest way to read a full one. The receive then read every ready
//     story of its queue through a bitmap scan and sorted them to keep the
//     first ten (TestQuickReceivePlanOrdered), and the ack hash-joined a
//     sequential scan of stories or messages (TestQuickAckPlanLinear).
//     Without them the only plans left are the index probes: the queue's
//     ready stories in order up to the limit, and each handle's rows by
//     their keys.
//
// These settings used to be set in each transaction (set_config(..., true)
// in the pipeline, before the statement), which cost 35 to 55 µs of the
// database's CPU a run (docs/benchmarks.md, the sixteenth round); as
// startup parameters of the pool's sessions they cost nothing a run, and
// no other statement sees them: nothing else runs on this pool.
var quickPlanSettings = map[string]string{
	"plan_cache_mode":   "force_generic_plan",
	"enable_seqscan":    "off",
	"enable_bitmapscan": "off",
	"enable_hashjoin":   "off",
	"enable_mergejoin":  "off",
}

// quickPoolConfig returns the quick pool's configuration, made from the
// node's pool configuration cfg (after its runtime parameters and
// AfterConnect are set), and takes the quick pool's connections out of
// cfg's: pool_max_conns stays the most connections the node holds in all
// (the LISTEN connection aside). The quick pool has a quarter of them, at
// least one; the main pool keeps the rest, at least one. The gatherers run
// at most a run or two of each kind per queue at a time, and a few
// concurrent runs keep the database's cores busy, so a quarter is plenty;
// a run that finds them all busy waits for one, as any request waits for
// a pool connection.
//
// A quick connection takes its counter slot when it connects, as every
// pool connection does (an ack deletes messages, which the counter
// trigger counts), and readies nothing else: the two statements are
// prepared on their first run on the connection.
func quickPoolConfig(cfg *pgxpool.Config, slot func(context.Context, *pgx.Conn) error) *pgxpool.Config {
	q := cfg.Copy()
	q.MaxConns = max(cfg.MaxConns/4, 1)
	cfg.MaxConns = max(cfg.MaxConns-q.MaxConns, 1)
	q.MinConns = min(q.MinConns, q.MaxConns)
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	q.MinIdleConns = min(q.MinIdleConns, q.MaxConns)
	cfg.MinIdleConns = min(cfg.MinIdleConns, cfg.MaxConns)
	rp := q.ConnConfig.RuntimeParams
	for k, v := range quickPlanSettings {
		rp[k] = v
	}
	q.AfterConnect = slot
	return q
}
