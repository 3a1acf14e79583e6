package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// Update runs fn in one read-write transaction (READ COMMITTED). fn is run
// again when the transaction deadlocks or fails serialization.
func (s *Store) Update(ctx context.Context, fn func(tx bus.Tx) error) error {
	return s.run(ctx, false, func(tx pgx.Tx) error { return fn(&mgmtTx{ctx: ctx, tx: tx, write: true}) })
}

// View runs fn in a read-only transaction.
func (s *Store) View(ctx context.Context, fn func(tx bus.Tx) error) error {
	return s.run(ctx, true, func(tx pgx.Tx) error { return fn(&mgmtTx{ctx: ctx, tx: tx}) })
}

// mgmtTx implements bus.Tx on a pgx transaction. Every method maps its
// errors with interpretError, since fn tests them with errors.Is.
type mgmtTx struct {
	ctx context.Context
	tx  pgx.Tx
	// write: an Update. Its reads of a connection, a workspace or a user
	// lock the row (lockRow) until the transaction ends, as fn usually
	// changes what it read: under READ COMMITTED two transactions would
	// otherwise both read the row before either wrote it, and the second
	// write would undo the first (two "Get client secret" both issuing a
	// secret, of which only the last one written works). The embedded store
	// runs one write transaction at a time, so its reads need no lock.
	write bool
}

// lockRow is the clause a read of a row that fn may change ends with: in
// an Update, FOR NO KEY UPDATE (the key stays, so rows referencing it are
// still inserted meanwhile); else none. A transaction that waits for the
// lock then reads the row as the holder left it, or no row if the holder
// deleted it.
func (t *mgmtTx) lockRow() string {
	if t.write {
		return " FOR NO KEY UPDATE"
	}
	return ""
}

// exec runs a statement that changes nothing visible on failure.
func (t *mgmtTx) exec(sql string, args ...any) error {
	_, err := t.tx.Exec(t.ctx, sql, args...)
	return interpretError(err)
}

// insert runs an INSERT inside a savepoint: a unique violation aborts only
// the savepoint, so fn may handle bus.ErrConflict and go on using tx.
func (t *mgmtTx) insert(sql string, args ...any) error {
	err := pgx.BeginFunc(t.ctx, t.tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(t.ctx, sql, args...)
		return err
	})
	return interpretError(err)
}

// execOne runs a statement that must touch a row, else bus.ErrNotFound.
func (t *mgmtTx) execOne(what, sql string, args ...any) error {
	tag, err := t.tx.Exec(t.ctx, sql, args...)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", bus.ErrNotFound, what)
	}
	return nil
}

func (t *mgmtTx) UserCreate(u bus.User) error {
	return t.insert(`INSERT INTO users (id, name, email, operator, created_at) VALUES ($1, $2, $3, $4, $5)`,
		u.ID, u.Name, u.Email, u.Operator, ms(u.CreatedAt))
}

const userCols = `u.id, u.name, u.email, u.operator, u.created_at`

func scanUser(row pgx.Row) (bus.User, error) {
	var u bus.User
	var created int64
	if err := row.Scan(&u.ID, &u.Name, &u.Email, &u.Operator, &created); err != nil {
		return bus.User{}, interpretError(err)
	}
	u.CreatedAt = fromMS(created)
	return u, nil
}

func (t *mgmtTx) UserGet(id string) (bus.User, error) {
	return scanUser(t.tx.QueryRow(t.ctx, `SELECT `+userCols+` FROM users u WHERE u.id = $1`+t.lockRow(), id))
}

