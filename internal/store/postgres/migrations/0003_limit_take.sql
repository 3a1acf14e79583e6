-- 0003: one rate-limit decision in one round trip.
--
-- sombus_limit_take(key, now, today, iv, burst, quota) is limits.Take run
-- inside the database under the row lock of rate_limits.key: it locks (or
-- makes) the row, computes the next limits.State exactly as limits.Take
-- does, stores it and returns the state it found and the state it stored.
-- The node computes the Decision itself with limits.Take on the state
-- found, so the answer's fields (headers, Retry-After, rules) have one
-- implementation; the node also checks that its next state equals the one
-- stored, and limiter_test.go runs both over the same sequences of (tier,
-- now), so the two copies of the arithmetic cannot drift unnoticed.
--
-- Arguments: now in unix nanoseconds; today is 00:00 UTC of now's UTC day
-- in unix seconds; iv is the tier's token interval in nanoseconds (0: no
-- bucket); burst the tier's burst; quota its daily quota (0: none).
-- Columns as in 0002: NULL bucket_full / quota_day is the zero time.
--
-- A refused request takes and counts nothing and leaves a bucket of the
-- same interval as it was: the deficit of a request whose now is older than
-- the last one's (requests of several nodes reach the row out of order) is
-- clamped to the capacity, and writing now + deficit back would hand tokens
-- out again. A tier change converts the bucket; a new day drops
-- yesterday's count.
CREATE FUNCTION sombus_limit_take(
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
    IF p_iv > 0 AND ((NOT quota_out AND NOT rate_out) OR old_iv <> p_iv) THEN
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
