package postgres

import (
	"context"
	"fmt"
	"time"
)

// startupLockKey is the first half of the advisory lock key of LockStartup;
// the second half is a hash of the schema, as for migrations.
const startupLockKey = 0x50b06

// LockStartup serializes the first steps of nodes that start together on
// one database: a node holds the lock while it reads or makes the signing
// key, the handle key and the first operator, so the second node finds
// what the first made instead of making its own (two signing keys made at
// once would each be known to one node only until the next key reload).
// It returns the function that releases the lock; call it once.
//
// The lock is a session advisory lock on a connection of its own, held for
// the few statements of a start: it is outside the hot path, like the
// migration lock (and, like it, needs a direct or session-pooled
// connection).
func (s *Store) LockStartup(ctx context.Context) (unlock func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: startup lock: %w", interpretError(err))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext(coalesce(current_schema(), '')))`, startupLockKey); err != nil {
		conn.Release()
		return nil, fmt.Errorf("postgres: startup lock: %w", interpretError(err))
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext(coalesce(current_schema(), '')))`, startupLockKey); err != nil {
			// Closing the session releases its locks for sure.
			s.logger.Warn("postgres: startup unlock failed; closing the connection", "err", err)
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}
