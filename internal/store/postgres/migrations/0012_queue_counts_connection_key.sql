-- 0012: a queue's counter rows belong to its connection by a foreign key,
-- removed with it (ON DELETE CASCADE), as on SQLite, where a queue's
-- counter row comes and goes with its connection. Before, a publish
-- (or a receive or an ack) that overlapped the removal of its queue could
-- commit after the removal's last statement: its stories and messages
-- were left for the retention sweep, but its counter row (written by the
-- triggers of migration 0008, an upsert that does not look at the
-- connection) stayed for good. Now a transaction that inserts a counter
-- row of a connection removed meanwhile fails (23503; the store runs it
-- again, and a publish then routes without the queue), and the removal
-- waits for the transactions that changed one of the queue's counter rows
-- before its cascade, and deletes their rows too.
--
-- The key is checked only when a counter row is inserted (and when the
-- transaction that inserted it updates it again): a queue has one row per
-- slot that ever wrote to it (at most 64), and every later change updates
-- it without changing its key, which checks nothing. The message path
-- pays nothing else.
--
-- DEFERRABLE INITIALLY DEFERRED: the check runs at commit. A connection's
-- removal deletes its messages and dead letters after the connection's
-- row, and their triggers insert counter rows of the queue again, which
-- its last statement deletes; a deferred check skips rows deleted by
-- then. (The cascade itself is never deferred.) Nodes of the earlier
-- version remove connections in that order too.
--
-- The tables are locked first, in the order a connection's removal writes
-- them, so that no publish, receive or removal of a node of an earlier
-- version runs between the deletion of the rows left so far and the key's
-- check of the rest. The messages, stories and dead letters of removed
-- queues go first: the retention sweep's deletion of such a message or
-- dead letter would insert a counter row of a connection that does not
-- exist (failing the key on every round), and a story without messages is
-- never swept. Such a queue need not have counter rows left: a publish (or
-- a receive that dead-lettered) that updated one of the queue's counter
-- rows and committed while the removal's last statement waited for it
-- left its message, and the removal then deleted the counter row. So each
-- table's own queues are taken, one probe of its queue index per queue (a
-- skip scan: the least queue after the one before), and those without a
-- connection cleared. The deletions' triggers count into counter rows of
-- those queues, which go last with the other counter rows without a
-- connection. Attempt and ack records of removed queues are left to the
-- sweeps of their windows, as before.
LOCK TABLE connections, stories, messages, dead_letters, queue_counts IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM messages x WHERE x.queue_id IN (
    WITH RECURSIVE q (id) AS (
        SELECT min(queue_id) FROM messages
        UNION ALL
        SELECT (SELECT min(y.queue_id) FROM messages y WHERE y.queue_id > q.id) FROM q WHERE q.id IS NOT NULL)
    SELECT q.id FROM q WHERE q.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = q.id));
DELETE FROM stories x WHERE x.queue_id IN (
    WITH RECURSIVE q (id) AS (
        SELECT min(queue_id) FROM stories
        UNION ALL
        SELECT (SELECT min(y.queue_id) FROM stories y WHERE y.queue_id > q.id) FROM q WHERE q.id IS NOT NULL)
    SELECT q.id FROM q WHERE q.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = q.id));
DELETE FROM dead_letters x WHERE x.queue_id IN (
    WITH RECURSIVE q (id) AS (
        SELECT min(queue_id) FROM dead_letters
        UNION ALL
        SELECT (SELECT min(y.queue_id) FROM dead_letters y WHERE y.queue_id > q.id) FROM q WHERE q.id IS NOT NULL)
    SELECT q.id FROM q WHERE q.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = q.id));
DELETE FROM queue_counts x WHERE NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = x.queue_id);
ALTER TABLE queue_counts ADD CONSTRAINT queue_counts_queue_id_fkey
    FOREIGN KEY (queue_id) REFERENCES connections (id) ON DELETE CASCADE
    DEFERRABLE INITIALLY DEFERRED;