func (t *mgmtTx) UserCount() (int, error) {
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM users`).Scan(&n)
	return n, interpretError(err)
}

func (t *mgmtTx) UserByAPIKeyHash(hash []byte) (bus.User, error) {
	return scanUser(t.tx.QueryRow(t.ctx,
		`SELECT `+userCols+` FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = $1`, hash))
}

func (t *mgmtTx) APIKeyCreate(k bus.APIKey) error {
	return t.insert(`INSERT INTO api_keys (id, user_id, hash, created_at) VALUES ($1, $2, $3, $4)`,
		k.ID, k.UserID, k.Hash, ms(k.CreatedAt))
}

func (t *mgmtTx) WorkspaceCreate(w bus.Workspace) error {
	return t.insert(`INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)`, w.ID, w.Name, ms(w.CreatedAt))
}

func (t *mgmtTx) WorkspaceGet(id string) (bus.Workspace, error) {
	var w bus.Workspace
	var created int64
	err := t.tx.QueryRow(t.ctx, `SELECT id, name, created_at FROM workspaces WHERE id = $1`+t.lockRow(), id).Scan(&w.ID, &w.Name, &created)
	if err != nil {
		return bus.Workspace{}, interpretError(err)
	}
	w.CreatedAt = fromMS(created)
	return w, nil
}

func (t *mgmtTx) WorkspaceList(userID string) ([]bus.Workspace, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT w.id, w.name, w.created_at FROM workspaces w
		WHERE $1 = '' OR EXISTS (SELECT 1 FROM members m WHERE m.workspace_id = w.id AND m.user_id = $1)
		ORDER BY w.created_at, w.ord`, userID)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.Workspace, error) {
		var w bus.Workspace
		var created int64
		err := r.Scan(&w.ID, &w.Name, &created)
		w.CreatedAt = fromMS(created)
		return w, err
	})
	return out, interpretError(err)
}

func (t *mgmtTx) MemberSet(m bus.Member) error {
	return t.exec(`INSERT INTO members (workspace_id, user_id, role) VALUES ($1, $2, $3)
		ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = EXCLUDED.role`, m.WorkspaceID, m.UserID, string(m.Role))
}

func (t *mgmtTx) MemberDelete(workspaceID, userID string) error {
	return t.execOne("member", `DELETE FROM members WHERE workspace_id = $1 AND user_id = $2`, workspaceID, userID)
}

// MemberGet locks the member's row in an Update (lockRow): a change of
// role that found the member, or a removal, then holds the row until it
// ends, so a removal committed meanwhile is seen (no row: not found)
// instead of being undone by the change's upsert.
func (t *mgmtTx) MemberGet(workspaceID, userID string) (bus.Member, error) {
	ms, err := t.memberRows(`workspace_id = $1 AND user_id = $2`, t.lockRow(), workspaceID, userID)
	if err != nil {
		return bus.Member{}, err
	}
	if len(ms) == 0 {
		return bus.Member{}, fmt.Errorf("%w: member", bus.ErrNotFound)
	}
	return ms[0], nil
}

func (t *mgmtTx) MemberListByUser(userID string) ([]bus.Member, error) {
	return t.members(`user_id = $1`, userID)
}

func (t *mgmtTx) MemberListByWorkspace(workspaceID string) ([]bus.Member, error) {
	return t.members(`workspace_id = $1`, workspaceID)
}

// members lists members matching where, in the order they were added.
func (t *mgmtTx) members(where string, args ...any) ([]bus.Member, error) {
	return t.memberRows(where, "", args...)
}

// memberRows reads the members where, in order, ending the query with lock.
func (t *mgmtTx) memberRows(where, lock string, args ...any) ([]bus.Member, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT workspace_id, user_id, role FROM members WHERE `+where+` ORDER BY ord`+lock, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.Member, error) {
		var m bus.Member
		var role string
		err := r.Scan(&m.WorkspaceID, &m.UserID, &role)
		m.Role = bus.Role(role)
		return m, err
	})
	return out, interpretError(err)
}

func (t *mgmtTx) ConnectionCreate(c bus.Connection) error {
	subs, err := json.Marshal(c.Subscriptions)
	if err != nil {
		return fmt.Errorf("connection subscriptions: %w", err)
	}
	return t.insert(`INSERT INTO connections (id, workspace_id, kind, name, status, attempt_limit, quota_tier,
		credential_version, subscriptions, created_at, updated_at, secret_state, secret_hash, secret_issued_at,
		previous_secret_hash, previous_secret_expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		c.ID, c.WorkspaceID, string(c.Kind), c.Name, string(c.Status), c.AttemptLimit, c.QuotaTier,
		c.CredentialVersion, string(subs), ms(c.CreatedAt), ms(c.UpdatedAt), string(c.SecretState),
		c.SecretHash, msPtr(c.SecretIssuedAt), c.PreviousSecretHash, msPtr(c.PreviousSecretExpiresAt))
}

