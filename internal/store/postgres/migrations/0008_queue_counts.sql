-- 0008: queue counts in constant time. Each queue's number of messages and
-- of dead letters is kept as counters, changed by triggers in the
-- transaction of every insert and delete (whatever statement makes it), so
-- that the counts read a few counter rows instead of counting the queue's
-- rows. In flight and delayed, which depend on the time of the read, are
-- still counted from the stories whose head is out (an index range of
-- stories_ready bounded by what is out), and the oldest ready message comes
-- from the messages_queue index, oldest first, past the heads that are out.
--
-- A single counter row per queue would be a hot row: every publish, ack
-- and dead-letter move of the queue would wait for the previous one's
-- commit (its WAL flush) to update it. So each queue has up to 64 rows,
-- one per slot, and the counts are their sums. A transaction takes a slot
-- of its own at its first counter change (queue_counts_slot: a
-- transaction-scoped advisory lock, tried from the backend's own slot
-- on), so concurrent transactions never update the same row and never
-- wait for each other here; only past 64 concurrent writing transactions
-- do two share a slot (and then they wait, as on any row).
CREATE TABLE queue_counts (
    queue_id     text NOT NULL,
    slot         integer NOT NULL,
    messages     bigint NOT NULL,
    dead_letters bigint NOT NULL,
    PRIMARY KEY (queue_id, slot)
) WITH (
    -- Updated on every change of a queue and never on an indexed column:
    -- room on each page keeps the updates HOT (pruned on the page).
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 50,
    autovacuum_vacuum_cost_delay = 0
);

-- queue_counts_slot returns the counter slot of the current transaction,
-- taking one at its first call: the first of the 64 slots, from the
-- backend's own (pg_backend_pid() % 64) on, whose transaction advisory
-- lock it gets without waiting. The lock keys are single bigints (a space
-- apart from the two-integer keys the store's other advisory locks use)
-- holding the schema, so the nodes of one schema share the slots. The slot
-- is kept in a transaction-local setting.
CREATE FUNCTION queue_counts_slot() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s    text := current_setting('sombus.count_slot', true);
    home integer;
    key  bigint;
BEGIN
    IF s IS NOT NULL AND s <> '' THEN
        RETURN s::integer;
    END IF;
    home := pg_backend_pid() % 64;
    key := (hashtext(coalesce(current_schema(), ''))::bigint & 4294967295) << 8;
    FOR i IN 0..63 LOOP
        IF pg_try_advisory_xact_lock(key | ((home + i) % 64)) THEN
            PERFORM set_config('sombus.count_slot', ((home + i) % 64)::text, true);
            RETURN (home + i) % 64;
        END IF;
    END LOOP;
    -- Every slot is taken: share the backend's own (its row lock waits).
    PERFORM set_config('sombus.count_slot', home::text, true);
    RETURN home;
END
$$;

-- One statement-level trigger per table and change: a statement that
-- inserts or deletes many rows changes each queue's counter once, in queue
-- order.
CREATE FUNCTION queue_counts_messages_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts AS k (queue_id, slot, messages, dead_letters)
        SELECT queue_id, queue_counts_slot(), count(*), 0 FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = k.messages + excluded.messages;
    RETURN NULL;
END
$$;

CREATE FUNCTION queue_counts_messages_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts AS k (queue_id, slot, messages, dead_letters)
        SELECT queue_id, queue_counts_slot(), -count(*), 0 FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = k.messages + excluded.messages;
    RETURN NULL;
END
$$;

CREATE FUNCTION queue_counts_dead_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts AS k (queue_id, slot, messages, dead_letters)
        SELECT queue_id, queue_counts_slot(), 0, count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = k.dead_letters + excluded.dead_letters;
    RETURN NULL;
END
$$;

CREATE FUNCTION queue_counts_dead_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts AS k (queue_id, slot, messages, dead_letters)
        SELECT queue_id, queue_counts_slot(), 0, -count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = k.dead_letters + excluded.dead_letters;
    RETURN NULL;
END
$$;

-- Nodes of the previous version may be writing while this runs: the lock
-- waits for their open transactions and holds new writes back until this
-- one commits, so the triggers and the counts below start from the same
-- rows (the count statements run after the lock, each with a new
-- snapshot, as this transaction is READ COMMITTED).
LOCK TABLE messages, dead_letters IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER queue_counts_messages_in AFTER INSERT ON messages
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_messages_in();
CREATE TRIGGER queue_counts_messages_out AFTER DELETE ON messages
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_messages_out();
CREATE TRIGGER queue_counts_dead_in AFTER INSERT ON dead_letters
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_dead_in();
CREATE TRIGGER queue_counts_dead_out AFTER DELETE ON dead_letters
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_dead_out();

-- The counts of the rows already there, in slot 0.
INSERT INTO queue_counts (queue_id, slot, messages, dead_letters)
    SELECT queue_id, 0, sum(m), sum(d) FROM (
        SELECT queue_id, count(*) AS m, 0 AS d FROM messages GROUP BY queue_id
        UNION ALL
        SELECT queue_id, 0, count(*) FROM dead_letters GROUP BY queue_id
    ) x GROUP BY queue_id;
