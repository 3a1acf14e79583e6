-- 0006: queue counts in constant time. Each queue's number of messages and
-- of dead letters is a counter, kept by triggers in the transaction of
-- every change (inserts, deletes, and the deletes a connection's removal
-- cascades to), so that the counts read two numbers instead of counting
-- a queue's rows. In flight and delayed, which depend on the time of the
-- read, come from the writer's index of story heads (or, for a queue it
-- has not loaded, from the stories table).
CREATE TABLE queue_counts (
    queue_id     TEXT PRIMARY KEY,
    messages     INTEGER NOT NULL,
    dead_letters INTEGER NOT NULL
) WITHOUT ROWID;

-- Every connection has its row (from its creation to its removal), so
-- that each change of a counter is one update.
INSERT INTO queue_counts (queue_id, messages, dead_letters)
    SELECT c.id,
        (SELECT count(*) FROM messages m WHERE m.queue_id = c.id),
        (SELECT count(*) FROM dead_letters d WHERE d.queue_id = c.id)
    FROM connections c;

CREATE TRIGGER queue_counts_connection_in AFTER INSERT ON connections BEGIN
    INSERT INTO queue_counts (queue_id, messages, dead_letters) VALUES (NEW.id, 0, 0);
END;
CREATE TRIGGER queue_counts_connection_out AFTER DELETE ON connections BEGIN
    DELETE FROM queue_counts WHERE queue_id = OLD.id;
END;
CREATE TRIGGER queue_counts_message_in AFTER INSERT ON messages BEGIN
    UPDATE queue_counts SET messages = messages + 1 WHERE queue_id = NEW.queue_id;
END;
CREATE TRIGGER queue_counts_message_out AFTER DELETE ON messages BEGIN
    UPDATE queue_counts SET messages = messages - 1 WHERE queue_id = OLD.queue_id;
END;
CREATE TRIGGER queue_counts_dead_in AFTER INSERT ON dead_letters BEGIN
    UPDATE queue_counts SET dead_letters = dead_letters + 1 WHERE queue_id = NEW.queue_id;
END;
CREATE TRIGGER queue_counts_dead_out AFTER DELETE ON dead_letters BEGIN
    UPDATE queue_counts SET dead_letters = dead_letters - 1 WHERE queue_id = OLD.queue_id;
END;
