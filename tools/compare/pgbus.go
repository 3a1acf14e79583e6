package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgBus is a plain PostgreSQL queue table, the usual way: a publish is an
// INSERT committed on its own (a batch: one INSERT of all its rows, one
// commit); a receive claims up to 10 visible rows, oldest first, with
// FOR UPDATE SKIP LOCKED and makes them invisible for 30 s (one UPDATE,
// committed); an ack deletes the rows (one DELETE, committed). With the
// database's default synchronous_commit every commit waits for its WAL
// flush, as sombus's answers wait for theirs. The table is vacuumed and
// analysed before the drain (BeforeDrain).
type pgBus struct {
	pool  *pgxpool.Pool
	table string
	name  string
}

func newPostgres(ctx context.Context, cfg config, url, table string) (*pgBus, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(cfg.workers) + 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		pool.Close()
		return nil, err
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0]
	}
	return &pgBus{pool: pool, table: pgx.Identifier{table}.Sanitize(), name: "PostgreSQL " + version + " plain table, SKIP LOCKED"}, nil
}

func (b *pgBus) Name() string { return b.name }

func (b *pgBus) Reset(ctx context.Context, _ int) error {
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
CREATE TABLE %[1]s (
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	story         text NOT NULL,
	message_id    text NOT NULL,
	body          bytea NOT NULL,
	visible_at    timestamptz NOT NULL DEFAULT now(),
	receive_count int NOT NULL DEFAULT 0
)`, b.table))
	return err
}

func (b *pgBus) Publish(ctx context.Context, _ int, msgs []msg) error {
	if len(msgs) == 1 {
		_, err := b.pool.Exec(ctx, "INSERT INTO "+b.table+" (story, message_id, body) VALUES ($1, $2, $3)", msgs[0].story, msgs[0].id, msgs[0].body)
		return err
	}
	stories, ids, bodies := make([]string, len(msgs)), make([]string, len(msgs)), make([][]byte, len(msgs))
	for i, m := range msgs {
		stories[i], ids[i], bodies[i] = m.story, m.id, m.body
	}
	_, err := b.pool.Exec(ctx, "INSERT INTO "+b.table+" (story, message_id, body) SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])", stories, ids, bodies)
	return err
}

// BeforeDrain runs VACUUM ANALYZE on the filled table, outside the timed
// phases: the planner then knows the table (a table just made and
// filled has no statistics yet), as autovacuum would see to on a queue
// in use.
func (b *pgBus) BeforeDrain(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, "VACUUM ANALYZE "+b.table)
	return err
}

type pgRow struct {
	id   int64
	body []byte
}

func (b *pgBus) Receive(ctx context.Context, _, max int) ([]any, error) {
	rows, err := b.pool.Query(ctx, `UPDATE `+b.table+` SET visible_at = now() + interval '30 seconds', receive_count = receive_count + 1
WHERE id IN (SELECT id FROM `+b.table+` WHERE visible_at <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, body`, max)
	if err != nil {
		return nil, err
	}
	var got []any
	for rows.Next() {
		var r pgRow
		if err := rows.Scan(&r.id, &r.body); err != nil {
			rows.Close()
			return nil, err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(got) == 0 {
		// Nothing visible now (the others hold the rest): do not spin.
		time.Sleep(time.Millisecond)
	}
	return got, nil
}

func (b *pgBus) Ack(ctx context.Context, _ int, got []any) error {
	ids := make([]int64, len(got))
	for i, g := range got {
		ids[i] = g.(pgRow).id
	}
	tag, err := b.pool.Exec(ctx, "DELETE FROM "+b.table+" WHERE id = ANY($1)", ids)
	if err == nil && tag.RowsAffected() != int64(len(ids)) {
		err = fmt.Errorf("ack: %d of %d rows deleted", tag.RowsAffected(), len(ids))
	}
	return err
}

func (b *pgBus) Close() { b.pool.Close() }
