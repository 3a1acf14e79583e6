-- 0011: an ack appends its record (what an idempotent re-ack of the same
-- receipt handle looks up) to ack_log, in row id order, and the writer
-- moves the gathered records into ack_records together once about a
-- thousand have gathered. ack_records is kept in (queue, story, seq)
-- order: with few deep stories each ack's record went into a different
-- page of it, so one group commit wrote a page of ack_records for nearly
-- every message it acknowledged; appending writes the last page or two,
-- and the move writes each page of ack_records that the gathered records
-- fall into once.
--
-- A re-ack looks in ack_log first (the newest record of a message wins,
-- as the upsert into ack_records does), then in ack_records. Whatever
-- deletes ack records (their expiry, a connection's removal) deletes them
-- from both.
CREATE TABLE ack_log (
    id       INTEGER PRIMARY KEY,
    queue_id TEXT NOT NULL,
    story_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    nonce    INTEGER NOT NULL,
    acked_at INTEGER NOT NULL
);
