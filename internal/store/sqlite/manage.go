package sqlite

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sombus/sombus/internal/bus"
)

// tx implements bus.Tx over the writer's transaction (Update) or a read
// transaction (View).
type tx struct{ d *dbq }

var _ bus.Tx = (*tx)(nil)

// notFound wraps bus.ErrNotFound with what was missing.
func notFound(what, id string) error { return fmt.Errorf("%s %q: %w", what, id, bus.ErrNotFound) }

// one maps the error of a single-row read: no row is bus.ErrNotFound naming
// what was looked for.
func one(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(what, id)
	}
	return interpretError(err)
}

// mustAffect turns "no row changed" into bus.ErrNotFound.
func mustAffect(n int64, err error, what, id string) error {
	if err != nil {
		return interpretError(err)
	}
	if n == 0 {
		return notFound(what, id)
	}
	return nil
}

// --- users and API keys

const userCols = `id, name, email, operator, created_at`

func scanUser(sc interface{ Scan(...any) error }) (bus.User, error) {
	var u bus.User
	var op int
	var at int64
	if err := sc.Scan(&u.ID, &u.Name, &u.Email, &op, &at); err != nil {
		return u, err
	}
	u.Operator, u.CreatedAt = op != 0, fromMS(at)
	return u, nil
}

// UserCreate inserts a user; ErrConflict if the id or (case-insensitively)
// the email is taken.
func (t *tx) UserCreate(u bus.User) error {
	_, err := t.d.exec(`INSERT INTO users(id, name, email, email_key, operator, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		u.ID, u.Name, u.Email, strings.ToLower(u.Email), boolInt(u.Operator), ms(u.CreatedAt))
	return interpretError(err)
}

// UserGet reads a user by id.
func (t *tx) UserGet(id string) (bus.User, error) {
	u, err := scanUser(t.d.row(`SELECT `+userCols+` FROM users WHERE id = ?`, id))
	return u, one(err, "user", id)
}

// UserCount counts the users.
func (t *tx) UserCount() (int, error) {
	var n int
	err := t.d.row(`SELECT count(*) FROM users`).Scan(&n)
	return n, interpretError(err)
}

// UserByAPIKeyHash finds the owner of an API key.
func (t *tx) UserByAPIKeyHash(hash []byte) (bus.User, error) {
	u, err := scanUser(t.d.row(`SELECT u.id, u.name, u.email, u.operator, u.created_at
		FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("api key: %w", bus.ErrNotFound)
	}
	return u, interpretError(err)
}

// APIKeyCreate inserts an API key; ErrConflict if its id or hash exists,
// ErrNotFound if its user does not.
func (t *tx) APIKeyCreate(k bus.APIKey) error {
	_, err := t.d.exec(`INSERT INTO api_keys(id, user_id, hash, created_at) VALUES (?, ?, ?, ?)`,
		k.ID, k.UserID, k.Hash, ms(k.CreatedAt))
	return interpretError(err)
}

// --- workspaces and members

// WorkspaceCreate inserts a workspace; ErrConflict if the id exists.
func (t *tx) WorkspaceCreate(w bus.Workspace) error {
	_, err := t.d.exec(`INSERT INTO workspaces(id, name, created_at) VALUES (?, ?, ?)`, w.ID, w.Name, ms(w.CreatedAt))
	return interpretError(err)
}

// WorkspaceGet reads a workspace by id.
func (t *tx) WorkspaceGet(id string) (bus.Workspace, error) {
	var w bus.Workspace
	var at int64
	err := t.d.row(`SELECT id, name, created_at FROM workspaces WHERE id = ?`, id).Scan(&w.ID, &w.Name, &at)
	w.CreatedAt = fromMS(at)
	return w, one(err, "workspace", id)
}

