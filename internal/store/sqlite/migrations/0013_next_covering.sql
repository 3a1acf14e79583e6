-- 0013: messages_next (prev) carries the next message's seq and enqueued_at,
-- so that an ack advances a story to its next message from the index alone.
-- Reading them from the message's row fetched that row's page: with many
-- shallow stories the next message of a story sits far down the table, a
-- page the writer has not read for a long time, which at depth comes back
-- from the operating system (and again when the message is received).
DROP INDEX messages_next;
CREATE INDEX messages_next ON messages(prev, seq, enqueued_at);
