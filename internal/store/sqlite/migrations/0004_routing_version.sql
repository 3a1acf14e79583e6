-- 0004: a routing version per workspace, so a node can keep a workspace's
-- compiled routing (its consumers' subscriptions) between publishes and
-- know when it is out of date. Every change of a consumer's existence,
-- workspace, kind, subscriptions or listing order gives the workspaces
-- concerned a new version, in the statement's own transaction: the
-- triggers below do it whatever path writes the connection. A publish
-- reads the version (one primary-key lookup) and reloads the consumers
-- only when it differs from the version of the routing it holds. The new
-- version is random, not the old one plus one: a publish may read a
-- change of the transaction it shares (the writer groups operations), and
-- if that transaction is then lost, a counter would give the same number
-- to the next, different change, and the routing read from the lost one
-- would pass for current.
ALTER TABLE workspaces ADD COLUMN routing_version INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER connections_routing_insert AFTER INSERT ON connections
WHEN NEW.kind = 'consumer'
BEGIN
    UPDATE workspaces SET routing_version = random() WHERE id = NEW.workspace_id;
END;

CREATE TRIGGER connections_routing_delete AFTER DELETE ON connections
WHEN OLD.kind = 'consumer'
BEGIN
    UPDATE workspaces SET routing_version = random() WHERE id = OLD.workspace_id;
END;

-- Status and credentials do not route: a consumer of any status gets its
-- messages. Publish lists consumers by created_at, then rowid.
CREATE TRIGGER connections_routing_update AFTER UPDATE ON connections
WHEN (OLD.kind = 'consumer' OR NEW.kind = 'consumer')
    AND (OLD.id IS NOT NEW.id OR OLD.workspace_id IS NOT NEW.workspace_id OR OLD.kind IS NOT NEW.kind
        OR OLD.subscriptions IS NOT NEW.subscriptions OR OLD.created_at IS NOT NEW.created_at)
BEGIN
    UPDATE workspaces SET routing_version = random()
    WHERE id IN (OLD.workspace_id, NEW.workspace_id);
END;
