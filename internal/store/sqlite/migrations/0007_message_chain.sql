-- 0007: each story's messages form a chain. A message row names the id of
-- the message before it in its story (prev, 0 for the first one), and a
-- story row the ids of its head and tail messages, so that the message
-- path finds a head by its row id and the next head through the index on
-- prev. That index is ordered as the messages were published, like the
-- table: a receive, an ack and a publish touch the same few pages of it
-- however many stories share the backlog, where the UNIQUE (story_id, seq)
-- index it replaces kept each story's messages apart, so that acking or
-- appending to ten deep stories wrote ten of its pages. Without that index
-- the messages no longer reference stories (a foreign key whose parent
-- rows are deleted needs an index on the child column): a queue's
-- messages go with its connection through a trigger, and a story row is
-- only ever deleted once its messages are gone (or with them, on purge).

-- The counters' triggers on messages go first: the table is rebuilt, not
-- emptied.
DROP TRIGGER queue_counts_message_in;
DROP TRIGGER queue_counts_message_out;

CREATE TABLE messages_v7 (
    id             INTEGER PRIMARY KEY,
    story_id       INTEGER NOT NULL,
    seq            INTEGER NOT NULL,
    prev           INTEGER NOT NULL, -- the story's message before this one, 0 if none
    queue_id       TEXT NOT NULL,
    message_id     TEXT NOT NULL,
    message_type   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    correlation_id TEXT NOT NULL,
    producer_id    TEXT NOT NULL,
    enqueued_at    INTEGER NOT NULL,
    envelope       BLOB NOT NULL
);
INSERT INTO messages_v7 (id, story_id, seq, prev, queue_id, message_id, message_type, topic, correlation_id,
        producer_id, enqueued_at, envelope)
    SELECT id, story_id, seq, coalesce(lag(id) OVER (PARTITION BY story_id ORDER BY seq), 0), queue_id, message_id,
        message_type, topic, correlation_id, producer_id, enqueued_at, envelope
    FROM messages ORDER BY id;

ALTER TABLE stories ADD COLUMN head_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE stories ADD COLUMN tail_id INTEGER NOT NULL DEFAULT 0;
UPDATE stories SET
    head_id = coalesce((SELECT m.id FROM messages m WHERE m.story_id = stories.id ORDER BY m.seq LIMIT 1), 0),
    tail_id = coalesce((SELECT m.id FROM messages m WHERE m.story_id = stories.id ORDER BY m.seq DESC LIMIT 1), 0);

DROP TABLE messages;
ALTER TABLE messages_v7 RENAME TO messages;

-- The next message of a story: WHERE prev = the head's id.
CREATE INDEX messages_next ON messages(prev);
-- Stats (count, oldest ready) and purge by queue.
CREATE INDEX messages_queue ON messages(queue_id, enqueued_at);
-- Retention sweeps across queues.
CREATE INDEX messages_enqueued ON messages(enqueued_at);

CREATE TRIGGER queue_counts_message_in AFTER INSERT ON messages BEGIN
    UPDATE queue_counts SET messages = messages + 1 WHERE queue_id = NEW.queue_id;
END;
CREATE TRIGGER queue_counts_message_out AFTER DELETE ON messages BEGIN
    UPDATE queue_counts SET messages = messages - 1 WHERE queue_id = OLD.queue_id;
END;
-- A connection's removal removes its messages (its stories go through
-- their foreign key).
CREATE TRIGGER messages_connection_out AFTER DELETE ON connections BEGIN
    DELETE FROM messages WHERE queue_id = OLD.id;
END;
