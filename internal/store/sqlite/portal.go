package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// --- passwords and portal sessions

// UserByEmail finds a user by email, folded to lower case as email_key is.
func (t *tx) UserByEmail(email string) (bus.User, error) {
	u, err := scanUser(t.d.row(`SELECT `+userCols+` FROM users WHERE email_key = ?`, strings.ToLower(email)))
	if errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("user by email: %w", bus.ErrNotFound)
	}
	return u, interpretError(err)
}

// UserPasswordSet replaces a user's password hash.
func (t *tx) UserPasswordSet(userID, hash string) error {
	n, err := t.d.affected(`UPDATE users SET password_hash = ? WHERE id = ?`, hash, userID)
	return mustAffect(n, err, "user", userID)
}

// UserPasswordGet reads a user's password hash ("" when none was set).
func (t *tx) UserPasswordGet(userID string) (string, error) {
	var h sql.NullString
	err := t.d.row(`SELECT password_hash FROM users WHERE id = ?`, userID).Scan(&h)
	return h.String, one(err, "user", userID)
}

// SessionCreate inserts a session; ErrConflict if its token hash exists,
// ErrNotFound if its user does not.
func (t *tx) SessionCreate(s bus.Session) error {
	_, err := t.d.exec(`INSERT INTO sessions(token_hash, user_id, csrf_token, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)`,
		s.TokenHash, s.UserID, s.CSRFToken, ms(s.CreatedAt), ms(s.LastSeenAt))
	return interpretError(err)
}

// SessionGet reads a session by its token hash.
func (t *tx) SessionGet(tokenHash []byte) (bus.Session, error) {
	s := bus.Session{TokenHash: tokenHash}
	var created, seen int64
	err := t.d.row(`SELECT user_id, csrf_token, created_at, last_seen_at FROM sessions WHERE token_hash = ?`, tokenHash).
		Scan(&s.UserID, &s.CSRFToken, &created, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return bus.Session{}, fmt.Errorf("session: %w", bus.ErrNotFound)
	}
	s.CreatedAt, s.LastSeenAt = fromMS(created), fromMS(seen)
	return s, interpretError(err)
}

// SessionTouch sets a session's last_seen_at.
func (t *tx) SessionTouch(tokenHash []byte, at time.Time) error {
	n, err := t.d.affected(`UPDATE sessions SET last_seen_at = ? WHERE token_hash = ?`, ms(at), tokenHash)
	return mustAffect(n, err, "session", "")
}

// SessionDelete removes a session.
func (t *tx) SessionDelete(tokenHash []byte) error {
	n, err := t.d.affected(`DELETE FROM sessions WHERE token_hash = ?`, tokenHash)
	return mustAffect(n, err, "session", "")
}

// SessionDeleteUser removes a user's sessions but keep.
func (t *tx) SessionDeleteUser(userID string, keep []byte) (int, error) {
	if keep == nil {
		keep = []byte{}
	}
	n, err := t.d.affected(`DELETE FROM sessions WHERE user_id = ? AND token_hash <> ?`, userID, keep)
	return int(n), interpretError(err)
}

// SessionDeleteExpired removes the sessions idle or old past the bounds.
func (t *tx) SessionDeleteExpired(idleBefore, createdBefore time.Time) (int, error) {
	n, err := t.d.affected(`DELETE FROM sessions WHERE last_seen_at < ? OR created_at < ?`, ms(idleBefore), ms(createdBefore))
	return int(n), interpretError(err)
}
