-- 0002: the web portal: users' passwords and signed-in sessions.

-- A user's password hash: Argon2id in PHC string form (algorithm,
-- parameters, salt and hash in one text). NULL: no password set, the user
-- signs in with an API key only.
ALTER TABLE users ADD COLUMN password_hash TEXT;

-- Portal sessions. Only the SHA-256 of the session token is kept.
CREATE TABLE sessions (
    token_hash   BLOB PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token   TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
);
CREATE INDEX sessions_user ON sessions(user_id);
CREATE INDEX sessions_last_seen ON sessions(last_seen_at);
CREATE INDEX sessions_created ON sessions(created_at);
