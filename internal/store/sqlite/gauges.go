package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// queueGaugesQuery counts every consumer queue (kind ?1) at ?2, with the
// same columns as queueStatsQuery.
const queueGaugesQuery = `SELECT c.workspace_id, c.id, ` + queueCountCols + `
	FROM connections c WHERE c.kind = ?1 ORDER BY c.workspace_id, c.id`

// QueueGauges counts every consumer queue in one read snapshot.
func (s *Store) QueueGauges(ctx context.Context, now time.Time) ([]bus.QueueGauge, error) {
	var out []bus.QueueGauge
	err := s.consistentRead(ctx, func(d *dbq, snaps *outSnaps) error {
		out = out[:0]
		n := ms(now)
		rows, err := d.query(queueGaugesQuery, string(bus.KindConsumer), n)
		if err != nil {
			return interpretError(err)
		}
		var cs []counted
		for rows.Next() {
			var g bus.QueueGauge
			c, err := scanCounts(&rows, n, &g.WorkspaceID, &g.ConnectionID)
			if err != nil {
				_ = rows.Close()
				return interpretError(err)
			}
			c.id = g.ConnectionID
			cs = append(cs, c)
			out = append(out, g)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return interpretError(err)
		}
		for i := range cs {
			if err := cs[i].finish(d, snaps, n); err != nil {
				return err
			}
			out[i].QueueStats = cs[i].st
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue gauges: %w", err)
	}
	return out, nil
}
