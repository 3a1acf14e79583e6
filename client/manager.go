package client

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Manager is a client of the management (workspace) API, authenticated
// with a user's API key. Its zero value is not usable: set BaseURL and
// APIKey. A Manager is safe for concurrent use once its fields are set.
type Manager struct {
	// BaseURL is the bus's address, such as "https://bus.example.com".
	BaseURL string
	// APIKey is a user's API key (`sombus serve` prints the first one).
	APIKey string
	// HTTPClient sends the requests; nil is a default client.
	HTTPClient *http.Client
	// MaxRetries is how often a 429 or 503 answer (and a lost answer of a
	// read) is retried; 0 is DefaultMaxRetries, negative never.
	MaxRetries int
	// UserAgent is sent with every request; "" is "sombus-go".
	UserAgent string

	once sync.Once
	t    *transport
	err  error
}

func (m *Manager) transport() (*transport, error) {
	m.once.Do(func() {
		base, err := normalizeBase(m.BaseURL)
		if err != nil {
			m.err = err
			return
		}
		if m.APIKey == "" {
			m.err = errors.New("sombus: Manager.APIKey is required")
			return
		}
		hc := m.HTTPClient
		if hc == nil {
			hc = defaultHTTPClient()
		}
		ua := m.UserAgent
		if ua == "" {
			ua = "sombus-go"
		}
		key := m.APIKey
		m.t = &transport{base: base, http: hc, maxRetries: m.MaxRetries, userAgent: ua,
			bearer: func(context.Context) (string, error) { return key, nil }}
	})
	return m.t, m.err
}

func (m *Manager) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	t, err := m.transport()
	if err != nil {
		return err
	}
	return t.do(ctx, call{method: method, path: path, query: query, body: body, idempotent: method == http.MethodGet || method == http.MethodPut}, out)
}

// User is a person or tool who manages workspaces with API keys.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Email     string    `json:"email"`
	Operator  bool      `json:"operator"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey is a newly issued API key; Key is shown only this once.
type APIKey struct {
	ID        string    `json:"id"`
	UserID    string    `json:"user_id"`
	Key       string    `json:"api_key"`
	CreatedAt time.Time `json:"created_at"`
}

// Workspace is a tenant.
type Workspace struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Role is a user's role in a workspace: viewer < developer < admin < owner.
type Role string

// The roles, weakest first.
const (
	RoleViewer    Role = "viewer"
	RoleDeveloper Role = "developer"
	RoleAdmin     Role = "admin"
	RoleOwner     Role = "owner"
)

// Member is a user's role in one workspace.
type Member struct {
	WorkspaceID string `json:"workspace_id"`
	UserID      string `json:"user_id"`
	Role        Role   `json:"role"`
}

// Whoami is the caller's user and roles.
type Whoami struct {
	User  User     `json:"user"`
	Roles []Member `json:"roles"`
}

// The connection kinds.
const (
	KindConsumer = "consumer"
	KindProducer = "producer"
)

// Subscription routes messages whose topic matches Topic ("som.story.*";
// a final ">" matches one or more segments), from Producers when not empty.
type Subscription struct {
	Topic     string   `json:"topic"`
	Producers []string `json:"producers,omitempty"`
}

// SecretState is a connection's client secret state.
type SecretState struct {
	// State is "none", "active" or "revoked".
	State    string     `json:"state"`
	IssuedAt *time.Time `json:"issued_at"`
	// PreviousExpiresAt is when the previous secret (after a rotation with
	// overlap) stops getting tokens.
	PreviousExpiresAt *time.Time `json:"previous_expires_at"`
}

// QueueStats are a consumer queue's counts.
type QueueStats struct {
	Ready                 int64   `json:"ready"`
	InFlight              int64   `json:"in_flight"`
	Delayed               int64   `json:"delayed"`
	DeadLetters           int64   `json:"dead_letters"`
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
}

// Connection is a producer or consumer connection; a consumer's has its
// queue counts.
type Connection struct {
	ID                string         `json:"id"`
	WorkspaceID       string         `json:"workspace_id"`
	Kind              string         `json:"kind"`
	Name              string         `json:"name"`
	Status            string         `json:"status"`
	AttemptLimit      int            `json:"attempt_limit"`
	QuotaTier         string         `json:"quota_tier"`
	CredentialVersion int64          `json:"credential_version"`
	Secret            SecretState    `json:"secret"`
	Subscriptions     []Subscription `json:"subscriptions"`
	CreatedAt         time.Time      `json:"created_at"`
	// QueueStats is nil for a producer.
	*QueueStats
}

// ConnectionParams create a connection (Kind and Name are required) or,
// with PATCH semantics, update one (only the set fields change; Kind
// cannot change).
type ConnectionParams struct {
	Kind          string          `json:"kind,omitempty"`
	Name          *string         `json:"name,omitempty"`
	AttemptLimit  *int            `json:"attempt_limit,omitempty"`
	QuotaTier     *string         `json:"quota_tier,omitempty"`
	Subscriptions *[]Subscription `json:"subscriptions,omitempty"`
}

// Ptr returns a pointer to v, for the optional fields of ConnectionParams.
func Ptr[T any](v T) *T { return &v }

// Secret is a newly issued client secret with the connection's URLs; the
// secret is shown only this once.
type Secret struct {
	ClientID          string `json:"client_id"`
	ClientSecret      string `json:"client_secret"`
	CredentialVersion int64  `json:"credential_version"`
	TokenURL          string `json:"token_url"`
	MessagesURL       string `json:"messages_url"`
	AckURL            string `json:"ack_url,omitempty"`
	NackURL           string `json:"nack_url,omitempty"`
	SkillsURL         string `json:"skills_url,omitempty"`
}

// The overlaps of RotateSecret: how long the previous secret still gets
// tokens.
const (
	Overlap24h  = "24h"
	Overlap3d   = "3d"
	Overlap1h   = "1h"
	OverlapNone = "none"
)

// DeadLetter is a message moved to a consumer's dead-letter queue.
type DeadLetter struct {
	MessageID      string          `json:"message_id"`
	MessageType    string          `json:"message_type"`
	CorrelationID  string          `json:"correlation_id"`
	Topic          string          `json:"topic"`
	ProducerID     string          `json:"producer_id"`
	ReceiveCount   int             `json:"receive_count"`
	EnqueuedAt     time.Time       `json:"enqueued_at"`
	DeadLetteredAt time.Time       `json:"dead_lettered_at"`
	Envelope       json.RawMessage `json:"envelope"`
}

// DeadLetterPage is one page of dead letters; NextCursor is "" on the last.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor"`
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	ID      string         `json:"id"`
	At      time.Time      `json:"at"`
	Actor   string         `json:"actor"`
	Action  string         `json:"action"`
	Target  string         `json:"target"`
	Details map[string]any `json:"details"`
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor"`
}

