package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

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
// And default_transaction_isolation: the quick paths send no BEGIN (their
// pipelines are implicit transactions), so the session pins READ
// COMMITTED, which every other path asks for in its BEGIN, whatever a
// role or database sets.
//
// These settings used to be set in each transaction (set_config(..., true)
// in the pipeline, before the statement), which cost 35 to 55 µs of the
// database's CPU a run (docs/benchmarks.md, the sixteenth round). Now each
// quick connection sets them for its session once, when it connects
// (quickSessionSQL): nothing a run. A statement rather than startup
// parameters, which a session pooler between the node and the database
// (PgBouncer) refuses unless told to ignore them, and then drops. No
// other statement of the store sees them: only the quick receive and ack
// run on this pool (besides what readies and ends its connections).
var quickPlanSettings = map[string]string{
	"plan_cache_mode":               "force_generic_plan",
	"enable_seqscan":                "off",
	"enable_bitmapscan":             "off",
	"enable_hashjoin":               "off",
	"enable_mergejoin":              "off",
	"default_transaction_isolation": "read committed",
}

// quickSessionSQL sets quickPlanSettings for the session.
var quickSessionSQL = func() string {
	keys := slices.Sorted(maps.Keys(quickPlanSettings))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("set_config('%s', '%s', false)", k, quickPlanSettings[k])
	}
	return "SELECT " + strings.Join(parts, ", ")
}()

// quickPoolConfig returns the quick pool's configuration, made from the
// node's pool configuration cfg (after its runtime parameters are set),
// and takes the quick pool's connections out of cfg's: pool_max_conns (and
// pool_min_conns) stay what the node holds in all (the LISTEN connection
// aside), except that each pool holds at least one. The quick pool has a
// quarter of them; the main pool keeps the rest. A quick run holds its
// connection for one round trip, and a few runs at once keep the
// database's cores busy; a run that finds them all busy waits for one, as
// any request waits for a pool connection.
//
// A quick connection takes its counter slot when it connects (slot), as
// every pool connection does (an ack deletes messages, which the counter
// trigger counts), and sets its session's settings. A connection whose
// settings fail is used all the same (the statements then plan as on the
// main pool: slower, never wrong), and the failure is logged.
func quickPoolConfig(cfg *pgxpool.Config, slot func(context.Context, *pgx.Conn) error, logger *slog.Logger) *pgxpool.Config {
	q := cfg.Copy()
	q.MaxConns = max(cfg.MaxConns/4, 1)
	cfg.MaxConns = max(cfg.MaxConns-q.MaxConns, 1)
	q.MinConns = min(cfg.MinConns, q.MaxConns)
	cfg.MinConns = min(max(cfg.MinConns-q.MinConns, 0), cfg.MaxConns)
	q.MinIdleConns = min(cfg.MinIdleConns, q.MaxConns)
	cfg.MinIdleConns = min(max(cfg.MinIdleConns-q.MinIdleConns, 0), cfg.MaxConns)
	q.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_ = slot(ctx, conn) // never fails
		if _, err := conn.Exec(ctx, quickSessionSQL); err != nil {
			logger.WarnContext(ctx, "postgres: a quick pool connection kept the default planner settings", "err", err)
		}
		return nil
	}
	return q
}
