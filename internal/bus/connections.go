package bus

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ConnectionView is a connection as the management API shows it. The queue
// counts are set for consumers only.
type ConnectionView struct {
	ID                string           `json:"id"`
	WorkspaceID       string           `json:"workspace_id"`
	Kind              ConnectionKind   `json:"kind"`
	Name              string           `json:"name"`
	Status            ConnectionStatus `json:"status"`
	AttemptLimit      int              `json:"attempt_limit"`
	QuotaTier         string           `json:"quota_tier"`
	CredentialVersion int64            `json:"credential_version"`
	Secret            SecretView       `json:"secret"`
	Subscriptions     []Subscription   `json:"subscriptions"`
	CreatedAt         time.Time        `json:"created_at"`
	*QueueStats
}

// SecretView is the state of a connection's secret, never the secret.
type SecretView struct {
	State             SecretState `json:"state"`
	IssuedAt          *time.Time  `json:"issued_at"`
	PreviousExpiresAt *time.Time  `json:"previous_expires_at"`
}

// ConnectionParams are the fields of a connection create or update; nil
// means "not given".
type ConnectionParams struct {
	Kind          *ConnectionKind `json:"kind"`
	Name          *string         `json:"name"`
	AttemptLimit  *int            `json:"attempt_limit"`
	QuotaTier     *string         `json:"quota_tier"`
	Subscriptions *[]Subscription `json:"subscriptions"`
}

// SecretIssued is the answer of "Get client secret" and rotate: the secret
// is shown this once.
type SecretIssued struct {
	ClientID          string `json:"client_id"`
	ClientSecret      string `json:"client_secret"`
	CredentialVersion int64  `json:"credential_version"`
	TokenURL          string `json:"token_url"`
	MessagesURL       string `json:"messages_url"`
	AckURL            string `json:"ack_url,omitempty"`
	NackURL           string `json:"nack_url,omitempty"`
	SkillsURL         string `json:"skills_url,omitempty"`
}

// view is c as the management API shows it, with its queue counts when it
// is a consumer.
func (s *Service) view(ctx context.Context, c Connection, withStats bool) (ConnectionView, error) {
	v := s.viewOf(c)
	if c.Kind == KindConsumer && withStats {
		st, err := s.store.QueueStats(ctx, c.ID, s.clock.Now())
		if err != nil {
			return v, connectionErr("queue stats", c.WorkspaceID, c.ID, err)
		}
		v.QueueStats = &st
	}
	return v, nil
}

// viewOf is c as the management API shows it, without queue counts.
func (s *Service) viewOf(c Connection) ConnectionView {
	v := ConnectionView{
		ID: c.ID, WorkspaceID: c.WorkspaceID, Kind: c.Kind, Name: c.Name, Status: c.Status,
		AttemptLimit: c.AttemptLimit, QuotaTier: c.QuotaTier, CredentialVersion: c.CredentialVersion,
		Secret:        SecretView{State: c.SecretState, IssuedAt: c.SecretIssuedAt, PreviousExpiresAt: c.PreviousSecretExpiresAt},
		Subscriptions: c.Subscriptions, CreatedAt: c.CreatedAt,
	}
	if v.Subscriptions == nil {
		v.Subscriptions = []Subscription{}
	}
	if v.Secret.State == "" {
		v.Secret.State = SecretNone
	}
	// The previous secret's expiry is shown only while it still gets tokens.
	if v.Secret.PreviousExpiresAt != nil && !v.Secret.PreviousExpiresAt.After(s.clock.Now()) {
		v.Secret.PreviousExpiresAt = nil
	}
	return v
}

// MayAssignTier reports whether a may give a connection the quota tier
// name: a tier of this server, and not one kept for operators unless a is
// an operator (the rule checkConnectionParams applies).
func (s *Service) MayAssignTier(a *Actor, name string) bool {
	exists, operatorOnly := s.cfg.Tiers(name)
	return exists && (!operatorOnly || a.User.Operator)
}

