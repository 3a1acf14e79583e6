package postgres

import (
	"context"
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
// turned off. Under a sustained load a minute is far too long: on a server
// with autovacuum off, a minute of publishing and draining about 4,000
// messages a second left 600,000 dead rows beside the 1,000 live ones of
// stories, its indexes grew to 5,600 pages (250 when vacuumed every
// second) and the rate fell by half (docs/benchmarks.md, the twenty-second
// round). So each node checks these tables at every maintenance round
// (every second) and vacuums those that passed autovacuum's threshold.
var vacuumTables = []string{"stories", "messages", "queue_counts", "ack_records", "dedup_records", "attempts"}

// vacuumDueSQL returns those of the tables $1 (resolved through the
// search_path) whose dead rows passed autovacuum's threshold:
// autovacuum_vacuum_threshold plus autovacuum_vacuum_scale_factor times
// the live rows, each from the table's storage parameters when set there
// (the migrations set them for the busiest tables), else from the server's
// settings. Autovacuum counts the live rows from pg_class.reltuples; this
// takes the statistics' live count, which follows every change and not
// only the latest vacuum or analyze. A table whose autovacuum_enabled
// parameter is off is left alone: that is how an operator takes a table
// out of it. So is a table this session's role does not own (or belong to
// the owner of): VACUUM would only warn and skip it. Names come back as
// regclass prints them (quoted where needed). The counts come from the
// functions behind pg_stat_user_tables (n_dead_tup, n_live_tup): the view
// itself groups every table of the database.
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
	WHERE o.enabled AND pg_has_role(c.relowner, 'USAGE')
		AND pg_stat_get_dead_tuples(c.oid) > o.threshold + o.scale * pg_stat_get_live_tuples(c.oid)
	ORDER BY t.ord`

// vacuumSQL is the vacuum of one table. SKIP_LOCKED passes over a table
// another session is vacuuming (another node, or autovacuum); TRUNCATE
// false leaves the empty pages at the table's end in place, as giving
// them back takes an exclusive lock of the table, which every write of
// the queue would wait behind, every second. The pages are used again.
func vacuumSQL(table string) string { return `VACUUM (SKIP_LOCKED, TRUNCATE false) ` + table }

// vacuumDuty bounds how much of its time a node spends vacuuming one
// table: after a vacuum that took d, the next starts no sooner than
// vacuumDuty times d after the first one started. A small hot table
// (milliseconds) is vacuumed at every round that finds it due; a large
// one, or one whose dead rows a long transaction keeps from going (they
// stay counted, so the table stays due), is not vacuumed back to back.
const vacuumDuty = 5

// vacuumWarnEvery bounds how often a table's failing vacuum is logged.
const vacuumWarnEvery = time.Minute

// vacuums is a node's vacuums of the busy tables: each table is vacuumed
// by one goroutine at a time, separately, so that a long vacuum of a large
// table (messages, with a backlog) never holds back the next vacuum of a
// small hot one (stories).
type vacuums struct {
	checking bool // a read of which tables are due is under way
	busy     map[string]bool
	next     map[string]time.Time // no vacuum of the table before
	warned   map[string]time.Time // the latest warning of a failure
	// sql returns the vacuum of a table (vacuumSQL; a test stands a slow
	// statement in).
	sql func(table string) string
}

// startVacuum reads, in the background, which busy tables are due and
// vacuums each that is not being vacuumed by this node already; nothing
// once Close has begun. Close cancels the vacuums under way.
func (s *Store) startVacuum() {
	s.vacMu.Lock()
	defer s.vacMu.Unlock()
	if s.vac.checking {
		return
	}
	s.vac.checking = s.goBackground(func() {
		due := s.vacuumDue(s.stop)
		s.vacMu.Lock()
		defer s.vacMu.Unlock()
		s.vac.checking = false
		now := time.Now()
		for _, table := range due {
			if s.vac.busy[table] || now.Before(s.vac.next[table]) {
				continue
			}
			if s.goBackground(func() { s.vacuumTable(table) }) {
				s.vac.busy[table] = true
			}
		}
	})
}

// vacuumDue returns the tables due for a vacuum (none when the read
// fails, which is logged at most once a vacuumWarnEvery: while the
// database is unreachable, the round's other steps already say so every
// second).
func (s *Store) vacuumDue(ctx context.Context) []string {
	rows, err := s.pool.Query(ctx, vacuumDueSQL, vacuumTables)
	var due []string
	if err == nil {
		due, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil && ctx.Err() == nil && s.vacuumWarn("") {
		s.logger.Warn("postgres: reading which tables to vacuum failed", "err", err)
	}
	return due
}

// vacuumWarn reports whether a failure of table's vacuum ("": of the read
// of the tables due) is to be logged now, at most once a vacuumWarnEvery.
func (s *Store) vacuumWarn(table string) bool {
	s.vacMu.Lock()
	defer s.vacMu.Unlock()
	if time.Since(s.vac.warned[table]) < vacuumWarnEvery {
		return false
	}
	s.vac.warned[table] = time.Now()
	return true
}

// vacuumTable vacuums table, outside any transaction (as VACUUM must), on
// a connection of the pool. A failure is logged, at most once a
// vacuumWarnEvery for a table; the next round tries again.
func (s *Store) vacuumTable(table string) {
	start := time.Now()
	_, err := s.pool.Exec(s.stop, s.vac.sql(table))
	took := time.Since(start)
	s.vacMu.Lock()
	delete(s.vac.busy, table)
	s.vac.next[table] = start.Add(vacuumDuty * took)
	s.vacMu.Unlock()
	warn := err != nil && s.stop.Err() == nil && s.vacuumWarn(table)
	switch {
	case warn:
		s.logger.Warn("postgres: vacuum failed", "table", table, "err", err)
	case err == nil:
		s.logger.Debug("postgres: vacuumed", "table", table, "took", took)
	}
}

// newVacuums returns the state of a store's vacuums.
func newVacuums() vacuums {
	return vacuums{busy: map[string]bool{}, next: map[string]time.Time{}, warned: map[string]time.Time{}, sql: vacuumSQL}
}
