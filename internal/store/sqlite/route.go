package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sombus/sombus/internal/bus"
)

// router returns the routing of a workspace as the transaction of d sees
// it: the cached router when the workspace's routing version is the one it
// was built at, else one built from the consumers read now, then cached.
// Every change to the consumers or their subscriptions sets a new routing
// version in its own transaction (triggers of the connections table), so
// the two agree. The consumers are listed as publish has always listed
// them: by created_at, then rowid.
func router(d *dbq, cache *bus.RouteCache, workspaceID string) (*bus.Router, error) {
	var version int64
	err := d.row(`SELECT routing_version FROM workspaces WHERE id = ?`, workspaceID).Scan(&version)
	known := err == nil
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// No such workspace: route by whatever consumers name it, uncached.
	case err != nil:
		return nil, interpretError(err)
	default:
		if r := cache.Get(workspaceID, version); r != nil {
			return r, nil
		}
	}
	rows, err := d.query(`SELECT id, subscriptions FROM connections
		WHERE workspace_id = ? AND kind = ? ORDER BY created_at, rowid`, workspaceID, string(bus.KindConsumer))
	if err != nil {
		return nil, interpretError(err)
	}
	var cs []bus.RouteConsumer
	for rows.Next() {
		var c bus.RouteConsumer
		var subs string
		if err := rows.Scan(&c.ID, &subs); err != nil {
			_ = rows.Close()
			return nil, interpretError(err)
		}
		if err := json.Unmarshal([]byte(subs), &c.Subscriptions); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("connection %s: subscriptions: %w", c.ID, err)
		}
		cs = append(cs, c)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	r := bus.NewRouter(cs)
	if known {
		cache.Put(workspaceID, version, r)
	}
	return r, nil
}

// warmRoutes compiles the routing of workspaceID on the read pool when
// this node holds none for it (the workspace's first publish since the
// start, or since its routing was dropped from the cache), so that the
// writer finds it: reading and parsing every consumer's subscriptions
// inside the write transaction made every other write wait for it, a
// millisecond or more for a workspace of a hundred consumers. The writer
// still checks the version it reads against the compiled one and compiles
// again when they differ (a consumer changed meanwhile); a failure here
// only leaves the work to the writer.
func (s *Store) warmRoutes(ctx context.Context, workspaceID string) {
	if _, _, ok := s.routes.Latest(workspaceID); ok {
		return
	}
	_ = s.read(ctx, func(d *dbq) error {
		_, err := router(d, &s.routes, workspaceID)
		return err
	})
}
