package bus

import (
	"encoding/json"
	"time"
)

// Role is a user's role in one workspace; roles are ordered.
type Role string

// The roles, weakest first.
const (
	RoleViewer    Role = "viewer"
	RoleDeveloper Role = "developer"
	RoleAdmin     Role = "admin"
	RoleOwner     Role = "owner"
)

// Rank orders roles: viewer 1 < developer 2 < admin 3 < owner 4; unknown 0.
func (r Role) Rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleDeveloper:
		return 2
	case RoleAdmin:
		return 3
	case RoleOwner:
		return 4
	}
	return 0
}

// AtLeast reports whether r is min or stronger.
func (r Role) AtLeast(min Role) bool { return r.Rank() >= min.Rank() && r.Rank() > 0 }

// User is a person (or tool) who manages workspaces with API keys.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Email     string    `json:"email"`
	Operator  bool      `json:"operator"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey belongs to a user; only its hash is kept.
type APIKey struct {
	ID        string
	UserID    string
	Hash      []byte
	CreatedAt time.Time
}

// Session is a signed-in portal user. Only the SHA-256 of its token is
// kept, so a copy of the store opens no session.
type Session struct {
	TokenHash  []byte
	UserID     string
	CSRFToken  string
	CreatedAt  time.Time
	LastSeenAt time.Time
}

// Workspace is a tenant: connections, queues and audit log live in one.
type Workspace struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Member is a user's role in a workspace.
type Member struct {
	WorkspaceID string `json:"workspace_id"`
	UserID      string `json:"user_id"`
	Role        Role   `json:"role"`
}

// ConnectionKind says whether a connection publishes or consumes.
type ConnectionKind string

// The connection kinds.
const (
	KindConsumer ConnectionKind = "consumer"
	KindProducer ConnectionKind = "producer"
)

// ConnectionStatus is active or revoked.
type ConnectionStatus string

// The connection statuses.
const (
	StatusActive  ConnectionStatus = "active"
	StatusRevoked ConnectionStatus = "revoked"
)

// SecretState is the state of a connection's client secret.
type SecretState string

// The secret states: none was ever issued, one is active, or it was revoked.
const (
	SecretNone    SecretState = "none"
	SecretActive  SecretState = "active"
	SecretRevoked SecretState = "revoked"
)

// Subscription routes messages whose topic matches Topic (and, when
// Producers is not empty, that come from one of those producers).
type Subscription struct {
	Topic     string   `json:"topic" strictjson:"required"`
	Producers []string `json:"producers,omitempty"`
}

// ConnectionState is the part of a connection that decides whether its
// tokens are accepted: the same fields as in Connection.
type ConnectionState struct {
	ID                string
	WorkspaceID       string
	Kind              ConnectionKind
	Status            ConnectionStatus
	QuotaTier         string
	CredentialVersion int64
}

// Connection is a producer or consumer client: its credentials and, for a
// consumer, its queue (the queue id is the connection id).
type Connection struct {
	ID                string
	WorkspaceID       string
	Kind              ConnectionKind
	Name              string
	Status            ConnectionStatus
	AttemptLimit      int
	QuotaTier         string
	CredentialVersion int64
	Subscriptions     []Subscription
	CreatedAt         time.Time
	UpdatedAt         time.Time

	SecretState    SecretState
	SecretHash     []byte     // hash of the current secret; nil unless active
	SecretIssuedAt *time.Time // when the current secret was issued
	// PreviousSecretHash still gets tokens until PreviousSecretExpiresAt.
	PreviousSecretHash      []byte
	PreviousSecretExpiresAt *time.Time
}

// State is the part of c that decides whether its tokens are accepted.
func (c Connection) State() ConnectionState {
	return ConnectionState{ID: c.ID, WorkspaceID: c.WorkspaceID, Kind: c.Kind, Status: c.Status,
		QuotaTier: c.QuotaTier, CredentialVersion: c.CredentialVersion}
}

// AuditEntry records one change: who did what to what, and when.
type AuditEntry struct {
	ID          string         `json:"id"`
	WorkspaceID string         `json:"-"`
	At          time.Time      `json:"at"`
	Actor       string         `json:"actor"`
	Action      string         `json:"action"`
	Target      string         `json:"target"`
	Details     map[string]any `json:"details"`
}

// SigningKey is a token signing key, kept in the store so that every node
// signs and verifies with the same keys.
type SigningKey struct {
	ID         string
	Algorithm  string
	PrivateKey []byte // PKCS#8 DER
	CreatedAt  time.Time
}

// SkillRegistration is one configured skill instance bound to a consumer.
type SkillRegistration struct {
	InstanceID string `json:"instance_id" strictjson:"required"`
	Skill      string `json:"skill" strictjson:"required"`
	Name       string `json:"name" strictjson:"required"`
	// Values left out or null are stored as {}, as they always were (the
	// Go client before this version sent null for no values).
	Values         json.RawMessage `json:"values" strictjson:"nullable"`
	AuthorityScale int             `json:"authority_scale" strictjson:"required"`
}

// Skills is the set of registrations of one consumer connection.
type Skills struct {
	Registrations []SkillRegistration `json:"registrations"`
	UpdatedAt     time.Time           `json:"updated_at"`
}

// Handle identifies one delivery of one message in one queue. Its text form
// (with a MAC) is the receipt handle; see auth.HandleCodec.
type Handle struct {
	QueueID string
	StoryID int64
	Seq     int64
	Nonce   int64
}

// Delivery is a message handed to a receiver.
type Delivery struct {
	Handle        Handle
	MessageID     string
	MessageType   string
	CorrelationID string
	Topic         string
	ProducerID    string
	ReceiveCount  int
	EnqueuedAt    time.Time
	Envelope      []byte
	// Replayed: returned again for a retried attempt id. Such a delivery
	// is not given back when its answer is lost (see
	// SettleParams.GiveBack): the first answer may have reached its
	// receiver.
	Replayed bool
}

// DeadLetter is a message moved to a queue's dead-letter queue.
type DeadLetter struct {
	ID             int64           `json:"-"`
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

// QueueStats are a consumer queue's counts.
type QueueStats struct {
	Ready                 int64   `json:"ready"`
	InFlight              int64   `json:"in_flight"`
	Delayed               int64   `json:"delayed"`
	DeadLetters           int64   `json:"dead_letters"`
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
}
