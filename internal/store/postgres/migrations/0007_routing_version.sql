-- 0007: a routing version per workspace, so a node can keep a workspace's
-- compiled routing (its consumers' subscriptions) between publishes and
-- know when it is out of date, whichever node made the change. Every
-- change of a consumer's existence, workspace, kind, subscriptions or id
-- (the order publish lists consumers in) gives the workspaces concerned a
-- new version, in the statement's own transaction: the trigger below does
-- it whatever path writes the connection. A publish reads the version (one
-- primary-key lookup) and reloads the consumers only when it differs from
-- the version of the routing it holds. Status and credentials do not
-- route: a consumer of any status gets its messages. The new version is
-- random, not the old one plus one, so that a change a node saw and the
-- database then lost (a failover to a replica that lacked it) cannot share
-- its number with the next, different change.
ALTER TABLE workspaces ADD COLUMN routing_version bigint NOT NULL DEFAULT 0;

-- routing_version_next is a random bigint (62 random bits: two draws of
-- random(), which gives at least 31 bits each).
CREATE FUNCTION routing_version_next() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (floor(random() * 2147483648)::bigint << 31) | floor(random() * 2147483648)::bigint
$$;

CREATE FUNCTION connections_routing_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.kind = 'consumer' THEN
        UPDATE workspaces SET routing_version = routing_version_next() WHERE id = OLD.workspace_id;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.kind = 'consumer'
        OR TG_OP = 'UPDATE' AND NEW.kind = 'consumer'
            AND (OLD.kind <> 'consumer' OR NEW.workspace_id IS DISTINCT FROM OLD.workspace_id) THEN
        UPDATE workspaces SET routing_version = routing_version_next() WHERE id = NEW.workspace_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER connections_routing_insert_delete AFTER INSERT OR DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_routing_changed();

CREATE TRIGGER connections_routing_update AFTER UPDATE ON connections
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.workspace_id IS DISTINCT FROM NEW.workspace_id
        OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.subscriptions IS DISTINCT FROM NEW.subscriptions)
    EXECUTE FUNCTION connections_routing_changed();