const connCols = `id, workspace_id, kind, name, status, attempt_limit, quota_tier, credential_version,
	subscriptions, created_at, updated_at, secret_state, secret_hash, secret_issued_at,
	previous_secret_hash, previous_secret_expires_at`

func scanConnection(row pgx.Row) (bus.Connection, error) {
	var c bus.Connection
	var kind, status, state, subs string
	var created, updated int64
	var issued, prevExp *int64
	err := row.Scan(&c.ID, &c.WorkspaceID, &kind, &c.Name, &status, &c.AttemptLimit, &c.QuotaTier,
		&c.CredentialVersion, &subs, &created, &updated, &state, &c.SecretHash, &issued,
		&c.PreviousSecretHash, &prevExp)
	if err != nil {
		return bus.Connection{}, err
	}
	if err := json.Unmarshal([]byte(subs), &c.Subscriptions); err != nil {
		return bus.Connection{}, fmt.Errorf("connection %s: subscriptions: %w", c.ID, err)
	}
	c.Kind, c.Status, c.SecretState = bus.ConnectionKind(kind), bus.ConnectionStatus(status), bus.SecretState(state)
	c.CreatedAt, c.UpdatedAt = fromMS(created), fromMS(updated)
	c.SecretIssuedAt, c.PreviousSecretExpiresAt = fromMSPtr(issued), fromMSPtr(prevExp)
	return c, nil
}

func (t *mgmtTx) ConnectionGet(id string) (bus.Connection, error) {
	c, err := scanConnection(t.tx.QueryRow(t.ctx, `SELECT `+connCols+` FROM connections WHERE id = $1`+t.lockRow(), id))
	return c, interpretError(err)
}

func (t *mgmtTx) ConnectionList(workspaceID string, kind bus.ConnectionKind) ([]bus.Connection, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT `+connCols+` FROM connections
		WHERE workspace_id = $1 AND ($2 = '' OR kind = $2) ORDER BY created_at, ord`, workspaceID, string(kind))
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.Connection, error) { return scanConnection(r) })
	return out, interpretError(err)
}

// ConnectionStates lists the token-check fields of a workspace's
// connections, in no particular order.
func (t *mgmtTx) ConnectionStates(workspaceID string) ([]bus.ConnectionState, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT id, kind, status, quota_tier, credential_version FROM connections WHERE workspace_id = $1`, workspaceID)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.ConnectionState, error) {
		var c bus.ConnectionState
		var kind, status string
		if err := r.Scan(&c.ID, &kind, &status, &c.QuotaTier, &c.CredentialVersion); err != nil {
			return bus.ConnectionState{}, err
		}
		c.WorkspaceID, c.Kind, c.Status = workspaceID, bus.ConnectionKind(kind), bus.ConnectionStatus(status)
		return c, nil
	})
	return out, interpretError(err)
}

func (t *mgmtTx) ConnectionUpdate(c bus.Connection) error {
	subs, err := json.Marshal(c.Subscriptions)
	if err != nil {
		return fmt.Errorf("connection subscriptions: %w", err)
	}
	return t.execOne("connection "+c.ID, `UPDATE connections SET workspace_id = $2, kind = $3, name = $4, status = $5,
		attempt_limit = $6, quota_tier = $7, credential_version = $8, subscriptions = $9, created_at = $10,
		updated_at = $11, secret_state = $12, secret_hash = $13, secret_issued_at = $14,
		previous_secret_hash = $15, previous_secret_expires_at = $16 WHERE id = $1`,
		c.ID, c.WorkspaceID, string(c.Kind), c.Name, string(c.Status), c.AttemptLimit, c.QuotaTier,
		c.CredentialVersion, string(subs), ms(c.CreatedAt), ms(c.UpdatedAt), string(c.SecretState),
		c.SecretHash, msPtr(c.SecretIssuedAt), c.PreviousSecretHash, msPtr(c.PreviousSecretExpiresAt))
}

