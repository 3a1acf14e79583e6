-- 0010: a clock stepped back no longer keeps a connection refused for the
-- whole step. sombus_limit_take is 0003's, with one change, the same as
-- limits.Take's: a bucket whose end lies more than 5 s (ClockStepTolerance)
-- beyond its capacity ahead of now can only come from a clock stepped back,
-- or from a node whose clock runs that far behind the others'; it is taken
-- as empty at now and stored so, even by a refused request, so that the
-- connection gets its rate back after one interval (before, every request
-- was refused until the clock caught up with the bucket's end, and the
-- refusals said to wait a second). Such a reset gives at most a burst.
CREATE OR REPLACE FUNCTION sombus_limit_take(
    p_key text, p_now bigint, p_today bigint, p_iv bigint, p_burst bigint, p_quota bigint,
    OUT old_full bigint, OUT old_iv bigint, OUT old_day bigint, OUT old_count bigint,
    OUT new_full bigint, OUT new_iv bigint, OUT new_day bigint, OUT new_count bigint)
LANGUAGE plpgsql AS $$
DECLARE
    capacity bigint;
    deficit  bigint := 0;
    d        bigint;
    tokens   double precision;
    x        double precision;
    quota_out boolean;
    rate_out  boolean := false;
    stepped   boolean := false;
    tries    integer := 0;
BEGIN
    -- The commit of this call need not wait for its WAL flush: a crash may
    -- forget the last few hundred milliseconds of counting (a few tokens
    -- come back early, a few requests go uncounted today), which is
    -- harmless, and it spares every request of a workspace route a disk
    -- flush of its own. Atomicity and the row lock are as usual. The
    -- setting lasts until the end of the transaction: the store calls this
    -- function only as a statement of its own (an implicit transaction).
    PERFORM set_config('synchronous_commit', 'off', true);

    -- Lock the row, making it when missing. A sweep on another node may
    -- delete an idle row between our INSERT and our SELECT: the state was
    -- idle (the same as none), so simply look again.
    LOOP
        SELECT r.bucket_full, r.bucket_interval, r.quota_day, r.quota_count
            INTO old_full, old_iv, old_day, old_count
            FROM rate_limits r WHERE r.key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        tries := tries + 1;
        IF tries > 5 THEN
            RAISE EXCEPTION 'rate_limits row % keeps disappearing', p_key;
        END IF;
        INSERT INTO rate_limits (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
    END LOOP;

    -- The daily quota: a day before today (or none) starts at zero.
    new_day := old_day;
    new_count := old_count;
    IF old_day IS NULL OR old_day < p_today THEN
        new_day := p_today;
        new_count := 0;
    END IF;
    quota_out := p_quota > 0 AND new_count >= p_quota;

    -- The bucket (GCRA, see limits/bucket.go): its deficit at now in the
    -- current interval, clamped to [0, capacity]; a deficit of another
    -- interval (the tier changed) is carried over in tokens, rounded half
    -- away from zero as Go's math.Round.
    IF p_iv > 0 THEN
        capacity := p_burst * p_iv;
        IF old_full IS NOT NULL AND old_full > p_now THEN
            d := old_full - p_now;
            IF old_iv > 0 AND old_iv <> p_iv THEN
                tokens := d::double precision / old_iv::double precision;
                x := tokens * p_iv::double precision;
                IF x >= capacity::double precision THEN
                    d := capacity;
                ELSE
                    d := trunc(x)::bigint;
                    IF x - trunc(x) >= 0.5 THEN
                        d := d + 1;
                    END IF;
                END IF;
            END IF;
            deficit := least(d, capacity);
        END IF;
        rate_out := deficit + p_iv > capacity;
        -- A bucket whose end lies more than 5 s beyond its capacity ahead of
        -- now: the clock stepped back (see limits.ClockStepTolerance).
        stepped := old_full IS NOT NULL AND old_full - p_now > capacity + 5000000000;
    END IF;

    IF NOT quota_out AND NOT rate_out THEN
        new_count := new_count + 1;
        IF p_iv > 0 THEN
            deficit := deficit + p_iv;
        END IF;
    END IF;

    new_full := old_full;
    new_iv := old_iv;
    -- A refused request leaves a bucket of the same interval as it was (see
    -- the header of this file).
    IF p_iv > 0 AND ((NOT quota_out AND NOT rate_out) OR old_iv <> p_iv OR stepped) THEN
        IF deficit > 0 THEN
            new_full := p_now + deficit;
            new_iv := p_iv;
        ELSE
            new_full := NULL;
            new_iv := 0;
        END IF;
    END IF;

    UPDATE rate_limits
        SET bucket_full = new_full, bucket_interval = new_iv, quota_day = new_day, quota_count = new_count
        WHERE key = p_key;
END
$$;
