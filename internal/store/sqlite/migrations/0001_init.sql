-- 0001: the first schema of the embedded store.
-- Times are INTEGER unix milliseconds (UTC). Every table that belongs to a
-- consumer queue references connections(id) ON DELETE CASCADE, so deleting a
-- connection removes its queue, dead letters, attempt ids, ack records and
-- skills in one statement.

CREATE TABLE users (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL,
    -- email folded to lower case (in Go, so beyond ASCII): emails are unique
    -- regardless of case.
    email_key  TEXT NOT NULL UNIQUE,
    operator   INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    hash       BLOB NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);
CREATE INDEX api_keys_user ON api_keys(user_id);

CREATE TABLE workspaces (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE members (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role         TEXT NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX members_user ON members(user_id);

CREATE TABLE connections (
    id                         TEXT PRIMARY KEY,
    workspace_id               TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    kind                       TEXT NOT NULL,
    name                       TEXT NOT NULL,
    status                     TEXT NOT NULL,
    attempt_limit              INTEGER NOT NULL,
    quota_tier                 TEXT NOT NULL,
    credential_version         INTEGER NOT NULL,
    subscriptions              TEXT NOT NULL, -- JSON array of bus.Subscription
    created_at                 INTEGER NOT NULL,
    updated_at                 INTEGER NOT NULL,
    secret_state               TEXT NOT NULL,
    secret_hash                BLOB,
    secret_issued_at           INTEGER,
    previous_secret_hash       BLOB,
    previous_secret_expires_at INTEGER
);
-- Publish reads a workspace's consumers; listings filter by kind.
CREATE INDEX connections_workspace ON connections(workspace_id, kind, created_at);

CREATE TABLE skills (
    connection_id TEXT PRIMARY KEY REFERENCES connections(id) ON DELETE CASCADE,
    registrations TEXT NOT NULL, -- JSON, values kept byte for byte
    updated_at    INTEGER NOT NULL
);

-- seq orders entries by insertion; AUTOINCREMENT so it is never reused.
CREATE TABLE audit (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    workspace_id TEXT NOT NULL, -- '' for global entries (user.create, key.create)
    at           INTEGER NOT NULL,
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    target       TEXT NOT NULL,
    details      TEXT NOT NULL -- JSON object
);
CREATE INDEX audit_workspace ON audit(workspace_id, seq);

CREATE TABLE signing_keys (
    id          TEXT PRIMARY KEY,
    algorithm   TEXT NOT NULL,
    private_key BLOB NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE server_secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

-- One row per non-empty story of a queue: the story row is the lock and
-- carries the delivery state of the story's head. AUTOINCREMENT: story ids
-- are never reused, so a handle of a deleted story never matches a new one.
CREATE TABLE stories (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue_id      TEXT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
    story_key     TEXT NOT NULL, -- the correlation id
    head_seq      INTEGER NOT NULL,
    tail_seq      INTEGER NOT NULL,
    visible_at    INTEGER NOT NULL,
    receive_count INTEGER NOT NULL,
    nonce         INTEGER NOT NULL, -- 0 until the head is received
    delayed       INTEGER NOT NULL, -- 1 while released with a delay
    UNIQUE (queue_id, story_key)
);
-- The claim scan: visible stories of a queue, oldest visible_at first.
CREATE INDEX stories_claim ON stories(queue_id, visible_at, id);
-- Only stories received at least once can be dead-lettered; this partial
-- index keeps the dead-letter scans off the (many) never-received stories:
-- it holds about as many rows as there are deliveries in flight.
CREATE INDEX stories_received ON stories(queue_id, visible_at, id) WHERE receive_count > 0;

CREATE TABLE messages (
    id             INTEGER PRIMARY KEY,
    story_id       INTEGER NOT NULL REFERENCES stories(id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    queue_id       TEXT NOT NULL,
    message_id     TEXT NOT NULL,
    message_type   TEXT NOT NULL,
    topic          TEXT NOT NULL,
    correlation_id TEXT NOT NULL,
    producer_id    TEXT NOT NULL,
    enqueued_at    INTEGER NOT NULL,
    envelope       BLOB NOT NULL,
    UNIQUE (story_id, seq)
);
-- Stats (count, oldest ready) and purge by queue.
CREATE INDEX messages_queue ON messages(queue_id, enqueued_at);
-- Retention sweeps across queues.
CREATE INDEX messages_enqueued ON messages(enqueued_at);

-- id is the listing cursor: AUTOINCREMENT keeps it increasing forever.
CREATE TABLE dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue_id         TEXT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
    message_id       TEXT NOT NULL,
    message_type     TEXT NOT NULL,
    topic            TEXT NOT NULL,
    correlation_id   TEXT NOT NULL,
    producer_id      TEXT NOT NULL,
    receive_count    INTEGER NOT NULL,
    enqueued_at      INTEGER NOT NULL,
    dead_lettered_at INTEGER NOT NULL,
    envelope         BLOB NOT NULL
);
CREATE INDEX dead_letters_queue ON dead_letters(queue_id, id);
CREATE INDEX dead_letters_message ON dead_letters(queue_id, message_id);
CREATE INDEX dead_letters_at ON dead_letters(dead_lettered_at);

CREATE TABLE attempts (
    queue_id   TEXT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
    attempt_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    handles    TEXT NOT NULL, -- JSON [[story_id, seq, nonce], ...]
    PRIMARY KEY (queue_id, attempt_id)
);
CREATE INDEX attempts_created ON attempts(created_at);

-- Acknowledged deliveries, so that a re-ack with the same handle succeeds.
CREATE TABLE ack_records (
    queue_id TEXT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
    story_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    nonce    INTEGER NOT NULL,
    acked_at INTEGER NOT NULL,
    PRIMARY KEY (queue_id, story_id, seq)
);
CREATE INDEX ack_records_acked ON ack_records(acked_at);

-- Publish deduplication per producer.
CREATE TABLE dedup (
    producer_id TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    accepted_at INTEGER NOT NULL,
    deliveries  INTEGER NOT NULL,
    PRIMARY KEY (producer_id, message_id)
);
CREATE INDEX dedup_accepted ON dedup(accepted_at);
