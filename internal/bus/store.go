package bus

import (
	"context"
	"time"
)

// Store is the one storage seam of sombus. SQLite and PostgreSQL implement
// it with identical behaviour; storetest holds that behaviour.
//
// Time never comes from the store's own clock: every method that needs "now"
// takes it in its params, so rules are tested with an injected clock.
type Store interface {
	// Update runs fn in one read-write transaction: everything fn writes,
	// audit entries included, commits together or not at all. fn may be run
	// again if the store has to retry (a deadlock or serialization failure),
	// so it must not have side effects outside tx.
	Update(ctx context.Context, fn func(tx Tx) error) error
	// View runs fn in a read-only transaction.
	View(ctx context.Context, fn func(tx Tx) error) error

	// MessagePublish accepts messages in order, placing each in every
	// matching consumer queue of the workspace, in one transaction.
	MessagePublish(ctx context.Context, p *PublishParams) ([]PublishOutcome, error)
	// MessageReceive claims up to p.Max story heads of a queue (or replays an
	// attempt id), moving exhausted heads to the dead letters first.
	MessageReceive(ctx context.Context, p *ReceiveParams) (*ReceiveResult, error)
	// MessageAck acknowledges deliveries; one result per handle, in order.
	MessageAck(ctx context.Context, p *SettleParams) ([]SettleResult, error)
	// MessageNack releases deliveries after p.Delay; one result per handle.
	MessageNack(ctx context.Context, p *SettleParams) ([]SettleResult, error)

	// QueueStats counts a consumer queue; ErrNotFound when the queue does
	// not exist (its connection was removed, perhaps since the caller read
	// it).
	QueueStats(ctx context.Context, queueID string, now time.Time) (QueueStats, error)
	// QueueStatsMany counts several consumer queues in one statement (one
	// snapshot), as QueueStats counts one; a queue that does not exist is
	// left out of the map.
	QueueStatsMany(ctx context.Context, queueIDs []string, now time.Time) (map[string]QueueStats, error)
	// QueueGauges counts every consumer queue of the store, as QueueStats
	// counts one, in one statement (one snapshot), ordered by workspace id
	// then connection id: what a metrics scrape reads.
	QueueGauges(ctx context.Context, now time.Time) ([]QueueGauge, error)
	// QueuePurge drops every message of a queue (not its dead letters) and
	// writes p.Audit in the same transaction. Of a queue that does not
	// exist (removed meanwhile): ErrNotFound, and no audit entry; the same
	// for the two below.
	QueuePurge(ctx context.Context, p *PurgeParams) (int, error)
	// DeadLetterList lists a queue's dead letters, oldest first, after
	// cursor (a DeadLetter.ID; 0 for the first page).
	DeadLetterList(ctx context.Context, queueID string, limit int, after int64) ([]DeadLetter, error)
	// DeadLetterRedrive moves dead letters back to the end of their stories
	// with receive counts starting again, and writes p.Audit.
	DeadLetterRedrive(ctx context.Context, p *RedriveParams) (int, error)

	// QueueSample takes one sample of every consumer queue's counts, as
	// QueueStats counts them as of p.Now, under the time p.At: it records
	// the round p.At, and a sample of each queue whose counts differ from
	// its latest sample (a queue that did not change is carried forward
	// from that one; see FillSamples). In one statement, or, for an
	// embedded store whose one writer would be held for the whole sample,
	// in transactions of some queues each. When the round p.At is recorded
	// already, the call writes nothing (another node sampled this
	// interval). It returns how many queue samples it wrote.
	QueueSample(ctx context.Context, p *QueueSampleParams) (int, error)
	// QueueSamplePrune deletes the rounds recorded before before, and the
	// samples recorded before it that a later one at or before it replaces
	// (a queue's latest sample is kept while it carries forward) or whose
	// queue no longer exists, and returns how many samples went.
	QueueSamplePrune(ctx context.Context, before time.Time) (int, error)
	// QueueSamples reads one queue's counts at every round recorded at or
	// after since, oldest first (FillSamples): a round before the queue's
	// first sample has none.
	QueueSamples(ctx context.Context, queueID string, since time.Time) ([]QueueSample, error)

	// Maintain does the background work: dead-letter moves of expired
	// exhausted heads, retention, and expiry of attempt ids, ack records
	// and dedup records. It returns the queues that got a ready message.
	Maintain(ctx context.Context, p *MaintainParams) (*MaintainResult, error)

	// Listen calls fn with a queue id whenever another node made a message
	// of that queue ready, until ctx ends. A store shared by several nodes
	// sends that notification itself, after the commit of every change
	// that makes a story ready (publish, ack, nack, dead-letter move,
	// redrive, maintenance), so callers never have to; it may leave it out
	// while no other node listens (PostgreSQL does). The SQLite store
	// (one node) blocks until ctx ends: its node wakes its own waiters from
	// the Woken/QueueIDs results.
	Listen(ctx context.Context, fn func(queueID string)) error
	// Ping checks that the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}

// WaitAnnouncer is a store shared by nodes that sends a queue's wake-ups
// only to the nodes whose polls wait on that queue. The bus calls
// WaitAnnounce when a poll's look found nothing and the poll is about to
// wait; when it returns true (it told the other nodes just now) the bus
// looks at the queue once more before waiting, since a change committed
// before the other nodes heard may not have been sent to this one.
type WaitAnnouncer interface {
	WaitAnnounce(ctx context.Context, queueID string) (announced bool, err error)
}

// Tx is what a management transaction may read and write.
type Tx interface {
	UserCreate(u User) error
	UserGet(id string) (User, error)
	UserCount() (int, error)
	// UserByAPIKeyHash finds the owner of an API key.
	UserByAPIKeyHash(hash []byte) (User, error)
	APIKeyCreate(k APIKey) error
	// UserByEmail finds a user by email, compared without regard to case.
	UserByEmail(email string) (User, error)
	// UserPasswordSet keeps hash (a PHC string) as the user's password
	// hash, replacing any; ErrNotFound if the user does not exist.
	UserPasswordSet(userID, hash string) error
	// UserPasswordGet returns the user's password hash, "" when none was
	// set; ErrNotFound if the user does not exist.
	UserPasswordGet(userID string) (string, error)

	// SessionCreate inserts a portal session; ErrConflict if its token
	// hash exists.
	SessionCreate(s Session) error
	// SessionGet finds a session by the hash of its token.
	SessionGet(tokenHash []byte) (Session, error)
	// SessionTouch sets a session's LastSeenAt; ErrNotFound if none.
	SessionTouch(tokenHash []byte, at time.Time) error
	// SessionDelete removes a session; ErrNotFound if none.
	SessionDelete(tokenHash []byte) error
	// SessionDeleteUser removes every session of a user but the one whose
	// token hash is keep (nil keeps none) and says how many it removed.
	SessionDeleteUser(userID string, keep []byte) (int, error)
	// SessionDeleteExpired removes the sessions last seen before idleBefore
	// or created before createdBefore and says how many it removed.
	SessionDeleteExpired(idleBefore, createdBefore time.Time) (int, error)

	WorkspaceCreate(w Workspace) error
	WorkspaceGet(id string) (Workspace, error)
	// WorkspaceList lists every workspace when userID is "", else the
	// workspaces userID is a member of; by creation, oldest first.
	WorkspaceList(userID string) ([]Workspace, error)

	// MemberSet grants or changes a role.
	MemberSet(m Member) error
	MemberDelete(workspaceID, userID string) error
	// MemberGet returns ErrNotFound when the user has no role there.
	MemberGet(workspaceID, userID string) (Member, error)
	MemberListByUser(userID string) ([]Member, error)
	MemberListByWorkspace(workspaceID string) ([]Member, error)

	ConnectionCreate(c Connection) error
	// ConnectionGet finds a connection by id alone (ErrNotFound if none).
	ConnectionGet(id string) (Connection, error)
	// ConnectionList lists a workspace's connections, of one kind unless
	// kind is "", oldest first.
	ConnectionList(workspaceID string, kind ConnectionKind) ([]Connection, error)
	// ConnectionStates lists what a token check needs of each of a
	// workspace's connections (none for an unknown workspace), in no
	// particular order: a narrow read for checks that refresh a whole
	// workspace at once.
	ConnectionStates(workspaceID string) ([]ConnectionState, error)
	// ConnectionPage lists one page of a workspace's connections in the
	// order of ConnectionList, after p.After, with the position to continue
	// from when more follow.
	ConnectionPage(p ConnectionPageParams) (ConnectionPageResult, error)
	// ConnectionUpdate writes every field of c (matched by c.ID).
	ConnectionUpdate(c Connection) error
	// ConnectionDelete removes a connection with its queue, dead letters,
	// attempt ids and skill registrations.
	ConnectionDelete(id string) error

	SkillsPut(connectionID string, s Skills) error
	// SkillsGet returns empty registrations when none were put.
	SkillsGet(connectionID string) (Skills, error)

	AuditInsert(e AuditEntry) error
	// AuditList lists a workspace's audit entries ("" for the entries of no
	// workspace) newest first, before the entry with id before (all when
	// before is ""); a before that is not an entry of this listing gives an
	// empty page.
	AuditList(workspaceID string, limit int, before string) ([]AuditEntry, error)
	// AuditSearch lists a workspace's audit entries as AuditList does,
	// keeping only those that match every filter of q that is set.
	AuditSearch(q AuditQuery) ([]AuditEntry, error)

	SigningKeyList() ([]SigningKey, error)
	// SigningKeyCreate inserts a key; ErrConflict if its id exists.
	SigningKeyCreate(k SigningKey) error
	// ServerSecret returns the named server-wide secret, creating it from
	// fresh when absent (the first caller's value wins on every node).
	ServerSecret(name string, fresh []byte) ([]byte, error)
}

// AuditQuery selects a page of a workspace's audit entries: those after
// Before (as in AuditList) that match every filter that is set.
type AuditQuery struct {
	WorkspaceID string    // "" for the entries of no workspace
	Limit       int       // at most this many; all when 0 or less
	Before      string    // an entry id; "" for the first page
	Actor       string    // the acting user's id; "" for any
	Action      string    // "" for any
	Target      string    // "" for any
	From        time.Time // entries at or after it; zero for no bound
	To          time.Time // entries before it; zero for no bound
}

// ConnectionPosition is where a connection stands in its workspace's
// listing: by creation time, then by the order the store inserted
// connections created in the same millisecond. A position stays valid when
// its connection is removed.
type ConnectionPosition struct {
	CreatedAt time.Time
	Seq       int64 // the store's insertion order (0 or more)
}

// ConnectionPageParams select one page of a workspace's connections.
type ConnectionPageParams struct {
	WorkspaceID string
	Kind        ConnectionKind // "" for every kind
	Limit       int            // 1 or more
	// After is the position to list after; nil for the first page.
	After *ConnectionPosition
}

// ConnectionPageResult is one page of connections; Next is the position
// of its last connection when more follow, nil on the last page.
type ConnectionPageResult struct {
	Connections []Connection
	Next        *ConnectionPosition
}

// PublishMessage is one checked envelope to accept.
type PublishMessage struct {
	MessageID     string
	MessageType   string
	Topic         string
	CorrelationID string
	Envelope      []byte // the bytes as accepted
}

// PublishParams accepts Messages in order from one producer.
type PublishParams struct {
	WorkspaceID string
	ProducerID  string
	Messages    []PublishMessage
	Now         time.Time
	// DedupWindow: a message_id already accepted from this producer within
	// it is a duplicate, accepted again but not delivered again.
	DedupWindow time.Duration
}

// PublishOutcome is what happened to one published message.
type PublishOutcome struct {
	Deliveries int
	Duplicate  bool
	// QueueIDs are the queues the message was placed in (none if duplicate).
	QueueIDs []string
}

// ReceiveParams asks for up to Max messages of a queue.
type ReceiveParams struct {
	QueueID    string
	Max        int
	Visibility time.Duration
	// AttemptID, when not "", makes the receive retryable for AttemptWindow.
	AttemptID     string
	AttemptWindow time.Duration
	Now           time.Time
}

// ReceiveResult is what a receive got.
type ReceiveResult struct {
	Deliveries []Delivery
	// NextVisibleAt is the earliest future time a story of the queue
	// becomes visible (zero when none is waiting on time).
	NextVisibleAt time.Time
	// Woken lists queues that got a ready message as a side effect.
	Woken []string
	// Replayed is true when an attempt record was found and replayed (the
	// answer is final even when empty: a replay takes nothing new).
	Replayed bool
	// DeadLettered counts the exhausted heads moved to the dead letters
	// before the claim.
	DeadLettered int
}

// SettleParams acknowledges or releases handles of one queue.
type SettleParams struct {
	QueueID string
	Handles []Handle
	Delay   time.Duration // nack only
	Now     time.Time
	// GiveBack (nack only, without Delay): the deliveries never reached a
	// receiver (the client was gone, or their answer could not be
	// written). Their claim is undone: each story is ready at once with
	// its receive count one lower, so the delivery is not counted, no
	// message moves to the dead letters for it, whatever the attempt
	// limit, and its handle no longer settles anything. Never for a
	// replayed delivery: the receive that first claimed it may have
	// reached its receiver.
	GiveBack bool
}

// SettleResult is the outcome of one handle: OK, or the failure code.
type SettleResult struct {
	OK   bool
	Code string // "ReceiptHandleIsInvalid" when not OK
	// Message explains a failure in words.
	Message string
	// Woken is true when the settle made a message of the queue ready.
	Woken bool
	// DeadLettered is true when a nack moved the message to the dead
	// letters (its delivery used the last attempt).
	DeadLettered bool
}

// PurgeParams drops a queue's messages.
type PurgeParams struct {
	QueueID string
	Now     time.Time
	Audit   AuditEntry
}

// RedriveParams moves dead letters back; nil MessageIDs means all.
type RedriveParams struct {
	QueueID    string
	MessageIDs []string
	Now        time.Time
	Audit      AuditEntry
}

// MaintainParams configures one round of background work. A zero duration
// turns its part off.
type MaintainParams struct {
	Now                 time.Time
	Retention           time.Duration // messages not acknowledged within it are dropped
	DeadLetterRetention time.Duration // dead letters are kept this long
	AttemptWindow       time.Duration // attempt ids expire after it
	DedupWindow         time.Duration // dedup records expire after it
	AckRecordWindow     time.Duration // ack records (idempotent re-acks) expire after it
}

// MaintainResult says what a round did.
type MaintainResult struct {
	DeadLettered int
	Expired      int
	Woken        []string
}

// CodeReceiptHandleIsInvalid is the per-handle failure code of ack and nack.
const CodeReceiptHandleIsInvalid = "ReceiptHandleIsInvalid"

// The messages of the CodeReceiptHandleIsInvalid failures: both stores
// word the same case the same way.
const (
	MsgHandleMalformed     = "The receipt handle is malformed or not from this queue."
	MsgHandleOtherQueue    = "The receipt handle belongs to another queue."
	MsgHandleReceivedAgain = "The message was received again after this receipt handle was issued."
	MsgHandleNotInFlight   = "The receipt handle does not match a message in flight (it was acknowledged, dead-lettered, purged or expired)."
)
