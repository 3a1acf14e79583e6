-- 0010: an ack no longer deletes its message rows at once. It names them
-- in acked_messages, in the same transaction that advances their stories,
-- and the writer deletes the named rows together once a few dozen have
-- gathered. At depth an ack's rows sit on old pages, about three to a
-- page: deleting them one ack at a time wrote each page, and the
-- neighbours that SQLite rebalances it with, once per ack; deleting a run
-- of them writes each page of the run once.
--
-- A row named here is no longer a message of its queue: its story's head
-- is past it (or the story is gone), so it is never delivered again, also
-- after a restart. The queue counts leave it at the ack; the oldest ready
-- message skips it. Whatever deletes a message row (the writer's flush,
-- purge, expiry, a connection's removal) also deletes its name here, so
-- every id here is that of a row in messages, and the largest message id
-- is never given again while its row waits.
CREATE TABLE acked_messages (
    id INTEGER PRIMARY KEY -- the message row's id
);

DROP TRIGGER queue_counts_message_out;
CREATE TRIGGER queue_counts_message_out AFTER DELETE ON messages BEGIN
    UPDATE queue_counts SET messages = messages - 1 WHERE queue_id = OLD.queue_id
        AND NOT EXISTS (SELECT 1 FROM acked_messages a WHERE a.id = OLD.id);
    DELETE FROM acked_messages WHERE id = OLD.id;
END;