// ConnectionDelete removes a connection and every row of its queue; its
// skills and its queue's counter rows go with its row (the foreign keys'
// ON DELETE CASCADE, migrations 0011 and 0012).
//
// The order keeps each transaction that writes the queue either wholly
// before the removal or failing after it, and takes the queue's rows in
// the writers' own order (stories, then counter rows):
//   - the connection's row, locked FOR UPDATE as its DELETE would lock it:
//     a purge or redrive (lockQueue), or the commit of a transaction that
//     inserted a counter row of the queue (the key's deferred check), takes
//     FOR KEY SHARE on it, so it waits for the removal, or the removal for
//     it;
//   - the queue's stories, in the usual order, so no publish or settle is
//     half way through one of them while its messages go;
//   - the row's DELETE, whose cascade deletes the counter rows, waiting for
//     a transaction that changed one. Every transaction that writes
//     messages or dead letters of the queue changes a counter row of it: one
//     that updated an existing counter row before has committed by now, and
//     the statements after take its rows along; one that inserted a counter
//     row (which the cascade does not see), or writes one after, fails at
//     commit, the key's check finding no connection (run then runs it
//     again, and a publish routes without the queue);
//   - the queue's other rows. Their deletions count into counter rows of
//     the queue again (inserted, checked at commit): the last statement
//     deletes those, and the check skips a row deleted by then.
//
// One writer can still deadlock with the removal: one that holds a story
// of the queue and inserts the queue's counter row (the first write of the
// queue through its counter slot) waits at commit for the connection's
// row, which the removal holds while it waits for the story. The database
// ends one of the two, and run runs it again.
func (t *mgmtTx) ConnectionDelete(id string) error {
	if err := t.execOne("connection "+id, `SELECT 1 FROM connections WHERE id = $1 FOR UPDATE`, id); err != nil {
		return err
	}
	for _, sql := range []string{
		`SELECT id FROM stories WHERE queue_id = $1 ORDER BY queue_id, story_key FOR UPDATE`,
		`DELETE FROM connections WHERE id = $1`,
		`DELETE FROM messages WHERE queue_id = $1`,
		`DELETE FROM stories WHERE queue_id = $1`,
		`DELETE FROM dead_letters WHERE queue_id = $1`,
		`DELETE FROM attempts WHERE queue_id = $1`,
		`DELETE FROM ack_records WHERE queue_id = $1`,
		`DELETE FROM queue_samples WHERE queue_id = $1`,
		// Last: the deletes above counted into counter rows again.
		`DELETE FROM queue_counts WHERE queue_id = $1`,
	} {
		if err := t.exec(sql, id); err != nil {
			return err
		}
	}
	return nil
}

// SkillsPut replaces a connection's registrations; ErrNotFound if the
// connection does not exist (the foreign key of migration 0011: a put never
// leaves the skills of a connection removed meanwhile).
func (t *mgmtTx) SkillsPut(connectionID string, s bus.Skills) error {
	regs, err := json.Marshal(s.Registrations)
	if err != nil {
		return fmt.Errorf("skills: %w", err)
	}
	return t.exec(`INSERT INTO skills (connection_id, registrations, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (connection_id) DO UPDATE SET registrations = EXCLUDED.registrations, updated_at = EXCLUDED.updated_at`,
		connectionID, string(regs), ms(s.UpdatedAt))
}

func (t *mgmtTx) SkillsGet(connectionID string) (bus.Skills, error) {
	var regs string
	var updated int64
	err := t.tx.QueryRow(t.ctx, `SELECT registrations, updated_at FROM skills WHERE connection_id = $1`, connectionID).Scan(&regs, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return bus.Skills{Registrations: []bus.SkillRegistration{}}, nil
	}
	if err != nil {
		return bus.Skills{}, interpretError(err)
	}
	s := bus.Skills{UpdatedAt: fromMS(updated)}
	if err := json.Unmarshal([]byte(regs), &s.Registrations); err != nil {
		return bus.Skills{}, fmt.Errorf("skills of %s: %w", connectionID, err)
	}
	if s.Registrations == nil {
		s.Registrations = []bus.SkillRegistration{}
	}
	return s, nil
}

