package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// routeQuerier is what router reads through: a transaction or a pooled
// connection.
type routeQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// router returns the routing of a workspace as of the statement it runs:
// the cached router when the workspace's routing version is the one it was
// built at, else one built from the consumers (any status, sorted by id),
// then cached. Every change to the consumers or their subscriptions sets a
// new routing version in its own transaction (a trigger on connections),
// whichever node makes it, so a version read here names exactly one set of
// consumers. On a miss the version and the consumers are read in one
// statement, so that under READ COMMITTED they come from one snapshot: a
// change committed between two statements cannot pair an old version with
// new consumers.
func router(ctx context.Context, q routeQuerier, cache *bus.RouteCache, workspaceID string) (*bus.Router, error) {
	var version int64
	err := q.QueryRow(ctx, `SELECT routing_version FROM workspaces WHERE id = $1`, workspaceID).Scan(&version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, err
	default:
		if r := cache.Get(workspaceID, version); r != nil {
			return r, nil
		}
	}
	rows, err := q.Query(ctx, `SELECT (SELECT routing_version FROM workspaces WHERE id = $1), c.id, c.subscriptions
		FROM (SELECT) AS one LEFT JOIN connections c ON c.workspace_id = $1 AND c.kind = $2
		ORDER BY c.id`, workspaceID, string(bus.KindConsumer))
	if err != nil {
		return nil, err
	}
	var (
		cs    []bus.RouteConsumer
		known *int64 // nil when there is no such workspace: not cached
	)
	for rows.Next() {
		var id, subs *string
		if err := rows.Scan(&known, &id, &subs); err != nil {
			rows.Close()
			return nil, err
		}
		if id == nil {
			continue // no consumer: the one row of the outer join
		}
		c := bus.RouteConsumer{ID: *id}
		if subs != nil {
			if err := json.Unmarshal([]byte(*subs), &c.Subscriptions); err != nil {
				rows.Close()
				return nil, fmt.Errorf("connection %s: subscriptions: %w", c.ID, err)
			}
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r := bus.NewRouter(cs)
	if known != nil {
		cache.Put(workspaceID, *known, r)
	}
	return r, nil
}
