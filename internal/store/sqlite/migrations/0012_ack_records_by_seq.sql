-- 0012: ack records in (queue, seq, story) order instead of (queue, story,
-- seq). The writer moves the gathered records of about a thousand acks into
-- ack_records at once (0011); in story order they fall into one place per
-- story acknowledged, and while a queue's stories advance side by side
-- (a drain over many stories takes the heads of all of them in turn) that
-- is a different page for nearly every record once the table holds more
-- pages than the move has records: the move wrote about a page of
-- ack_records per acknowledged message, and more the longer the table
-- (records stay 15 minutes). In seq order the records of stories that
-- advance together are neighbours, at the end of each seq's range: a few
-- pages a move, however long the table. A re-ack looks a record up by all
-- three columns, as before.
CREATE TABLE ack_records_v12 (
    queue_id TEXT NOT NULL,
    story_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    nonce    INTEGER NOT NULL,
    acked_at INTEGER NOT NULL,
    PRIMARY KEY (queue_id, seq, story_id)
) WITHOUT ROWID;
INSERT INTO ack_records_v12 (queue_id, story_id, seq, nonce, acked_at)
    SELECT queue_id, story_id, seq, nonce, acked_at FROM ack_records ORDER BY queue_id, seq, story_id;
DROP TABLE ack_records;
ALTER TABLE ack_records_v12 RENAME TO ack_records;
CREATE INDEX ack_records_acked ON ack_records(acked_at);
