-- 0005: a leaner message path. The writer keeps the delivery state of every
-- story head in memory (loaded from the stories table), so the claim scan,
-- the dead-letter scan and the next visible time no longer read the
-- stories indexes; dropping them spares every receive, release and ack
-- two index updates. Queue counts scan a queue's stories through the
-- UNIQUE (queue_id, story_key) index instead.
DROP INDEX stories_claim;
DROP INDEX stories_received;

-- Ack records: the primary key is the only key (WITHOUT ROWID: one B-tree,
-- not a table and an index), and no foreign key to connections, so that an
-- ack does not look the connection up; deleting a connection deletes its
-- ack records itself.
CREATE TABLE ack_records_v4 (
    queue_id TEXT NOT NULL,
    story_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    nonce    INTEGER NOT NULL,
    acked_at INTEGER NOT NULL,
    PRIMARY KEY (queue_id, story_id, seq)
) WITHOUT ROWID;
INSERT INTO ack_records_v4 (queue_id, story_id, seq, nonce, acked_at)
    SELECT queue_id, story_id, seq, nonce, acked_at FROM ack_records;
DROP TABLE ack_records;
ALTER TABLE ack_records_v4 RENAME TO ack_records;
CREATE INDEX ack_records_acked ON ack_records(acked_at);
