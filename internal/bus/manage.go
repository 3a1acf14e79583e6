package bus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Actor is an authenticated user of the management API.
type Actor struct {
	User  User
	Roles map[string]Role // workspace id -> role
	// Session is the token hash of the portal session the user acts
	// through; nil for an API key.
	Session []byte
}

// Overlaps are the allowed overlaps of a rotation.
var Overlaps = map[string]time.Duration{"24h": 24 * time.Hour, "3d": 72 * time.Hour, "1h": time.Hour, "none": 0}

// Limits of management fields.
const (
	MaxNameLength      = 128
	MaxAttemptLimit    = 1000
	MaxSubscriptions   = 100
	MaxProducerFilters = 100
	MaxRegistrations   = 100
	MaxAuditPage       = 100
	DefaultAuditPage   = 50
)

// AuthenticateAPIKey finds the user holding an API key.
func (s *Service) AuthenticateAPIKey(ctx context.Context, key string) (*Actor, error) {
	if key == "" {
		return nil, Errorf(RuleManageUnauthenticated, "Missing API key: send Authorization: Bearer <api key>.")
	}
	var a Actor
	err := s.store.View(ctx, func(tx Tx) error {
		u, err := tx.UserByAPIKeyHash(s.cfg.Credentials.Hash(key))
		if err != nil {
			return err
		}
		ms, err := tx.MemberListByUser(u.ID)
		if err != nil {
			return err
		}
		a.User = u
		a.Roles = make(map[string]Role, len(ms))
		for _, m := range ms {
			a.Roles[m.WorkspaceID] = m.Role
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil, Errorf(RuleManageUnauthenticated, "Unknown API key.")
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate api key: %w", err)
	}
	return &a, nil
}

// Bootstrap creates the first operator with apiKey when the store has no
// users. It returns created=false when users already exist.
func (s *Service) Bootstrap(ctx context.Context, apiKey string) (created bool, err error) {
	now := s.clock.Now()
	err = s.store.Update(ctx, func(tx Tx) error {
		n, err := tx.UserCount()
		if err != nil {
			return err
		}
		if n > 0 {
			created = false
			return nil
		}
		u := User{ID: NewID(PrefixUser), Name: "operator", Email: "operator@localhost", Operator: true, CreatedAt: now}
		if err := tx.UserCreate(u); err != nil {
			return err
		}
		if err := tx.APIKeyCreate(APIKey{ID: NewID(PrefixAPIKey), UserID: u.ID, Hash: s.cfg.Credentials.Hash(apiKey), CreatedAt: now}); err != nil {
			return err
		}
		created = true
		return tx.AuditInsert(AuditEntry{ID: NewID(PrefixAudit), At: now, Actor: "system", Action: "user.create", Target: u.ID,
			Details: map[string]any{"operator": true, "bootstrap": true}})
	})
	if errors.Is(err, ErrConflict) {
		// Another node starting at the same moment created the operator.
		return false, nil
	}
	return created, err
}

// requireOperator refuses callers who are not operators.
func requireOperator(a *Actor) error {
	if !a.User.Operator {
		return Errorf(RuleManageForbidden, "Only operators may do this.")
	}
	return nil
}

// RequireRole checks that the workspace exists and a has at least min
// there: a refusal (404, 403) otherwise.
func (s *Service) RequireRole(ctx context.Context, a *Actor, workspaceID string, min Role) error {
	return s.requireRole(ctx, a, workspaceID, min)
}

// requireRole checks that the workspace exists and a has at least min there.
func (s *Service) requireRole(ctx context.Context, a *Actor, workspaceID string, min Role) error {
	var exists bool
	err := s.store.View(ctx, func(tx Tx) error {
		_, err := tx.WorkspaceGet(workspaceID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		exists = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("read workspace: %w", err)
	}
	if !exists {
		return Errorf(RuleManageNotFound, "Workspace %s not found.", workspaceID)
	}
	role := a.Roles[workspaceID]
	if role == "" && a.User.Operator {
		// Operators run the installation: they may read every workspace.
		role = RoleViewer
	}
	if !role.AtLeast(min) {
		if role == "" {
			// Not revealing whether a workspace exists to non-members.
			return Errorf(RuleManageNotFound, "Workspace %s not found.", workspaceID)
		}
		return Errorf(RuleManageForbidden, "This needs the %s role or above in workspace %s; you are %s.", min, workspaceID, role)
	}
	return nil
}

// audit builds an audit entry for a change by a.
func (s *Service) audit(a *Actor, workspaceID, action, target string, details map[string]any) AuditEntry {
	if details == nil {
		details = map[string]any{}
	}
	return AuditEntry{ID: NewID(PrefixAudit), WorkspaceID: workspaceID, At: s.clock.Now(), Actor: a.User.ID, Action: action, Target: target, Details: details}
}

// checkName checks a required human name.
func checkName(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return Errorf(RuleManageBadRequest, "%s is required.", field)
	}
	// A form carries any bytes (JSON bodies are UTF-8 already): checkText
	// says what is wrong before the length limit is counted.
	if err := checkText(field, v); err != nil {
		return err
	}
	if err := checkVisible(field, v); err != nil {
		return err
	}
	if utf8.RuneCountInString(v) > MaxNameLength {
		return Errorf(RuleManageBadRequest, "%s must be at most %d characters.", field, MaxNameLength)
	}
	return nil
}

// Whoami answers the caller's user and roles.
func (s *Service) Whoami(a *Actor) WhoamiView {
	v := WhoamiView{User: a.User, Roles: []RoleView{}}
	for ws, r := range a.Roles {
		v.Roles = append(v.Roles, RoleView{WorkspaceID: ws, Role: r})
	}
	sort.Slice(v.Roles, func(i, j int) bool { return v.Roles[i].WorkspaceID < v.Roles[j].WorkspaceID })
	return v
}

// WhoamiView is the answer of GET /v1/manage/whoami.
type WhoamiView struct {
	User  User       `json:"user"`
	Roles []RoleView `json:"roles"`
}

// RoleView is one of the caller's roles.
type RoleView struct {
	WorkspaceID string `json:"workspace_id"`
	Role        Role   `json:"role"`
}

// CreateUserParams are the fields of POST /v1/manage/users.
type CreateUserParams struct {
	Name     string `json:"name" strictjson:"required"`
	Email    string `json:"email" strictjson:"required"`
	Operator bool   `json:"operator"`
}

// CreateUser creates a user (operators only).
func (s *Service) CreateUser(ctx context.Context, a *Actor, p CreateUserParams) (User, error) {
	if err := requireOperator(a); err != nil {
		return User{}, err
	}
	if err := checkName("name", p.Name); err != nil {
		return User{}, err
	}
	if err := checkNewEmail(p.Email); err != nil {
		return User{}, err
	}
	u := User{ID: NewID(PrefixUser), Name: p.Name, Email: p.Email, Operator: p.Operator, CreatedAt: s.clock.Now()}
	err := s.store.Update(ctx, func(tx Tx) error {
		if err := tx.UserCreate(u); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, "", "user.create", u.ID, map[string]any{"name": u.Name, "email": u.Email, "operator": u.Operator}))
	})
	if errors.Is(err, ErrConflict) {
		return User{}, Errorf(RuleManageConflict, "A user with email %s exists already.", p.Email)
	}
	if err != nil {
		return User{}, fmt.Errorf("create user: %w", err)
	}
	return u, nil
}

// APIKeyView is the answer of POST /v1/manage/users/{u}/keys; the key is
// shown this once.
type APIKeyView struct {
	ID        string    `json:"id"`
	UserID    string    `json:"-"`
	APIKey    string    `json:"api_key"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateAPIKey issues an API key for a user (operators only).
func (s *Service) CreateAPIKey(ctx context.Context, a *Actor, userID string) (APIKeyView, error) {
	if err := requireOperator(a); err != nil {
		return APIKeyView{}, err
	}
	plain, hash := s.cfg.Credentials.NewAPIKey()
	k := APIKey{ID: NewID(PrefixAPIKey), UserID: userID, Hash: hash, CreatedAt: s.clock.Now()}
	err := s.store.Update(ctx, func(tx Tx) error {
		if _, err := tx.UserGet(userID); err != nil {
			return err
		}
		if err := tx.APIKeyCreate(k); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, "", "key.create", userID, map[string]any{"key_id": k.ID}))
	})
	if errors.Is(err, ErrNotFound) {
		return APIKeyView{}, Errorf(RuleManageNotFound, "User %s not found.", userID)
	}
	if err != nil {
		return APIKeyView{}, fmt.Errorf("create api key: %w", err)
	}
	return APIKeyView{ID: k.ID, UserID: userID, APIKey: plain, CreatedAt: k.CreatedAt}, nil
}

// CreateWorkspace creates a workspace whose owner is the creator
// (operators only).
func (s *Service) CreateWorkspace(ctx context.Context, a *Actor, name string) (Workspace, error) {
	if err := requireOperator(a); err != nil {
		return Workspace{}, err
	}
	if err := checkName("name", name); err != nil {
		return Workspace{}, err
	}
	w := Workspace{ID: NewID(PrefixWorkspace), Name: name, CreatedAt: s.clock.Now()}
	err := s.store.Update(ctx, func(tx Tx) error {
		if err := tx.WorkspaceCreate(w); err != nil {
			return err
		}
		if err := tx.MemberSet(Member{WorkspaceID: w.ID, UserID: a.User.ID, Role: RoleOwner}); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, w.ID, "workspace.create", w.ID, map[string]any{"name": name}))
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	a.Roles[w.ID] = RoleOwner
	return w, nil
}

// ListWorkspaces lists the caller's workspaces.
func (s *Service) ListWorkspaces(ctx context.Context, a *Actor) ([]Workspace, error) {
	var ws []Workspace
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		member := a.User.ID
		if a.User.Operator {
			member = "" // operators see every workspace
		}
		ws, err = tx.WorkspaceList(member)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	if ws == nil {
		ws = []Workspace{}
	}
	return ws, nil
}

// GetWorkspace reads one workspace (members).
func (s *Service) GetWorkspace(ctx context.Context, a *Actor, id string) (Workspace, error) {
	if err := s.requireRole(ctx, a, id, RoleViewer); err != nil {
		return Workspace{}, err
	}
	var w Workspace
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		w, err = tx.WorkspaceGet(id)
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("get workspace: %w", err)
	}
	return w, nil
}

// SetMember grants or changes a user's role (owners only). The last owner
// cannot be demoted.
func (s *Service) SetMember(ctx context.Context, a *Actor, workspaceID, userID string, role Role) (Member, error) {
	return s.setMember(ctx, a, workspaceID, userID, role, false)
}

// ChangeMemberRole changes the role of a user who is a member now, as
// SetMember does, and refuses (not found) instead of adding one who is
// not: a form to change a member's role, drawn before that member was
// removed, must not bring them back.
func (s *Service) ChangeMemberRole(ctx context.Context, a *Actor, workspaceID, userID string, role Role) (Member, error) {
	return s.setMember(ctx, a, workspaceID, userID, role, true)
}

// errNotMember is setMember's refusal of a user who is not a member when
// it may only change a role.
var errNotMember = errors.New("not a member")

func (s *Service) setMember(ctx context.Context, a *Actor, workspaceID, userID string, role Role, existing bool) (Member, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleOwner); err != nil {
		return Member{}, err
	}
	if role.Rank() == 0 {
		return Member{}, Errorf(RuleManageBadRequest, "role must be one of viewer, developer, admin, owner.")
	}
	m := Member{WorkspaceID: workspaceID, UserID: userID, Role: role}
	err := s.store.Update(ctx, func(tx Tx) error {
		if _, err := tx.UserGet(userID); err != nil {
			return err
		}
		old, err := tx.MemberGet(workspaceID, userID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err != nil && existing {
			return errNotMember
		}
		if old.Role == RoleOwner && role != RoleOwner {
			if err := s.keepAnOwner(tx, workspaceID, userID); err != nil {
				return err
			}
		}
		if err := tx.MemberSet(m); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "member.set", userID, map[string]any{"role": string(role), "previous_role": string(old.Role)}))
	})
	if errors.Is(err, errNotMember) {
		return Member{}, Errorf(RuleManageNotFound, "User %s is not a member of workspace %s (removed since the page was shown?); nothing was changed.", userID, workspaceID)
	}
	if errors.Is(err, ErrNotFound) {
		return Member{}, Errorf(RuleManageNotFound, "User %s not found.", userID)
	}
	if err != nil {
		if _, ok := AsError(err); ok {
			return Member{}, err
		}
		return Member{}, fmt.Errorf("set member: %w", err)
	}
	return m, nil
}

// keepAnOwner refuses a change that would leave the workspace without an
// owner other than userID.
func (s *Service) keepAnOwner(tx Tx, workspaceID, userID string) error {
	// The workspace's row first, which an Update's read locks on
	// PostgreSQL: two owners demoting or removing each other at once would
	// otherwise each find the other still an owner (READ COMMITTED), and
	// leave the workspace with none. The second now waits for the first
	// and sees its change. (The embedded store runs one write at a time.)
	if _, err := tx.WorkspaceGet(workspaceID); err != nil {
		return err
	}
	ms, err := tx.MemberListByWorkspace(workspaceID)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Role == RoleOwner && m.UserID != userID {
			return nil
		}
	}
	return Errorf(RuleManageConflict, "User %s is the workspace's last owner; make someone else owner first.", userID)
}

// RemoveMember removes a user's role (owners only).
func (s *Service) RemoveMember(ctx context.Context, a *Actor, workspaceID, userID string) error {
	if err := s.requireRole(ctx, a, workspaceID, RoleOwner); err != nil {
		return err
	}
	err := s.store.Update(ctx, func(tx Tx) error {
		old, err := tx.MemberGet(workspaceID, userID)
		if err != nil {
			return err
		}
		if old.Role == RoleOwner {
			if err := s.keepAnOwner(tx, workspaceID, userID); err != nil {
				return err
			}
		}
		if err := tx.MemberDelete(workspaceID, userID); err != nil {
			return err
		}
		return tx.AuditInsert(s.audit(a, workspaceID, "member.remove", userID, map[string]any{"previous_role": string(old.Role)}))
	})
	if errors.Is(err, ErrNotFound) {
		return Errorf(RuleManageNotFound, "User %s is not a member of workspace %s.", userID, workspaceID)
	}
	if err != nil {
		if _, ok := AsError(err); ok {
			return err
		}
		return fmt.Errorf("remove member: %w", err)
	}
	return nil
}

// AuditPage is the answer of the audit listing.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// ListAudit reads a workspace's audit log, newest first (admins).
func (s *Service) ListAudit(ctx context.Context, a *Actor, workspaceID string, limit int, cursor string) (AuditPage, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleAdmin); err != nil {
		return AuditPage{}, err
	}
	return s.auditPage(ctx, AuditQuery{WorkspaceID: workspaceID}, limit, cursor)
}

// AuditFilter narrows an audit listing; a zero field matches every entry.
type AuditFilter struct {
	Actor  string    // the acting user's id
	Action string    // for example "secret.rotate"
	Target string    // what the action was on, for example a connection id
	From   time.Time // entries at or after it
	To     time.Time // entries before it
}

// SearchAudit reads the entries of a workspace's audit log that match f,
// newest first (admins), a page at a time as ListAudit does.
func (s *Service) SearchAudit(ctx context.Context, a *Actor, workspaceID string, f AuditFilter, limit int, cursor string) (AuditPage, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleAdmin); err != nil {
		return AuditPage{}, err
	}
	for _, v := range []struct{ field, v string }{{"actor", f.Actor}, {"action", f.Action}, {"target", f.Target}} {
		if v.v != "" && !validIDText(v.v) {
			return AuditPage{}, Errorf(RuleManageBadRequest, "%s must be 1 to %d printable ASCII characters.", v.field, MaxIDLength)
		}
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return AuditPage{}, Errorf(RuleManageBadRequest, "from must be before to.")
	}
	return s.auditPage(ctx, AuditQuery{WorkspaceID: workspaceID, Actor: f.Actor, Action: f.Action, Target: f.Target, From: f.From, To: f.To}, limit, cursor)
}

// ListGlobalAudit reads the audit entries that belong to no workspace (the
// creation of users and API keys), newest first (operators).
func (s *Service) ListGlobalAudit(ctx context.Context, a *Actor, limit int, cursor string) (AuditPage, error) {
	if !a.User.Operator {
		return AuditPage{}, Errorf(RuleManageForbidden, "Only operators may read the audit entries of users and API keys.")
	}
	return s.auditPage(ctx, AuditQuery{}, limit, cursor)
}

// auditPage reads one page of the audit entries q selects (q.WorkspaceID
// "" for the entries of no workspace), after cursor (the last entry id of
// the previous page, "" for the first).
func (s *Service) auditPage(ctx context.Context, q AuditQuery, limit int, cursor string) (AuditPage, error) {
	if cursor != "" && !ValidID(cursor, PrefixAudit) {
		return AuditPage{}, Errorf(RuleManageBadRequest, "cursor is not a cursor this listing returned.")
	}
	var es []AuditEntry
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		q.Limit, q.Before = limit+1, cursor
		es, err = tx.AuditSearch(q)
		return err
	})
	if err != nil {
		return AuditPage{}, fmt.Errorf("list audit: %w", err)
	}
	if cursor != "" && len(es) == 0 {
		// A cursor this listing returned always has older entries (audit
		// entries are never deleted): this one is from elsewhere.
		return AuditPage{}, Errorf(RuleManageBadRequest, "cursor is not a cursor this listing returned.")
	}
	page := AuditPage{Entries: es}
	if len(es) > limit {
		page.Entries = es[:limit]
		next := es[limit-1].ID
		page.NextCursor = &next
	}
	if page.Entries == nil {
		page.Entries = []AuditEntry{}
	}
	return page, nil
}
