-- 0011: a connection's skill registrations belong to it by a foreign key,
-- removed with it (ON DELETE CASCADE), as on SQLite. Before, the row was
-- written without looking at the connection, so a put of the skills that
-- overlapped the removal of their connection (its DELETE committed between
-- the bus's check that the connection exists and the put) left a skills
-- row of a connection that no longer exists; the key's check makes such a
-- put wait for the removal and fail (23503, bus.ErrNotFound), or the
-- removal wait for the put and take its row along. skills is a small
-- table written only by the management API: the check costs nothing that
-- matters, unlike on the queue tables.
--
-- The two tables are locked first (in the order a connection's removal
-- writes them), so that no put or removal of a node of an earlier version
-- runs between the deletion of the rows left so far and the key's check
-- of the rest.
LOCK TABLE connections, skills IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM skills x WHERE NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = x.connection_id);
ALTER TABLE skills ADD CONSTRAINT skills_connection_id_fkey
    FOREIGN KEY (connection_id) REFERENCES connections (id) ON DELETE CASCADE;
