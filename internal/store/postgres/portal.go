package postgres

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// --- passwords and portal sessions

func (t *mgmtTx) UserByEmail(email string) (bus.User, error) {
	return scanUser(t.tx.QueryRow(t.ctx, `SELECT `+userCols+` FROM users u WHERE lower(u.email) = lower($1)`, email))
}

func (t *mgmtTx) UserPasswordSet(userID, hash string) error {
	return t.execOne("user", `UPDATE users SET password_hash = $1 WHERE id = $2`, hash, userID)
}

func (t *mgmtTx) UserPasswordGet(userID string) (string, error) {
	var h *string
	err := t.tx.QueryRow(t.ctx, `SELECT password_hash FROM users WHERE id = $1`, userID).Scan(&h)
	if err != nil {
		return "", interpretError(err)
	}
	if h == nil {
		return "", nil
	}
	return *h, nil
}

func (t *mgmtTx) SessionCreate(s bus.Session) error {
	// The user must exist, as the SQLite store's foreign key requires:
	// held (FOR KEY SHARE, as a foreign key's check does) until the
	// session is in, without the lock a change of the user takes, so that
	// sign-ins of one user do not wait for each other.
	var one int
	if err := t.tx.QueryRow(t.ctx, `SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE`, s.UserID).Scan(&one); err != nil {
		return interpretError(err)
	}
	return t.insert(`INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, last_seen_at) VALUES ($1, $2, $3, $4, $5)`,
		s.TokenHash, s.UserID, s.CSRFToken, ms(s.CreatedAt), ms(s.LastSeenAt))
}

func (t *mgmtTx) SessionGet(tokenHash []byte) (bus.Session, error) {
	s := bus.Session{TokenHash: tokenHash}
	var created, seen int64
	err := t.tx.QueryRow(t.ctx, `SELECT user_id, csrf_token, created_at, last_seen_at FROM sessions WHERE token_hash = $1`, tokenHash).
		Scan(&s.UserID, &s.CSRFToken, &created, &seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return bus.Session{}, fmt.Errorf("session: %w", bus.ErrNotFound)
	}
	if err != nil {
		return bus.Session{}, interpretError(err)
	}
	s.CreatedAt, s.LastSeenAt = fromMS(created), fromMS(seen)
	return s, nil
}

func (t *mgmtTx) SessionTouch(tokenHash []byte, at time.Time) error {
	return t.execOne("session", `UPDATE sessions SET last_seen_at = $1 WHERE token_hash = $2`, ms(at), tokenHash)
}

func (t *mgmtTx) SessionDelete(tokenHash []byte) error {
	return t.execOne("session", `DELETE FROM sessions WHERE token_hash = $1`, tokenHash)
}

func (t *mgmtTx) SessionDeleteUser(userID string, keep []byte) (int, error) {
	if keep == nil {
		keep = []byte{}
	}
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM sessions WHERE user_id = $1 AND token_hash <> $2`, userID, keep)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

func (t *mgmtTx) SessionDeleteExpired(idleBefore, createdBefore time.Time) (int, error) {
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM sessions WHERE last_seen_at < $1 OR created_at < $2`, ms(idleBefore), ms(createdBefore))
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}