// PageOptions select a page of a listing: Limit 1 to 100 (0 is the bus's
// default: 50, or 100 for connections) and the Cursor a previous page
// returned.
type PageOptions struct {
	Limit  int
	Cursor string
}

func (p PageOptions) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return q
}

// Usage is a connection's use of its daily quota.
type Usage struct {
	ConnectionID  string `json:"connection_id"`
	Tier          string `json:"tier"`
	Day           string `json:"day"`
	RequestsToday int64  `json:"requests_today"`
	// DailyQuota and Remaining are nil on an unlimited tier.
	DailyQuota *int64    `json:"daily_quota"`
	Remaining  *int64    `json:"remaining"`
	ResetsAt   time.Time `json:"resets_at"`
}

func wsPath(ws string) string { return "/v1/manage/workspaces/" + pathEscape(ws) }
func connPath(ws, c string) string {
	return wsPath(ws) + "/connections/" + pathEscape(c)
}

// Whoami returns the caller's user and roles.
func (m *Manager) Whoami(ctx context.Context) (*Whoami, error) {
	var out Whoami
	return &out, m.do(ctx, http.MethodGet, "/v1/manage/whoami", nil, nil, &out)
}

// CreateUser creates a user (operators only).
func (m *Manager) CreateUser(ctx context.Context, name, email string, operator bool) (*User, error) {
	var out User
	body := map[string]any{"name": name, "email": email, "operator": operator}
	return &out, m.do(ctx, http.MethodPost, "/v1/manage/users", nil, body, &out)
}

