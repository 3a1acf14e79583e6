-- 0002: limits shared by every node: the per-connection token bucket and
-- daily quota (limits.State), and the token service's failure windows.
--
-- Both tables are updated on almost every request and have no index but
-- their primary key, whose columns never change: every update can be a HOT
-- update (a new row version on the same page, no index entry), which
-- fillfactor 50 leaves room for, and page pruning reclaims the old versions
-- without waiting for vacuum. Idle rows are deleted by the nodes (a bucket
-- full again with nothing counted today; a failure window that ended), so
-- the tables hold only the connections and addresses active now or today,
-- and the sweeps are sequential scans of small tables.

-- rate_limits: one row per connection id holding limits.State.
CREATE TABLE rate_limits (
    key             text PRIMARY KEY,
    -- Bucket.Full in unix nanoseconds; NULL: the zero time (full).
    bucket_full     bigint,
    -- Bucket.Interval in nanoseconds.
    bucket_interval bigint NOT NULL DEFAULT 0,
    -- Quota.Day in unix seconds (00:00 UTC); NULL: the zero time.
    quota_day       bigint,
    quota_count     bigint NOT NULL DEFAULT 0
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- auth_failures: failed authentications at the token service, one window
-- per client id (kind 'c') and per remote address (kind 'a').
CREATE TABLE auth_failures (
    kind         text NOT NULL,
    key          text NOT NULL,
    -- The window's first failure, unix nanoseconds.
    window_start bigint NOT NULL,
    failures     integer NOT NULL,
    PRIMARY KEY (kind, key)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