// WorkspaceList lists every workspace when userID is "", else those userID
// is a member of; oldest first (rowid breaks ties of equal times).
func (t *tx) WorkspaceList(userID string) ([]bus.Workspace, error) {
	q := `SELECT id, name, created_at FROM workspaces ORDER BY created_at, rowid`
	args := []any{}
	if userID != "" {
		q = `SELECT w.id, w.name, w.created_at FROM workspaces w
			JOIN members m ON m.workspace_id = w.id AND m.user_id = ?
			ORDER BY w.created_at, w.rowid`
		args = append(args, userID)
	}
	rows, err := t.d.query(q, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.Workspace
	for rows.Next() {
		var w bus.Workspace
		var at int64
		if err := rows.Scan(&w.ID, &w.Name, &at); err != nil {
			return nil, interpretError(err)
		}
		w.CreatedAt = fromMS(at)
		out = append(out, w)
	}
	return out, interpretError(rows.Err())
}

// MemberSet grants or changes a role; ErrNotFound if the workspace or the
// user does not exist.
func (t *tx) MemberSet(m bus.Member) error {
	_, err := t.d.exec(`INSERT INTO members(workspace_id, user_id, role) VALUES (?, ?, ?)
		ON CONFLICT(workspace_id, user_id) DO UPDATE SET role = excluded.role`,
		m.WorkspaceID, m.UserID, string(m.Role))
	return interpretError(err)
}

// MemberDelete removes a role; ErrNotFound if there was none.
func (t *tx) MemberDelete(workspaceID, userID string) error {
	n, err := t.d.affected(`DELETE FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID)
	return mustAffect(n, err, "member", workspaceID+"/"+userID)
}

// MemberGet returns ErrNotFound when the user has no role there.
func (t *tx) MemberGet(workspaceID, userID string) (bus.Member, error) {
	m := bus.Member{WorkspaceID: workspaceID, UserID: userID}
	var role string
	err := t.d.row(`SELECT role FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID).Scan(&role)
	m.Role = bus.Role(role)
	return m, one(err, "member", workspaceID+"/"+userID)
}

// MemberListByUser lists a user's roles, in the order they were granted.
func (t *tx) MemberListByUser(userID string) ([]bus.Member, error) {
	return t.members(`SELECT workspace_id, user_id, role FROM members WHERE user_id = ? ORDER BY rowid`, userID)
}

// MemberListByWorkspace lists a workspace's members, in the order they
// were granted.
func (t *tx) MemberListByWorkspace(workspaceID string) ([]bus.Member, error) {
	return t.members(`SELECT workspace_id, user_id, role FROM members WHERE workspace_id = ? ORDER BY rowid`, workspaceID)
}

func (t *tx) members(q string, arg string) ([]bus.Member, error) {
	rows, err := t.d.query(q, arg)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.Member
	for rows.Next() {
		var m bus.Member
		var role string
		if err := rows.Scan(&m.WorkspaceID, &m.UserID, &role); err != nil {
			return nil, interpretError(err)
		}
		m.Role = bus.Role(role)
		out = append(out, m)
	}
	return out, interpretError(rows.Err())
}

// --- connections

const connCols = `id, workspace_id, kind, name, status, attempt_limit, quota_tier, credential_version,
	subscriptions, created_at, updated_at, secret_state, secret_hash, secret_issued_at,
	previous_secret_hash, previous_secret_expires_at`

func scanConn(sc interface{ Scan(...any) error }) (bus.Connection, error) {
	var c bus.Connection
	var kind, status, state, subs string
	var created, updated int64
	var issued, prevExp sql.NullInt64
	err := sc.Scan(&c.ID, &c.WorkspaceID, &kind, &c.Name, &status, &c.AttemptLimit, &c.QuotaTier,
		&c.CredentialVersion, &subs, &created, &updated, &state, &c.SecretHash, &issued,
		&c.PreviousSecretHash, &prevExp)
	if err != nil {
		return c, err
	}
	c.Kind, c.Status, c.SecretState = bus.ConnectionKind(kind), bus.ConnectionStatus(status), bus.SecretState(state)
	c.CreatedAt, c.UpdatedAt = fromMS(created), fromMS(updated)
	c.SecretIssuedAt, c.PreviousSecretExpiresAt = fromNullMS(issued), fromNullMS(prevExp)
	if err := json.Unmarshal([]byte(subs), &c.Subscriptions); err != nil {
		return c, fmt.Errorf("connection %s: subscriptions: %w", c.ID, err)
	}
	return c, nil
}

// subsJSON encodes subscriptions; none is "[]".
func subsJSON(subs []bus.Subscription) (string, error) {
	if subs == nil {
		subs = []bus.Subscription{}
	}
	b, err := json.Marshal(subs)
	return string(b), err
}

// ConnectionCreate inserts a connection; ErrConflict if the id exists,
// ErrNotFound if the workspace does not.
func (t *tx) ConnectionCreate(c bus.Connection) error {
	subs, err := subsJSON(c.Subscriptions)
	if err != nil {
		return err
	}
	t.d.heads.connectionsChanged()
	_, err = t.d.exec(`INSERT INTO connections(`+connCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.WorkspaceID, string(c.Kind), c.Name, string(c.Status), c.AttemptLimit, c.QuotaTier,
		c.CredentialVersion, subs, ms(c.CreatedAt), ms(c.UpdatedAt), secretState(c.SecretState), c.SecretHash,
		nullMS(c.SecretIssuedAt), c.PreviousSecretHash, nullMS(c.PreviousSecretExpiresAt))
	return interpretError(err)
}

// secretState stores an unset state as "none".
func secretState(s bus.SecretState) string {
	if s == "" {
		return string(bus.SecretNone)
	}
	return string(s)
}

// ConnectionGet finds a connection by id alone.
func (t *tx) ConnectionGet(id string) (bus.Connection, error) {
	c, err := scanConn(t.d.row(`SELECT `+connCols+` FROM connections WHERE id = ?`, id))
	return c, one(err, "connection", id)
}

// ConnectionList lists a workspace's connections, of one kind unless kind
// is "", oldest first.
func (t *tx) ConnectionList(workspaceID string, kind bus.ConnectionKind) ([]bus.Connection, error) {
	q := `SELECT ` + connCols + ` FROM connections WHERE workspace_id = ?`
	args := []any{workspaceID}
	if kind != "" {
		q += ` AND kind = ?`
		args = append(args, string(kind))
	}
	rows, err := t.d.query(q+` ORDER BY created_at, rowid`, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.Connection
	for rows.Next() {
		c, err := scanConn(&rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

// ConnectionStates lists the token-check fields of a workspace's
// connections, in no particular order.
func (t *tx) ConnectionStates(workspaceID string) ([]bus.ConnectionState, error) {
	rows, err := t.d.query(`SELECT id, kind, status, quota_tier, credential_version FROM connections WHERE workspace_id = ?`, workspaceID)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.ConnectionState
	for rows.Next() {
		var c bus.ConnectionState
		var kind, status string
		if err := rows.Scan(&c.ID, &kind, &status, &c.QuotaTier, &c.CredentialVersion); err != nil {
			return nil, interpretError(err)
		}
		c.WorkspaceID, c.Kind, c.Status = workspaceID, bus.ConnectionKind(kind), bus.ConnectionStatus(status)
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

// ConnectionUpdate writes every field of c but its id, workspace and
// creation time; ErrNotFound if there is no such connection.
func (t *tx) ConnectionUpdate(c bus.Connection) error {
	subs, err := subsJSON(c.Subscriptions)
	if err != nil {
		return err
	}
	t.d.heads.connectionsChanged()
	n, err := t.d.affected(`UPDATE connections SET kind = ?, name = ?, status = ?, attempt_limit = ?,
		quota_tier = ?, credential_version = ?, subscriptions = ?, updated_at = ?, secret_state = ?,
		secret_hash = ?, secret_issued_at = ?, previous_secret_hash = ?, previous_secret_expires_at = ?
		WHERE id = ?`,
		string(c.Kind), c.Name, string(c.Status), c.AttemptLimit, c.QuotaTier, c.CredentialVersion, subs,
		ms(c.UpdatedAt), secretState(c.SecretState), c.SecretHash, nullMS(c.SecretIssuedAt),
		c.PreviousSecretHash, nullMS(c.PreviousSecretExpiresAt), c.ID)
	return mustAffect(n, err, "connection", c.ID)
}

// ConnectionDelete removes a connection and its ack records; the foreign
// keys' ON DELETE CASCADE remove its stories and messages, dead letters,
// attempt ids and skills in the same statement.
func (t *tx) ConnectionDelete(id string) error {
	// Ack records have no foreign key (an ack would pay for its check).
	if _, err := t.d.exec(`DELETE FROM ack_records WHERE queue_id = ?`, id); err != nil {
		return interpretError(err)
	}
	if _, err := t.d.exec(`DELETE FROM ack_log WHERE queue_id = ?`, id); err != nil {
		return interpretError(err)
	}
	t.d.heads.connectionsChanged()
	n, err := t.d.affected(`DELETE FROM connections WHERE id = ?`, id)
	if err == nil && n > 0 {
		t.d.heads.drop(id) // its stories went with it
	}
	return mustAffect(n, err, "connection", id)
}

// --- skills

// storedSkill is how a registration is kept: Values as a JSON string, so
// its bytes come back exactly as put (json.RawMessage would be compacted).
type storedSkill struct {
	InstanceID     string `json:"instance_id"`
	Skill          string `json:"skill"`
	Name           string `json:"name"`
	Values         string `json:"values"`
	AuthorityScale int    `json:"authority_scale"`
}

// SkillsPut replaces a connection's registrations; ErrNotFound if the
// connection does not exist.
func (t *tx) SkillsPut(connectionID string, s bus.Skills) error {
	stored := make([]storedSkill, len(s.Registrations))
	for i, r := range s.Registrations {
		stored[i] = storedSkill{r.InstanceID, r.Skill, r.Name, string(r.Values), r.AuthorityScale}
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	_, err = t.d.exec(`INSERT INTO skills(connection_id, registrations, updated_at) VALUES (?, ?, ?)
		ON CONFLICT(connection_id) DO UPDATE SET registrations = excluded.registrations, updated_at = excluded.updated_at`,
		connectionID, string(b), ms(s.UpdatedAt))
	return interpretError(err)
}

// SkillsGet returns a connection's registrations; empty (not nil) ones
// with a zero UpdatedAt when none were put.
func (t *tx) SkillsGet(connectionID string) (bus.Skills, error) {
	out := bus.Skills{Registrations: []bus.SkillRegistration{}}
	var regs string
	var at int64
	err := t.d.row(`SELECT registrations, updated_at FROM skills WHERE connection_id = ?`, connectionID).Scan(&regs, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return out, interpretError(err)
	}
	var stored []storedSkill
	if err := json.Unmarshal([]byte(regs), &stored); err != nil {
		return out, fmt.Errorf("skills of %s: %w", connectionID, err)
	}
	for _, r := range stored {
		var v json.RawMessage
		if r.Values != "" {
			v = json.RawMessage(r.Values)
		}
		out.Registrations = append(out.Registrations, bus.SkillRegistration{
			InstanceID: r.InstanceID, Skill: r.Skill, Name: r.Name, Values: v, AuthorityScale: r.AuthorityScale})
	}
	out.UpdatedAt = fromMS(at)
	return out, nil
}

// --- audit

// AuditInsert appends an audit entry; ErrConflict if its id exists.
func (t *tx) AuditInsert(e bus.AuditEntry) error {
	return auditInsert(t.d, e)
}

func auditInsert(d *dbq, e bus.AuditEntry) error {
	details, err := json.Marshal(e.Details)
	if err != nil {
		return fmt.Errorf("audit %s: details: %w", e.ID, err)
	}
	_, err = d.exec(`INSERT INTO audit(id, workspace_id, at, actor, action, target, details) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.WorkspaceID, ms(e.At), e.Actor, e.Action, e.Target, string(details))
	return interpretError(err)
}

// AuditList lists a workspace's entries ("" for the global ones) newest
// first by insertion, at most limit (all when limit <= 0), older than the
// entry before (when not ""). A before that is not an entry of this listing
// gives an empty page.
func (t *tx) AuditList(workspaceID string, limit int, before string) ([]bus.AuditEntry, error) {
	return t.AuditSearch(bus.AuditQuery{WorkspaceID: workspaceID, Limit: limit, Before: before})
}

// AuditSearch lists a workspace's entries as AuditList does, keeping those
// that match every filter of q that is set.
func (t *tx) AuditSearch(qy bus.AuditQuery) ([]bus.AuditEntry, error) {
	limit := qy.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	q := `SELECT id, workspace_id, at, actor, action, target, details FROM audit WHERE workspace_id = ?1`
	args := []any{qy.WorkspaceID}
	if qy.Before != "" {
		args = append(args, qy.Before)
		q += fmt.Sprintf(` AND seq < (SELECT seq FROM audit WHERE id = ?%d AND workspace_id = ?1)`, len(args))
	}
	for _, f := range []struct{ col, v string }{{"actor", qy.Actor}, {"action", qy.Action}, {"target", qy.Target}} {
		if f.v != "" {
			args = append(args, f.v)
			q += fmt.Sprintf(` AND %s = ?%d`, f.col, len(args))
		}
	}
	if !qy.From.IsZero() {
		args = append(args, ms(qy.From))
		q += fmt.Sprintf(` AND at >= ?%d`, len(args))
	}
	if !qy.To.IsZero() {
		args = append(args, ms(qy.To))
		q += fmt.Sprintf(` AND at < ?%d`, len(args))
	}
	args = append(args, limit)
	rows, err := t.d.query(q+fmt.Sprintf(` ORDER BY seq DESC LIMIT ?%d`, len(args)), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.AuditEntry
	for rows.Next() {
		var e bus.AuditEntry
		var at int64
		var details string
		if err := rows.Scan(&e.ID, &e.WorkspaceID, &at, &e.Actor, &e.Action, &e.Target, &details); err != nil {
			return nil, interpretError(err)
		}
		e.At = fromMS(at)
		if err := json.Unmarshal([]byte(details), &e.Details); err != nil {
			return nil, fmt.Errorf("audit %s: details: %w", e.ID, err)
		}
		out = append(out, e)
	}
	return out, interpretError(rows.Err())
}

// --- signing keys and server secrets

// SigningKeyList lists the signing keys, oldest first.
func (t *tx) SigningKeyList() ([]bus.SigningKey, error) {
	rows, err := t.d.query(`SELECT id, algorithm, private_key, created_at FROM signing_keys ORDER BY created_at, rowid`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []bus.SigningKey
	for rows.Next() {
		var k bus.SigningKey
		var at int64
		if err := rows.Scan(&k.ID, &k.Algorithm, &k.PrivateKey, &at); err != nil {
			return nil, interpretError(err)
		}
		k.CreatedAt = fromMS(at)
		out = append(out, k)
	}
	return out, interpretError(rows.Err())
}

// SigningKeyCreate inserts a key; ErrConflict if its id exists.
func (t *tx) SigningKeyCreate(k bus.SigningKey) error {
	_, err := t.d.exec(`INSERT INTO signing_keys(id, algorithm, private_key, created_at) VALUES (?, ?, ?, ?)`,
		k.ID, k.Algorithm, k.PrivateKey, ms(k.CreatedAt))
	return interpretError(err)
}

// ServerSecret returns the named secret, storing fresh first when there is
// none yet; every caller gets the first stored value.
func (t *tx) ServerSecret(name string, fresh []byte) ([]byte, error) {
	var v []byte
	// Read first: the common case, and the only one that works in View.
	err := t.d.row(`SELECT value FROM server_secrets WHERE name = ?`, name).Scan(&v)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return v, interpretError(err)
	}
	if _, err := t.d.exec(`INSERT INTO server_secrets(name, value) VALUES (?, ?) ON CONFLICT(name) DO NOTHING`, name, fresh); err != nil {
		return nil, interpretError(err)
	}
	err = t.d.row(`SELECT value FROM server_secrets WHERE name = ?`, name).Scan(&v)
	return v, one(err, "server secret", name)
}