// CreateAPIKey issues an API key for a user (operators only); the key is
// shown once.
func (m *Manager) CreateAPIKey(ctx context.Context, userID string) (*APIKey, error) {
	var out APIKey
	if err := m.do(ctx, http.MethodPost, "/v1/manage/users/"+pathEscape(userID)+"/keys", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.UserID == "" {
		out.UserID = userID // the answer need not repeat it
	}
	return &out, nil
}

// SetPassword sets the password a user signs in to the web portal with:
// operators set anyone's, every user their own. It is at least 12
// characters and at most 1024 bytes of UTF-8, without control characters
// (line breaks, tabs, NUL).
func (m *Manager) SetPassword(ctx context.Context, userID, password string) error {
	return m.do(ctx, http.MethodPut, "/v1/manage/users/"+pathEscape(userID)+"/password", nil, map[string]string{"password": password}, nil)
}

// CreateWorkspace creates a workspace (operators only); the caller becomes
// its owner.
func (m *Manager) CreateWorkspace(ctx context.Context, name string) (*Workspace, error) {
	var out Workspace
	return &out, m.do(ctx, http.MethodPost, "/v1/manage/workspaces", nil, map[string]string{"name": name}, &out)
}

// ListWorkspaces lists the workspaces the caller is a member of.
func (m *Manager) ListWorkspaces(ctx context.Context) ([]Workspace, error) {
	var out struct {
		Workspaces []Workspace `json:"workspaces"`
	}
	return out.Workspaces, m.do(ctx, http.MethodGet, "/v1/manage/workspaces", nil, nil, &out)
}

// GetWorkspace reads a workspace.
func (m *Manager) GetWorkspace(ctx context.Context, ws string) (*Workspace, error) {
	var out Workspace
	return &out, m.do(ctx, http.MethodGet, wsPath(ws), nil, nil, &out)
}

// SetMember grants or changes a user's role in a workspace (owners).
func (m *Manager) SetMember(ctx context.Context, ws, userID string, role Role) (*Member, error) {
	var out Member
	return &out, m.do(ctx, http.MethodPut, wsPath(ws)+"/members/"+pathEscape(userID), nil, map[string]Role{"role": role}, &out)
}

// RemoveMember removes a user's role in a workspace (owners).
func (m *Manager) RemoveMember(ctx context.Context, ws, userID string) error {
	return m.do(ctx, http.MethodDelete, wsPath(ws)+"/members/"+pathEscape(userID), nil, nil, nil)
}

// CreateConnection creates a producer or consumer connection (admins).
func (m *Manager) CreateConnection(ctx context.Context, ws string, p ConnectionParams) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodPost, wsPath(ws)+"/connections", nil, p, &out)
}

// ListConnections lists every connection of a workspace, oldest first,
// reading page after page; kind "" is all.
func (m *Manager) ListConnections(ctx context.Context, ws, kind string) ([]Connection, error) {
	var all []Connection
	p := PageOptions{Limit: 100}
	for {
		page, err := m.ListConnectionsPage(ctx, ws, kind, p)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Connections...)
		if page.NextCursor == "" {
			return all, nil
		}
		p.Cursor = page.NextCursor
	}
}

// ConnectionPage is one page of a workspace's connections, oldest first;
// NextCursor is "" on the last page.
type ConnectionPage struct {
	Connections []Connection `json:"connections"`
	NextCursor  string       `json:"next_cursor"`
}

// ListConnectionsPage reads one page of a workspace's connections; kind ""
// is all. p.Limit 0 is the bus's default (100, the largest page).
func (m *Manager) ListConnectionsPage(ctx context.Context, ws, kind string, p PageOptions) (*ConnectionPage, error) {
	q := p.query()
	if kind != "" {
		q.Set("kind", kind)
	}
	var out struct {
		Connections []Connection `json:"connections"`
		NextCursor  *string      `json:"next_cursor"`
	}
	if err := m.do(ctx, http.MethodGet, wsPath(ws)+"/connections", q, nil, &out); err != nil {
		return nil, err
	}
	page := &ConnectionPage{Connections: out.Connections}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}

// GetConnection reads a connection (with its queue counts for a consumer).
func (m *Manager) GetConnection(ctx context.Context, ws, id string) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodGet, connPath(ws, id), nil, nil, &out)
}

// UpdateConnection changes the set fields of p (admins).
func (m *Manager) UpdateConnection(ctx context.Context, ws, id string, p ConnectionParams) (*Connection, error) {
	p.Kind = ""
	var out Connection
	return &out, m.do(ctx, http.MethodPatch, connPath(ws, id), nil, p, &out)
}

// RemoveConnection deletes a connection, its queue and its credentials (admins).
func (m *Manager) RemoveConnection(ctx context.Context, ws, id string) error {
	return m.do(ctx, http.MethodDelete, connPath(ws, id), nil, nil, nil)
}

// IssueSecret is "Get client secret": a new secret when none is active
// (409 manage.conflict otherwise: rotate instead).
func (m *Manager) IssueSecret(ctx context.Context, ws, id string) (*Secret, error) {
	var out Secret
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/secret", nil, nil, &out)
}

// RotateSecret issues a new secret; the previous one still gets tokens for
// overlap (Overlap24h, Overlap3d, Overlap1h or OverlapNone; "" is 24h).
func (m *Manager) RotateSecret(ctx context.Context, ws, id, overlap string) (*Secret, error) {
	var body any
	if overlap != "" {
		body = map[string]string{"overlap": overlap}
	}
	var out Secret
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/secret/rotate", nil, body, &out)
}

// StopPreviousSecret ends a rotation's overlap now.
func (m *Manager) StopPreviousSecret(ctx context.Context, ws, id string) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/secret/stop-previous", nil, nil, &out)
}

// RevokeSecret stops the secret at once and its tokens within 30 s; the
// connection and its queue stay.
func (m *Manager) RevokeSecret(ctx context.Context, ws, id string) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/secret/revoke", nil, nil, &out)
}