// checkConnectionParams validates the given fields of a create or update.
func (s *Service) checkConnectionParams(a *Actor, kind ConnectionKind, p ConnectionParams) error {
	if p.Name != nil {
		if err := checkName("name", *p.Name); err != nil {
			return err
		}
	}
	if p.AttemptLimit != nil && (*p.AttemptLimit < 1 || *p.AttemptLimit > MaxAttemptLimit) {
		return Errorf(RuleManageBadRequest, "attempt_limit must be between 1 and %d.", MaxAttemptLimit)
	}
	if p.AttemptLimit != nil && kind != KindConsumer {
		return Errorf(RuleManageBadRequest, "attempt_limit applies to consumer connections only.")
	}
	if p.QuotaTier != nil {
		exists, operatorOnly := s.cfg.Tiers(*p.QuotaTier)
		if !exists {
			return Errorf(RuleManageBadRequest, "quota_tier %q is not a tier of this server.", *p.QuotaTier)
		}
		if operatorOnly && !a.User.Operator {
			return Errorf(RuleManageForbidden, "quota_tier %q may only be assigned by operators.", *p.QuotaTier)
		}
	}
	if p.Subscriptions != nil {
		if kind != KindConsumer && len(*p.Subscriptions) > 0 {
			// A producer's list is always empty: the empty list it shows
			// may be sent back.
			return Errorf(RuleManageBadRequest, "subscriptions apply to consumer connections only.")
		}
		if len(*p.Subscriptions) > MaxSubscriptions {
			return Errorf(RuleManageBadRequest, "subscriptions may hold at most %d entries.", MaxSubscriptions)
		}
		for i, sub := range *p.Subscriptions {
			if err := ValidateTopicPattern(sub.Topic); err != nil {
				return Errorf(RuleManageBadRequest, "subscriptions[%d].topic: %v.", i, err)
			}
			if err := CheckTopicReachable(sub.Topic); err != nil {
				return Errorf(RuleManageBadRequest, "subscriptions[%d].topic: %v.", i, err)
			}
			if sub.Producers != nil && len(sub.Producers) == 0 || len(sub.Producers) > MaxProducerFilters {
				return Errorf(RuleManageBadRequest, "subscriptions[%d].producers, when given, must hold 1 to %d producer ids (leave it out to accept every producer).", i, MaxProducerFilters)
			}
			seen := make(map[string]bool, len(sub.Producers))
			for j, pid := range sub.Producers {
				if !ValidID(pid, PrefixConnection) {
					return Errorf(RuleManageBadRequest, "subscriptions[%d].producers[%d] is not a connection id.", i, j)
				}
				if seen[pid] {
					return Errorf(RuleManageBadRequest, "subscriptions[%d].producers[%d] repeats %s; each producer id may appear once.", i, j, pid)
				}
				seen[pid] = true
			}
		}
	}
	return nil
}

// checkProducers refuses producer filters that name an id which is not a
// producer connection of the workspace: such a filter could never accept a
// message. It reads the workspace's connections once, in the transaction
// that writes the subscriptions.
func checkProducers(tx Tx, workspaceID string, subs *[]Subscription) error {
	if subs == nil {
		return nil
	}
	var kinds map[string]ConnectionKind
	for i, sub := range *subs {
		for j, pid := range sub.Producers {
			if kinds == nil {
				cs, err := tx.ConnectionList(workspaceID, "")
				if err != nil {
					return err
				}
				kinds = make(map[string]ConnectionKind, len(cs))
				for _, c := range cs {
					kinds[c.ID] = c.Kind
				}
			}
			switch kind, ok := kinds[pid]; {
			case !ok:
				return Errorf(RuleManageBadRequest, "subscriptions[%d].producers[%d]: %s is not a connection of workspace %s; producers names producer connections of this workspace.", i, j, pid, workspaceID)
			case kind != KindProducer:
				return Errorf(RuleManageBadRequest, "subscriptions[%d].producers[%d]: %s is a %s connection, which publishes nothing; producers names producer connections of this workspace.", i, j, pid, kind)
			}
		}
	}
	return nil
}

