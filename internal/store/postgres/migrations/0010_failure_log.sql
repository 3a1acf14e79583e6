-- 0010: the token service's and the portal's failure limits become sliding
-- windows. A failed authentication is a row of its own, and attempts are
-- blocked while the minute before holds the limit's number of them, where
-- the fixed window of auth_failures (opened at a key's first failure) let
-- twice the limit through within a second across the window's end.
--
-- Rows are only inserted and deleted: once a minute old, by the sweep a
-- failure starts about once a minute, so the table holds about the last two
-- minutes' failures while they come (an attempt past a limit is refused
-- before it can fail). auth_failures stays for nodes of earlier versions
-- during a rolling upgrade (the two versions then count failures apart);
-- this version neither reads nor writes it.
CREATE TABLE auth_failure_log (
    -- 'c' and 'a': a client id's and an address's failures at the token
    -- service; 'pc' and 'pa': an email's and an address's at the portal's
    -- sign-in (counted apart).
    kind      text NOT NULL,
    key       text NOT NULL,
    -- When it failed, unix nanoseconds.
    failed_at bigint NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
-- A key's latest failures, newest first; the sweep's scan is of a small table.
CREATE INDEX auth_failure_log_key ON auth_failure_log (kind, key, failed_at);
