-- 0006: samples of every consumer queue's counts, taken by the bus every
-- few seconds and kept for a day, for the portal's queue chart. at is the
-- start of the sampling interval (unix milliseconds): the primary key makes
-- the nodes that sample the same interval write it once.
CREATE TABLE queue_samples (
    queue_id     text NOT NULL,
    at           bigint NOT NULL,
    ready        bigint NOT NULL,
    in_flight    bigint NOT NULL,
    delayed      bigint NOT NULL,
    dead_letters bigint NOT NULL,
    PRIMARY KEY (queue_id, at)
);
-- Pruning by age, and the check whether an interval was sampled already.
CREATE INDEX queue_samples_at ON queue_samples (at);