// CreateConnection creates a consumer or producer connection (admins).
func (s *Service) CreateConnection(ctx context.Context, a *Actor, workspaceID string, p ConnectionParams) (ConnectionView, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleAdmin); err != nil {
		return ConnectionView{}, err
	}
	if p.Kind == nil || (*p.Kind != KindConsumer && *p.Kind != KindProducer) {
		return ConnectionView{}, Errorf(RuleManageBadRequest, "kind must be \"consumer\" or \"producer\".")
	}
	if p.Name == nil {
		return ConnectionView{}, Errorf(RuleManageBadRequest, "name is required.")
	}
	if err := s.checkConnectionParams(a, *p.Kind, p); err != nil {
		return ConnectionView{}, err
	}
	now := s.clock.Now()
	c := Connection{
		ID: NewID(PrefixConnection), WorkspaceID: workspaceID, Kind: *p.Kind, Name: *p.Name,
		Status: StatusActive, AttemptLimit: 5, QuotaTier: "standard", SecretState: SecretNone,
		Subscriptions: []Subscription{}, CreatedAt: now, UpdatedAt: now,
	}
	if p.AttemptLimit != nil {
		c.AttemptLimit = *p.AttemptLimit
	}
	if p.QuotaTier != nil {
		c.QuotaTier = *p.QuotaTier
	}
	if p.Subscriptions != nil {
		c.Subscriptions = *p.Subscriptions
	}
	err := s.store.Update(ctx, func(tx Tx) error {
		if err := checkProducers(tx, workspaceID, p.Subscriptions); err != nil {
			return err
		}
		if err := tx.ConnectionCreate(c); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "connection.create", c.ID, map[string]any{
			"kind": c.Kind, "name": c.Name, "attempt_limit": c.AttemptLimit, "quota_tier": c.QuotaTier, "subscriptions": c.Subscriptions}))
	})
	if err != nil {
		return ConnectionView{}, refusalOr("create connection", err)
	}
	return s.view(ctx, c, true)
}

// loadConnection reads a connection of a workspace, refusing ids of other
// workspaces as not found.
func loadConnection(tx Tx, workspaceID, id string) (Connection, error) {
	c, err := tx.ConnectionGet(id)
	if errors.Is(err, ErrNotFound) || err == nil && c.WorkspaceID != workspaceID {
		return Connection{}, connectionNotFound(workspaceID, id)
	}
	return c, err
}

// connectionNotFound is the refusal of a connection that is not in the
// workspace (or no longer is).
func connectionNotFound(workspaceID, id string) *Error {
	return Errorf(RuleManageNotFound, "Connection %s not found in workspace %s.", id, workspaceID)
}

// connectionErr is what a management call on connection id of workspaceID
// returns for err, an error of its work with the store once loadConnection
// (or requireConsumer) had found the connection. That check and the work
// after it are not one snapshot: a removal of the connection that commits
// in between (an overlapping DELETE of it) leaves the work no connection,
// queue or row to change, and the store says so with ErrNotFound. The
// connection is gone, as it would be for the same request sent a moment
// later: 404 manage.not_found, never a 500. A refusal is returned as it
// is; any other error is wrapped with what (a fault: 500, or 503 when the
// store is out of reach).
func connectionErr(what, workspaceID, id string, err error) error {
	if _, refused := AsError(err); !refused && errors.Is(err, ErrNotFound) {
		return connectionNotFound(workspaceID, id)
	}
	return refusalOr(what, err)
}

// refusalOr returns err as it is when it is a refusal, else wrapped.
func refusalOr(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := AsError(err); ok {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// GetConnection reads one connection (viewers).
func (s *Service) GetConnection(ctx context.Context, a *Actor, workspaceID, id string) (ConnectionView, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleViewer); err != nil {
		return ConnectionView{}, err
	}
	c, err := s.readConnection(ctx, workspaceID, id)
	if err != nil {
		return ConnectionView{}, err
	}
	return s.view(ctx, c, true)
}

// ConnectionOf reads a connection of a workspace for a caller with at least
// min there.
func (s *Service) ConnectionOf(ctx context.Context, a *Actor, workspaceID, id string, min Role) (Connection, error) {
	if err := s.requireRole(ctx, a, workspaceID, min); err != nil {
		return Connection{}, err
	}
	return s.readConnection(ctx, workspaceID, id)
}

func (s *Service) readConnection(ctx context.Context, workspaceID, id string) (Connection, error) {
	var c Connection
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		c, err = loadConnection(tx, workspaceID, id)
		return err
	})
	return c, refusalOr("read connection", err)
}

