package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// queueGaugesQuery counts every consumer queue (kind $1) at $2 in one
// statement, with the same columns as queueStatsQuery.
const queueGaugesQuery = `SELECT c.workspace_id, c.id, ` + queueCountCols + `
	FROM connections c` + queueCountFrom + ` WHERE c.kind = $1 ORDER BY c.workspace_id COLLATE "C", c.id COLLATE "C"`

// QueueGauges counts every consumer queue in one statement (one snapshot).
func (s *Store) QueueGauges(ctx context.Context, now time.Time) ([]bus.QueueGauge, error) {
	var out []bus.QueueGauge
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		out = out[:0]
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		n := ms(now)
		rows, err := tx.Query(ctx, queueGaugesQuery, string(bus.KindConsumer), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var g bus.QueueGauge
			if g.QueueStats, err = scanCounts(rows, n, &g.WorkspaceID, &g.ConnectionID); err != nil {
				return err
			}
			out = append(out, g)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("queue gauges: %w", err)
	}
	return out, nil
}