// RevokeConnection stops new tokens at once and the connection's requests
// within 30 s; its queue is kept and still receives messages (admins).
func (m *Manager) RevokeConnection(ctx context.Context, ws, id string) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/revoke", nil, nil, &out)
}

// RestoreConnection undoes RevokeConnection: the same secret works again.
func (m *Manager) RestoreConnection(ctx context.Context, ws, id string) (*Connection, error) {
	var out Connection
	return &out, m.do(ctx, http.MethodPost, connPath(ws, id)+"/restore", nil, nil, &out)
}

// ListDeadLetters reads one page of a consumer's dead letters, oldest first.
func (m *Manager) ListDeadLetters(ctx context.Context, ws, id string, p PageOptions) (*DeadLetterPage, error) {
	var out struct {
		DeadLetters []DeadLetter `json:"dead_letters"`
		NextCursor  *string      `json:"next_cursor"`
	}
	if err := m.do(ctx, http.MethodGet, connPath(ws, id)+"/dead-letters", p.query(), nil, &out); err != nil {
		return nil, err
	}
	page := &DeadLetterPage{DeadLetters: out.DeadLetters}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}

// AllDeadLetters iterates over every dead letter of a consumer, page by page.
func (m *Manager) AllDeadLetters(ctx context.Context, ws, id string) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		p := PageOptions{Limit: 100}
		for {
			page, err := m.ListDeadLetters(ctx, ws, id, p)
			if err != nil {
				yield(DeadLetter{}, err)
				return
			}
			for _, d := range page.DeadLetters {
				if !yield(d, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			p.Cursor = page.NextCursor
		}
	}
}

// RedriveDeadLetters moves dead letters back to the queue (all of them when
// messageIDs is empty), at the end of their story, with receive_count
// starting again; it returns how many moved.
func (m *Manager) RedriveDeadLetters(ctx context.Context, ws, id string, messageIDs []string) (int, error) {
	var body any
	if len(messageIDs) > 0 {
		body = map[string][]string{"message_ids": messageIDs}
	}
	var out struct {
		Redriven int `json:"redriven"`
	}
	err := m.do(ctx, http.MethodPost, connPath(ws, id)+"/dead-letters/redrive", nil, body, &out)
	return out.Redriven, err
}

// Purge drops every message in a consumer's queue (not its dead letters)
// and returns how many (admins).
func (m *Manager) Purge(ctx context.Context, ws, id string) (int, error) {
	var out struct {
		Purged int `json:"purged"`
	}
	err := m.do(ctx, http.MethodPost, connPath(ws, id)+"/purge", nil, nil, &out)
	return out.Purged, err
}

// GetSkills reads the skill registrations bound to a consumer.
func (m *Manager) GetSkills(ctx context.Context, ws, id string) (*Skills, error) {
	var out Skills
	return &out, m.do(ctx, http.MethodGet, connPath(ws, id)+"/skills", nil, nil, &out)
}

// PutSkills replaces the skill registrations bound to a consumer (admins).
// A registration without Values is sent with {} (the API refuses null).
func (m *Manager) PutSkills(ctx context.Context, ws, id string, regs []SkillRegistration) (*Skills, error) {
	regs = slices.Clone(regs)
	if regs == nil {
		regs = []SkillRegistration{}
	}
	for i := range regs {
		if len(regs[i].Values) == 0 {
			regs[i].Values = json.RawMessage(`{}`)
		}
	}
	var out Skills
	return &out, m.do(ctx, http.MethodPut, connPath(ws, id)+"/skills", nil, map[string]any{"registrations": regs}, &out)
}

// Usage reads a connection's use of its daily quota.
func (m *Manager) Usage(ctx context.Context, ws, id string) (*Usage, error) {
	var out Usage
	return &out, m.do(ctx, http.MethodGet, connPath(ws, id)+"/usage", nil, nil, &out)
}

// ListAudit reads one page of a workspace's audit log, newest first (admins).
func (m *Manager) ListAudit(ctx context.Context, ws string, p PageOptions) (*AuditPage, error) {
	return m.auditPage(ctx, wsPath(ws)+"/audit", p)
}

// ListGlobalAudit reads one page of the audit entries that belong to no
// workspace (the creation of users and API keys), newest first (operators).
func (m *Manager) ListGlobalAudit(ctx context.Context, p PageOptions) (*AuditPage, error) {
	return m.auditPage(ctx, "/v1/manage/audit", p)
}

func (m *Manager) auditPage(ctx context.Context, path string, p PageOptions) (*AuditPage, error) {
	var out struct {
		Entries    []AuditEntry `json:"entries"`
		NextCursor *string      `json:"next_cursor"`
	}
	if err := m.do(ctx, http.MethodGet, path, p.query(), nil, &out); err != nil {
		return nil, err
	}
	page := &AuditPage{Entries: out.Entries}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}