// Pages of the connections listing. The default page is the largest, so a
// workspace of up to 100 connections lists whole, as before paging.
const (
	MaxConnectionPage     = 100
	DefaultConnectionPage = 100
)

// ConnectionListPage is the answer of the connections listing: a page,
// oldest first, and the cursor of the next one (nil on the last page).
type ConnectionListPage struct {
	Connections []ConnectionView `json:"connections"`
	NextCursor  *string          `json:"next_cursor"`
}

// ListConnections lists one page of a workspace's connections, of one kind
// unless kind is "", oldest first, after cursor ("" for the first page)
// (viewers). The queue counts of the page's consumers are read in one
// query.
func (s *Service) ListConnections(ctx context.Context, a *Actor, workspaceID string, kind ConnectionKind, limit int, cursor string) (ConnectionListPage, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleViewer); err != nil {
		return ConnectionListPage{}, err
	}
	if kind != "" && kind != KindConsumer && kind != KindProducer {
		return ConnectionListPage{}, Errorf(RuleManageBadRequest, "kind must be \"consumer\" or \"producer\".")
	}
	if limit < 1 || limit > MaxConnectionPage {
		return ConnectionListPage{}, Errorf(RuleManageBadRequest, "limit must be an integer between 1 and %d.", MaxConnectionPage)
	}
	after, err := s.connectionPosition(workspaceID, kind, cursor)
	if err != nil {
		return ConnectionListPage{}, err
	}
	var r ConnectionPageResult
	err = s.store.View(ctx, func(tx Tx) error {
		var err error
		r, err = tx.ConnectionPage(ConnectionPageParams{WorkspaceID: workspaceID, Kind: kind, Limit: limit, After: after})
		return err
	})
	if err != nil {
		return ConnectionListPage{}, fmt.Errorf("list connections: %w", err)
	}
	page := ConnectionListPage{Connections: make([]ConnectionView, 0, len(r.Connections))}
	var queues []string
	for _, c := range r.Connections {
		page.Connections = append(page.Connections, s.viewOf(c))
		if c.Kind == KindConsumer {
			queues = append(queues, c.ID)
		}
	}
	if len(queues) > 0 {
		stats, err := s.store.QueueStatsMany(ctx, queues, s.clock.Now())
		if err != nil {
			return ConnectionListPage{}, fmt.Errorf("queue stats: %w", err)
		}
		for i := range page.Connections {
			if v := &page.Connections[i]; v.Kind == KindConsumer {
				st := stats[v.ID] // a consumer removed since the page was read counts as empty
				v.QueueStats = &st
			}
		}
	}
	if r.Next != nil {
		next := s.connectionCursor(workspaceID, kind, *r.Next)
		page.NextCursor = &next
	}
	return page, nil
}

// UpdateConnection changes a connection's name, attempt limit, tier or
// subscriptions (admins).
func (s *Service) UpdateConnection(ctx context.Context, a *Actor, workspaceID, id string, p ConnectionParams) (ConnectionView, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleAdmin); err != nil {
		return ConnectionView{}, err
	}
	if p.Kind != nil {
		return ConnectionView{}, Errorf(RuleManageBadRequest, "kind cannot be changed; create another connection.")
	}
	var c Connection
	err := s.store.Update(ctx, func(tx Tx) error {
		var err error
		c, err = loadConnection(tx, workspaceID, id)
		if err != nil {
			return err
		}
		if err := s.checkConnectionParams(a, c.Kind, p); err != nil {
			return err
		}
		if err := checkProducers(tx, workspaceID, p.Subscriptions); err != nil {
			return err
		}
		details := map[string]any{}
		if p.Name != nil {
			c.Name, details["name"] = *p.Name, *p.Name
		}
		if p.AttemptLimit != nil {
			c.AttemptLimit, details["attempt_limit"] = *p.AttemptLimit, *p.AttemptLimit
		}
		if p.QuotaTier != nil {
			c.QuotaTier, details["quota_tier"] = *p.QuotaTier, *p.QuotaTier
		}
		if p.Subscriptions != nil {
			c.Subscriptions, details["subscriptions"] = *p.Subscriptions, *p.Subscriptions
		}
		c.UpdatedAt = s.clock.Now()
		if err := tx.ConnectionUpdate(c); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "connection.update", c.ID, details))
	})
	if err != nil {
		return ConnectionView{}, refusalOr("update connection", err)
	}
	s.cfg.OnConnectionChange(c.ID)
	return s.view(ctx, c, true)
}

