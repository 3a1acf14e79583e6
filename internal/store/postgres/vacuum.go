package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// vacuumTables are the store's tables whose rows change with every
// message, or are written and then deleted by age: a claim and an ack each
// write a new version of a story row (not a HOT update: visible_at is
// indexed), a message is inserted and deleted once, and the counters, ack
// records, dedup records and attempts churn likewise. Each dead version
// stays in the table and in every index until a vacuum removes it, and the
// claim's scan of stories_ready and the ack's look for a story's next
// message step over the dead entries.
//
// PostgreSQL's autovacuum visits a database at most once a
// autovacuum_naptime (a minute by default), and not at all when it is
// turned off. Under a sustained load that is far too seldom: in a minute
// of publishing and draining about 4,000 messages a second, the 1,000 live
// rows of stories left 600,000 dead ones, its indexes grew to 5,600 pages
// (250 when vacuumed every second) and the rate fell by half
// (docs/benchmarks.md, the twenty-second round). So each node checks these tables at every maintenance round
// (every second) and vacuums those that passed autovacuum's own threshold.
var vacuumTables = []string{"stories", "messages", "queue_counts", "ack_records", "dedup_records", "attempts"}

// vacuumDueSQL returns those of the tables $1 (resolved through the
// search_path) whose dead rows passed autovacuum's threshold, as
// autovacuum computes it: autovacuum_vacuum_threshold plus
// autovacuum_vacuum_scale_factor times the live rows, each from the
// table's storage parameters when set there (the migrations set them for
// the busiest tables), else from the server's settings. A table whose
// autovacuum_enabled parameter is off is left alone: that is how an
// operator takes a table out of it. Names come back as regclass prints
// them (quoted where needed). The counts come from the functions behind
// pg_stat_user_tables (n_dead_tup, n_live_tup): the view itself groups
// every table of the database.
const vacuumDueSQL = `SELECT c.oid::regclass::text
	FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
	JOIN pg_class c ON c.oid = to_regclass(t.name)
	CROSS JOIN LATERAL (SELECT
		coalesce((SELECT option_value::bool FROM pg_options_to_table(c.reloptions)
			WHERE option_name = 'autovacuum_enabled'), true) AS enabled,
		coalesce((SELECT option_value::float8 FROM pg_options_to_table(c.reloptions)
			WHERE option_name = 'autovacuum_vacuum_threshold'),
			current_setting('autovacuum_vacuum_threshold')::float8) AS threshold,
		coalesce((SELECT option_value::float8 FROM pg_options_to_table(c.reloptions)
			WHERE option_name = 'autovacuum_vacuum_scale_factor'),
			current_setting('autovacuum_vacuum_scale_factor')::float8) AS scale) o
	WHERE o.enabled AND pg_stat_get_dead_tuples(c.oid) > o.threshold + o.scale * pg_stat_get_live_tuples(c.oid)
	ORDER BY t.ord`

// startVacuum vacuums, in the background, the tables of vacuumTables that
// are due; nothing when a vacuum of this store is still under way (one at
// a time, so a long one never piles up) or once Close has begun. Close
// cancels a vacuum under way.
func (s *Store) startVacuum() {
	if !s.vacuuming.CompareAndSwap(false, true) {
		return
	}
	if !s.goBackground(func() {
		defer s.vacuuming.Store(false)
		s.vacuum(s.stop)
	}) {
		s.vacuuming.Store(false)
	}
}

// vacuum vacuums the tables that are due, in one VACUUM: SKIP_LOCKED
// passes over a table another session is vacuuming (another node, or
// autovacuum). It runs outside any transaction, as VACUUM must, on a
// connection of the pool. A failure is logged; the next round tries again.
func (s *Store) vacuum(ctx context.Context) {
	rows, err := s.pool.Query(ctx, vacuumDueSQL, vacuumTables)
	var due []string
	if err == nil {
		due, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("postgres: reading which tables to vacuum failed", "err", err)
		}
		return
	}
	if len(due) == 0 {
		return
	}
	start := time.Now()
	if _, err := s.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+strings.Join(due, ", ")); err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("postgres: vacuum failed", "tables", due, "err", err)
		}
		return
	}
	s.logger.Debug("postgres: vacuumed", "tables", due, "took", time.Since(start))
}
