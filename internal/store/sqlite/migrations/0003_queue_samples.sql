-- 0003: samples of every consumer queue's counts, taken by the bus every
-- few seconds and kept for a day, for the portal's queue chart. at is the
-- start of the sampling interval (unix milliseconds), so one interval has
-- one sample a queue.
CREATE TABLE queue_samples (
    queue_id     TEXT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
    at           INTEGER NOT NULL,
    ready        INTEGER NOT NULL,
    in_flight    INTEGER NOT NULL,
    delayed      INTEGER NOT NULL,
    dead_letters INTEGER NOT NULL,
    PRIMARY KEY (queue_id, at)
) WITHOUT ROWID;
-- Pruning by age, and the check whether an interval was sampled already.
CREATE INDEX queue_samples_at ON queue_samples(at);