// RemoveConnection deletes a connection, its queue and credentials (admins).
func (s *Service) RemoveConnection(ctx context.Context, a *Actor, workspaceID, id string) error {
	if err := s.requireRole(ctx, a, workspaceID, RoleAdmin); err != nil {
		return err
	}
	err := s.store.Update(ctx, func(tx Tx) error {
		c, err := loadConnection(tx, workspaceID, id)
		if err != nil {
			return err
		}
		if err := tx.ConnectionDelete(id); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "connection.remove", id, map[string]any{"kind": c.Kind, "name": c.Name}))
	})
	if err != nil {
		return refusalOr("remove connection", err)
	}
	s.cfg.OnConnectionChange(id)
	return nil
}

// changeConnection runs one credential or status change under the
// connection's row in one transaction with its audit entry.
func (s *Service) changeConnection(ctx context.Context, a *Actor, workspaceID, id string, min Role, action string,
	change func(c *Connection, now time.Time) (details map[string]any, err error)) (Connection, error) {
	if err := s.requireRole(ctx, a, workspaceID, min); err != nil {
		return Connection{}, err
	}
	var c Connection
	err := s.store.Update(ctx, func(tx Tx) error {
		var err error
		c, err = loadConnection(tx, workspaceID, id)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		details, err := change(&c, now)
		if err != nil {
			return err
		}
		if details == nil { // nothing changed: no write, no audit entry
			return nil
		}
		c.UpdatedAt = now
		if err := tx.ConnectionUpdate(c); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, action, c.ID, details))
	})
	if err != nil {
		return Connection{}, refusalOr(action, err)
	}
	s.cfg.OnConnectionChange(id)
	return c, nil
}

func (s *Service) issued(c Connection, secret string) SecretIssued {
	base := s.cfg.PublicURL + "/v1"
	out := SecretIssued{ClientID: c.ID, ClientSecret: secret, CredentialVersion: c.CredentialVersion, TokenURL: base + "/oauth/token"}
	if c.Kind == KindProducer {
		out.MessagesURL = base + "/tenants/" + c.WorkspaceID + "/messages"
		return out
	}
	q := base + "/tenants/" + c.WorkspaceID + "/consumers/" + c.ID
	out.MessagesURL, out.AckURL, out.NackURL, out.SkillsURL = q+"/messages", q+"/ack", q+"/nack", q+"/skills"
	return out
}

// IssueSecret is "Get client secret": a first secret, or a new one after a
// revocation (developers). 409 while a secret is active.
func (s *Service) IssueSecret(ctx context.Context, a *Actor, workspaceID, id string) (SecretIssued, error) {
	plain, hash := s.cfg.Credentials.NewSecret()
	c, err := s.changeConnection(ctx, a, workspaceID, id, RoleDeveloper, "secret.issue", func(c *Connection, now time.Time) (map[string]any, error) {
		if c.SecretState == SecretActive {
			return nil, Errorf(RuleManageConflict, "Connection %s has an active secret; rotate it instead.", c.ID)
		}
		c.CredentialVersion++
		c.SecretState, c.SecretHash, c.SecretIssuedAt = SecretActive, hash, &now
		c.PreviousSecretHash, c.PreviousSecretExpiresAt = nil, nil
		return map[string]any{"credential_version": c.CredentialVersion}, nil
	})
	if err != nil {
		return SecretIssued{}, err
	}
	return s.issued(c, plain), nil
}

// RotateSecret issues a new secret; the previous one keeps getting tokens
// for the overlap (developers).
func (s *Service) RotateSecret(ctx context.Context, a *Actor, workspaceID, id, overlap string) (SecretIssued, error) {
	return s.RotateSecretFrom(ctx, a, workspaceID, id, overlap, 0)
}

