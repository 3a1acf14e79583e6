-- 0001: the first schema of the PostgreSQL store.
--
-- Every time column holds unix milliseconds (bigint): the contract stores
-- times with millisecond precision and the SQLite store does the same, so
-- both compare and round-trip times identically. Tables are created
-- unqualified, in the first schema of the connection's search_path.
-- JSON columns are text, not jsonb: jsonb reorders keys and drops
-- whitespace, and the bytes a client gave must come back unchanged.

CREATE TABLE users (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL,
    operator   boolean NOT NULL DEFAULT false,
    created_at bigint NOT NULL
);
-- Emails are unique regardless of case.
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    user_id    text NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    created_at bigint NOT NULL
);

CREATE TABLE workspaces (
    -- ord breaks ties between rows created in the same millisecond.
    ord        bigint GENERATED ALWAYS AS IDENTITY,
    id         text PRIMARY KEY,
    name       text NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE members (
    ord          bigint GENERATED ALWAYS AS IDENTITY,
    workspace_id text NOT NULL,
    user_id      text NOT NULL,
    role         text NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX members_user ON members (user_id);

CREATE TABLE connections (
    ord                        bigint GENERATED ALWAYS AS IDENTITY,
    id                         text PRIMARY KEY,
    workspace_id               text NOT NULL,
    kind                       text NOT NULL,
    name                       text NOT NULL,
    status                     text NOT NULL,
    attempt_limit              integer NOT NULL,
    quota_tier                 text NOT NULL,
    credential_version         bigint NOT NULL,
    subscriptions              text NOT NULL,
    created_at                 bigint NOT NULL,
    updated_at                 bigint NOT NULL,
    secret_state               text NOT NULL,
    secret_hash                bytea,
    secret_issued_at           bigint,
    previous_secret_hash       bytea,
    previous_secret_expires_at bigint
);
CREATE INDEX connections_workspace ON connections (workspace_id, kind);

CREATE TABLE skills (
    connection_id text PRIMARY KEY,
    registrations text NOT NULL,
    updated_at    bigint NOT NULL
);

CREATE TABLE audit_entries (
    -- Entries are listed by insertion order, not by time alone.
    ord          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           text NOT NULL UNIQUE,
    workspace_id text NOT NULL,
    at           bigint NOT NULL,
    actor        text NOT NULL,
    action       text NOT NULL,
    target       text NOT NULL,
    details      text NOT NULL
);
CREATE INDEX audit_entries_workspace ON audit_entries (workspace_id, ord);

CREATE TABLE signing_keys (
    ord         bigint GENERATED ALWAYS AS IDENTITY,
    id          text PRIMARY KEY,
    algorithm   text NOT NULL,
    private_key bytea NOT NULL,
    created_at  bigint NOT NULL
);

CREATE TABLE server_secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);

-- stories: one row per non-empty story of a queue, holding the delivery
-- state of the story's head. The row is the lock of the story: publish,
-- receive, ack and nack all go through it. It is updated on every delivery,
-- so:
--   * fillfactor 75 leaves room on each page for the new row versions
--     (updates that do not touch an indexed column stay on the page);
--   * autovacuum runs after 1% of the rows changed (not the default 20%)
--     and without cost-based sleeping, so dead versions are reclaimed
--     before they bloat the table and its indexes, the classic failure of
--     queue tables on PostgreSQL.
CREATE TABLE stories (
    -- An identity is never reused, so a handle of a deleted story never
    -- matches a new one.
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id      text NOT NULL,
    story_key     text NOT NULL,
    head_seq      bigint NOT NULL,
    tail_seq      bigint NOT NULL,
    visible_at    bigint NOT NULL,
    receive_count integer NOT NULL,
    nonce         bigint NOT NULL,
    delayed       boolean NOT NULL,
    UNIQUE (queue_id, story_key)
) WITH (
    fillfactor = 75,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 50,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05
);
-- The claim scans this index in order: ready stories of one queue, oldest
-- first.
CREATE INDEX stories_ready ON stories (queue_id, visible_at, id);
-- The sweeper's dead-letter move looks only at stories received before
-- whose visibility ran out; this keeps that scan small.
CREATE INDEX stories_received ON stories (visible_at) WHERE receive_count > 0;

-- messages: written once at publish, deleted once at ack (never flagged),
-- so the table does not grow with history. Same autovacuum reasoning as
-- stories.
CREATE TABLE messages (
    story_id       bigint NOT NULL,
    seq            bigint NOT NULL,
    queue_id       text NOT NULL,
    message_id     text NOT NULL,
    message_type   text NOT NULL,
    topic          text NOT NULL,
    correlation_id text NOT NULL,
    producer_id    text NOT NULL,
    enqueued_at    bigint NOT NULL,
    envelope       bytea NOT NULL,
    PRIMARY KEY (story_id, seq)
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 50,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05
);
CREATE INDEX messages_queue ON messages (queue_id, enqueued_at);
-- Retention deletes by age across every queue.
CREATE INDEX messages_enqueued ON messages (enqueued_at);

CREATE TABLE dead_letters (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id         text NOT NULL,
    message_id       text NOT NULL,
    message_type     text NOT NULL,
    topic            text NOT NULL,
    correlation_id   text NOT NULL,
    producer_id      text NOT NULL,
    receive_count    integer NOT NULL,
    enqueued_at      bigint NOT NULL,
    dead_lettered_at bigint NOT NULL,
    envelope         bytea NOT NULL
);
CREATE INDEX dead_letters_queue ON dead_letters (queue_id, id);
CREATE INDEX dead_letters_age ON dead_letters (dead_lettered_at);

-- attempts: receives made retryable by an attempt id. handles is NULL
-- while the receive that owns the row has not committed.
CREATE TABLE attempts (
    queue_id   text NOT NULL,
    attempt_id text NOT NULL,
    created_at bigint NOT NULL,
    handles    text,
    PRIMARY KEY (queue_id, attempt_id)
);
CREATE INDEX attempts_age ON attempts (created_at);

-- ack_records make a repeated ack of the same delivery succeed.
CREATE TABLE ack_records (
    queue_id text NOT NULL,
    story_id bigint NOT NULL,
    seq      bigint NOT NULL,
    nonce    bigint NOT NULL,
    acked_at bigint NOT NULL,
    PRIMARY KEY (queue_id, story_id, seq)
) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
CREATE INDEX ack_records_age ON ack_records (acked_at);

-- dedup_records: message ids accepted per producer, for the dedup window.
CREATE TABLE dedup_records (
    producer_id text NOT NULL,
    message_id  text NOT NULL,
    accepted_at bigint NOT NULL,
    deliveries  integer NOT NULL,
    PRIMARY KEY (producer_id, message_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
CREATE INDEX dedup_records_age ON dedup_records (accepted_at);
