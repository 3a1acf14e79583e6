package postgres

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// Counter slots per pool connection.
//
// Every transaction that inserts or deletes messages or dead letters
// changes its queue's counter row of its own slot (migration 0008). The
// trigger finds the slot with queue_counts_slot(): the session setting
// sombus.count_slot when it is set, or else a search for a slot whose
// transaction advisory lock it can take, from the backend's own slot on,
// kept in a transaction-local setting. The search (an advisory lock and a
// set_config from PL/pgSQL) cost 20–30 µs of every writing transaction.
//
// takeCountSlot gives a pool connection its slot once, when it connects: a
// session advisory lock on the first free slot from the backend's own on,
// with the same keys as the function's (so the slot is the connection's
// alone, among the transaction locks that nodes of an earlier version take
// as well as among this version's connections), and the session setting
// that the function reads first. Its writing transactions then take no
// lock and set nothing. The lock ends with the session; nothing else in
// the store resets the setting or releases advisory locks of this key
// space (the store's other advisory locks have two-integer keys).
//
// Counting stays exact whatever slot a transaction uses: the slots only
// keep concurrent writers off each other's rows. So a connection that
// finds all 64 slots of its schema held by other sessions (more than 64
// pooled connections over all nodes of a schema), or whose statement
// fails, is left without the setting and finds a slot per transaction, as
// before.
const takeCountSlotSQL = `SELECT set_config('sombus.count_slot', c.slot::text, false)
	FROM (SELECT (pg_backend_pid() + i) % 64 AS slot,
		(hashtext(coalesce(current_schema(), ''))::bigint & 4294967295) << 8 AS key
		FROM generate_series(0, 63) AS i) c
	WHERE pg_try_advisory_lock(c.key | c.slot)
	LIMIT 1`

// takeCountSlot is the pool's AfterConnect: it never fails the connection
// (a connection without its slot finds one per transaction).
func takeCountSlot(logger *slog.Logger) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, takeCountSlotSQL)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			logger.DebugContext(ctx, "postgres: no counter slot for the connection", "err", err)
		}
		return nil
	}
}