// RotateSecretFrom is RotateSecret of the secret of credential version
// from only (0: whichever is current): a rotation asked for from a page
// that showed version from, sent again (a reload, a second click), is
// refused instead of rotating a second time, which would end the overlap
// of the secret the clients still use.
func (s *Service) RotateSecretFrom(ctx context.Context, a *Actor, workspaceID, id, overlap string, from int64) (SecretIssued, error) {
	if overlap == "" {
		overlap = "24h"
	}
	d, ok := Overlaps[overlap]
	if !ok {
		return SecretIssued{}, Errorf(RuleManageBadRequest, "overlap must be one of \"24h\", \"3d\", \"1h\", \"none\".")
	}
	plain, hash := s.cfg.Credentials.NewSecret()
	c, err := s.changeConnection(ctx, a, workspaceID, id, RoleDeveloper, "secret.rotate", func(c *Connection, now time.Time) (map[string]any, error) {
		if c.SecretState != SecretActive {
			return nil, Errorf(RuleManageConflict, "Connection %s has no active secret to rotate; get a client secret first.", c.ID)
		}
		if from > 0 && c.CredentialVersion != from {
			return nil, Errorf(RuleManageConflict, "The secret was rotated since this page was shown (it is at version %d now, not %d); nothing was changed.", c.CredentialVersion, from)
		}
		c.CredentialVersion++
		if d > 0 {
			exp := now.Add(d)
			c.PreviousSecretHash, c.PreviousSecretExpiresAt = c.SecretHash, &exp
		} else {
			c.PreviousSecretHash, c.PreviousSecretExpiresAt = nil, nil
		}
		c.SecretHash, c.SecretIssuedAt = hash, &now
		return map[string]any{"credential_version": c.CredentialVersion, "overlap": overlap}, nil
	})
	if err != nil {
		return SecretIssued{}, err
	}
	return s.issued(c, plain), nil
}

// StopPreviousSecret ends a rotation's overlap now (developers).
func (s *Service) StopPreviousSecret(ctx context.Context, a *Actor, workspaceID, id string) (ConnectionView, error) {
	c, err := s.changeConnection(ctx, a, workspaceID, id, RoleDeveloper, "secret.stop_previous", func(c *Connection, now time.Time) (map[string]any, error) {
		if c.PreviousSecretHash == nil {
			return nil, nil
		}
		c.PreviousSecretHash, c.PreviousSecretExpiresAt = nil, nil
		return map[string]any{"credential_version": c.CredentialVersion}, nil
	})
	if err != nil {
		return ConnectionView{}, err
	}
	return s.view(ctx, c, true)
}

// RevokeSecret stops the secret (and any previous one) now and its tokens
// within 30 seconds (developers). The connection and its queue stay.
func (s *Service) RevokeSecret(ctx context.Context, a *Actor, workspaceID, id string) (ConnectionView, error) {
	c, err := s.changeConnection(ctx, a, workspaceID, id, RoleDeveloper, "secret.revoke", func(c *Connection, now time.Time) (map[string]any, error) {
		if c.SecretState != SecretActive {
			return nil, Errorf(RuleManageConflict, "Connection %s has no active secret to revoke.", c.ID)
		}
		c.CredentialVersion++
		c.SecretState, c.SecretHash = SecretRevoked, nil
		c.PreviousSecretHash, c.PreviousSecretExpiresAt = nil, nil
		return map[string]any{"credential_version": c.CredentialVersion}, nil
	})
	if err != nil {
		return ConnectionView{}, err
	}
	return s.view(ctx, c, true)
}

// SetConnectionStatus revokes or restores a connection (admins).
func (s *Service) SetConnectionStatus(ctx context.Context, a *Actor, workspaceID, id string, status ConnectionStatus) (ConnectionView, error) {
	action := "connection.revoke"
	if status == StatusActive {
		action = "connection.restore"
	}
	c, err := s.changeConnection(ctx, a, workspaceID, id, RoleAdmin, action, func(c *Connection, now time.Time) (map[string]any, error) {
		if c.Status == status {
			return nil, nil
		}
		prev := c.Status
		c.Status = status
		return map[string]any{"status": status, "previous_status": prev}, nil
	})
	if err != nil {
		return ConnectionView{}, err
	}
	return s.view(ctx, c, true)
}
