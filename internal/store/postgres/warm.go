package postgres

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// warmPublish readies a new pool connection for the quick publish: it
// prepares quickPublishSQL (pgx then uses that statement for the SQL
// text) and runs it once, with nothing to publish, under the generic plan
// mode, so that the server builds and keeps its generic plan and loads the
// tables and the counter trigger into the session's caches now. Without
// it the first publish on each connection paid for all that: in an
// execution trace of a node, 4.9 ms preparing the statement and 6.5 ms
// running it, against 1–2 ms later (docs/benchmarks.md, the twelfth
// round). With nothing to publish the statement writes nothing: there is
// no workspace with the empty id, so no dedup record, story or message is
// written, and the empty COMMIT waits for no WAL flush.
//
// The statement still takes its tables' locks. So that it never takes
// part in a deadlock with a migration of another node (which locks the
// same tables in another order), it runs in a transaction with a short
// lock_timeout: a lock that is not free at once fails the warm-up, not the
// migration. A warm-up that fails leaves the connection as it was (the
// first publish on it prepares the statement itself); only a connection
// that cannot leave the transaction is refused, so the pool does not hand
// it out.
func warmPublish(ctx context.Context, conn *pgx.Conn, logger *slog.Logger) error {
	err := func() error {
		if _, err := conn.Exec(ctx, `BEGIN ISOLATION LEVEL READ COMMITTED`); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
			return err
		}
		if _, err := conn.Prepare(ctx, quickPublishSQL, quickPublishSQL); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(quickPublishGenericPlans)
		b.Queue(quickPublishSQL, "", int64(0), []string{}, []int32{}, "", int64(0),
			[]string{}, []string{}, []int64{}, []int32{}, []string{}, []string{}, []int64{}, []int64{},
			[]string{}, []string{}, []string{}, []string{}, []int32{}, []byte{}, []int32{})
		b.Queue(`COMMIT`)
		return conn.SendBatch(ctx, b).Close()
	}()
	if err != nil {
		logger.DebugContext(ctx, "postgres: quick publish not readied on a new connection", "err", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			return err
		}
	}
	return nil
}
