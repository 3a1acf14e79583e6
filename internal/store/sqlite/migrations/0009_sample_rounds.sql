-- 0009: the intervals the bus sampled, as rounds. A queue's counts are now
-- written only when they differ from its latest sample and carried forward
-- to the rounds in between when read, so a node with many idle queues does
-- not write (and a day later delete) a row per queue every interval. The
-- intervals sampled so far become rounds.
CREATE TABLE sample_rounds (
    at INTEGER PRIMARY KEY
);
INSERT INTO sample_rounds (at) SELECT DISTINCT at FROM queue_samples;