func (t *mgmtTx) AuditInsert(e bus.AuditEntry) error {
	details, err := json.Marshal(e.Details)
	if err != nil {
		return fmt.Errorf("audit details: %w", err)
	}
	return t.insert(`INSERT INTO audit_entries (id, workspace_id, at, actor, action, target, details)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.ID, e.WorkspaceID, ms(e.At), e.Actor, e.Action, e.Target, string(details))
}

// insertAudit writes an audit entry inside a queue operation's transaction.
func insertAudit(ctx context.Context, tx pgx.Tx, e bus.AuditEntry) error {
	return (&mgmtTx{ctx: ctx, tx: tx}).AuditInsert(e)
}

func (t *mgmtTx) AuditList(workspaceID string, limit int, before string) ([]bus.AuditEntry, error) {
	return t.AuditSearch(bus.AuditQuery{WorkspaceID: workspaceID, Limit: limit, Before: before})
}

// AuditSearch lists a workspace's entries as AuditList does, keeping those
// that match every filter of q that is set.
func (t *mgmtTx) AuditSearch(q bus.AuditQuery) ([]bus.AuditEntry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	var from, to *int64
	if !q.From.IsZero() {
		v := ms(q.From)
		from = &v
	}
	if !q.To.IsZero() {
		v := ms(q.To)
		to = &v
	}
	rows, err := t.tx.Query(t.ctx, `SELECT id, workspace_id, at, actor, action, target, details FROM audit_entries
		WHERE workspace_id = $1 AND ($3 = '' OR ord < (SELECT ord FROM audit_entries WHERE id = $3 AND workspace_id = $1))
		AND ($4 = '' OR actor = $4) AND ($5 = '' OR action = $5) AND ($6 = '' OR target = $6)
		AND ($7::bigint IS NULL OR at >= $7) AND ($8::bigint IS NULL OR at < $8)
		ORDER BY ord DESC LIMIT $2`, q.WorkspaceID, limit, q.Before, q.Actor, q.Action, q.Target, from, to)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.AuditEntry, error) {
		var e bus.AuditEntry
		var at int64
		var details string
		if err := r.Scan(&e.ID, &e.WorkspaceID, &at, &e.Actor, &e.Action, &e.Target, &details); err != nil {
			return e, err
		}
		e.At = fromMS(at)
		return e, json.Unmarshal([]byte(details), &e.Details)
	})
	return out, interpretError(err)
}

func (t *mgmtTx) SigningKeyList() ([]bus.SigningKey, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT id, algorithm, private_key, created_at FROM signing_keys ORDER BY created_at, ord`)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.SigningKey, error) {
		var k bus.SigningKey
		var created int64
		err := r.Scan(&k.ID, &k.Algorithm, &k.PrivateKey, &created)
		k.CreatedAt = fromMS(created)
		return k, err
	})
	return out, interpretError(err)
}

func (t *mgmtTx) SigningKeyCreate(k bus.SigningKey) error {
	return t.insert(`INSERT INTO signing_keys (id, algorithm, private_key, created_at) VALUES ($1, $2, $3, $4)`,
		k.ID, k.Algorithm, k.PrivateKey, ms(k.CreatedAt))
}

func (t *mgmtTx) ServerSecret(name string, fresh []byte) ([]byte, error) {
	// Insert-if-absent, then read: under READ COMMITTED the INSERT waits for
	// a concurrent inserter of the same name, so every node reads the value
	// that won.
	if err := t.exec(`INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
		return nil, err
	}
	var v []byte
	err := t.tx.QueryRow(t.ctx, `SELECT value FROM server_secrets WHERE name = $1`, name).Scan(&v)
	return v, interpretError(err)
}
