package bus

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of passwords.
const (
	// MinPasswordLength is the fewest characters a password may have.
	MinPasswordLength = 12
	// MaxPasswordBytes bounds a password's bytes (the hash reads them all).
	MaxPasswordBytes = 1024
)

// CheckPassword refuses a password shorter than MinPasswordLength
// characters, longer than MaxPasswordBytes bytes, not UTF-8, or holding a
// control character (a line break, a tab, NUL, DEL, U+0080 to U+009F): the
// portal's password field cannot send one (browsers drop line breaks from
// it, and a tab moves to the next field), so a password set through the
// API or the CLI with one could never be used to sign in. The refusal
// never holds the password.
func CheckPassword(password string) error {
	switch {
	case !utf8.ValidString(password):
		return Errorf(RuleManageBadRequest, "password must be valid UTF-8 text.")
	case len(password) > MaxPasswordBytes:
		return Errorf(RuleManageBadRequest, "password must be at most %d bytes; it has %d.", MaxPasswordBytes, len(password))
	case utf8.RuneCountInString(password) < MinPasswordLength:
		return Errorf(RuleManageBadRequest, "password must be at least %d characters; it has %d.", MinPasswordLength, utf8.RuneCountInString(password))
	case strings.ContainsFunc(password, unicode.IsControl):
		return Errorf(RuleManageBadRequest, "password must not contain control characters (line breaks, tabs, NUL): the portal's sign-in form cannot send them.")
	}
	return nil
}

// passwordWork holds a slot for each password hash running in the process:
// an Argon2id hash holds 19 MiB and a core for tens of milliseconds, so
// many at once (a burst of sign-ins) would exhaust memory, and each
// waiting its turn keeps the CPU for the rest of the server.
var passwordWork = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))

// PasswordWorkSlots is how many password hashes may run at once.
func PasswordWorkSlots() int { return cap(passwordWork) }

// AcquirePasswordWork waits for a slot to hash a password in, and returns
// the function that gives it back; an error when ctx ends first. SetPassword
// takes one itself; a sign-in's caller holds one around its check of the
// failure limits, SignIn and the count of a failure, so that a burst of
// concurrent attempts cannot all pass the check before any is counted.
func AcquirePasswordWork(ctx context.Context) (release func(), err error) {
	select {
	case passwordWork <- struct{}{}:
		return func() { <-passwordWork }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SetPassword sets a user's portal password: operators for any user, every
// user for themselves. It ends the user's other portal sessions (all but
// the one a is acting through) and writes a user.password_set audit entry
// without the password.
func (s *Service) SetPassword(ctx context.Context, a *Actor, userID, password string) error {
	_, err := s.setPassword(ctx, a, userID, password, false)
	return err
}

// SetOwnPasswordNewSession sets the password of the user of the portal
// session a acts through, ends every session of the user, that one too,
// and opens a new one, all in one transaction; it returns the new
// session's token. The session that set the password ends as the others
// do (its cookie may have been copied); the browser that set it goes on
// in the new one.
func (s *Service) SetOwnPasswordNewSession(ctx context.Context, a *Actor, password string) (token string, err error) {
	return s.setPassword(ctx, a, a.User.ID, password, true)
}

func (s *Service) setPassword(ctx context.Context, a *Actor, userID, password string, renew bool) (token string, err error) {
	if userID != a.User.ID {
		if err := requireOperator(a); err != nil {
			return "", Errorf(RuleManageForbidden, "Only operators may set another user's password.")
		}
	}
	if err := CheckPassword(password); err != nil {
		return "", err
	}
	release, err := AcquirePasswordWork(ctx)
	if err != nil {
		return "", err
	}
	hash := s.cfg.Credentials.HashPassword(password)
	release()
	keep := a.Session
	var sess Session
	if renew {
		keep = nil
		token = randomToken()
		now := s.clock.Now()
		sess = Session{TokenHash: s.cfg.Credentials.Hash(token), UserID: userID, CSRFToken: randomToken(), CreatedAt: now, LastSeenAt: now}
	}
	var ended int
	err = s.store.Update(ctx, func(tx Tx) error {
		if err := tx.UserPasswordSet(userID, hash); err != nil {
			return err
		}
		var err error
		if ended, err = tx.SessionDeleteUser(userID, keep); err != nil {
			return err
		}
		if renew {
			// After the user's row, as a sign-in takes them (SignIn).
			if err := tx.SessionCreate(sess); err != nil {
				return err
			}
		}
		return tx.AuditInsert(s.audit(a, "", "user.password_set", userID, map[string]any{"sessions_ended": ended}))
	})
	if errors.Is(err, ErrNotFound) {
		return "", Errorf(RuleManageNotFound, "User %s not found.", userID)
	}
	if err != nil {
		return "", fmt.Errorf("set password: %w", err)
	}
	return token, nil
}

// PasswordMatches reports whether password is the user's current password
// (false when none is set), after the same work either way.
func (s *Service) PasswordMatches(ctx context.Context, userID, password string) (bool, error) {
	var hash string
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		hash, err = tx.UserPasswordGet(userID)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("read password: %w", err)
	}
	if len(password) > MaxPasswordBytes {
		password = password[:MaxPasswordBytes]
	}
	return s.cfg.Credentials.PasswordMatches(password, hash) && hash != "", nil
}

// SessionPolicy bounds portal sessions: a session ends Idle after its last
// use, and Absolute after it began whatever its use.
type SessionPolicy struct {
	Idle     time.Duration
	Absolute time.Duration
}

// Default session bounds.
const (
	DefaultSessionIdle     = time.Hour
	DefaultSessionAbsolute = 12 * time.Hour
	// sessionTouchEvery: a session's last use is written at most this
	// often, so that reading pages does not write on every request.
	sessionTouchEvery = time.Minute
)

// ErrSignIn is the one refusal of a failed sign-in, whichever part was
// wrong: it does not tell whether the email exists or has a password.
var errSignIn = Errorf(RuleManageUnauthenticated, "Wrong email or password.")

// SignIn checks an email and password and begins a portal session. It
// returns the session token (for the cookie; only its hash is kept) and the
// session. Every failure is the same refusal. It hashes the password: hold
// a slot of AcquirePasswordWork around it.
func (s *Service) SignIn(ctx context.Context, email, password string, p SessionPolicy) (token string, sess Session, err error) {
	var u User
	var hash string
	if PlainEmail(email) && len(password) <= MaxPasswordBytes {
		err = s.store.View(ctx, func(tx Tx) error {
			var err error
			if u, err = tx.UserByEmail(email); err != nil {
				return err
			}
			hash, err = tx.UserPasswordGet(u.ID)
			return err
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", Session{}, fmt.Errorf("sign in: %w", err)
		}
	}
	// Always one hash's work, even for an unknown email or an empty hash.
	if len(password) > MaxPasswordBytes {
		password = password[:MaxPasswordBytes]
	}
	if !s.cfg.Credentials.PasswordMatches(password, hash) || hash == "" {
		return "", Session{}, errSignIn
	}
	token = randomToken()
	now := s.clock.Now()
	sess = Session{TokenHash: s.cfg.Credentials.Hash(token), UserID: u.ID, CSRFToken: randomToken(), CreatedAt: now, LastSeenAt: now}
	err = s.store.Update(ctx, func(tx Tx) error {
		// The session first: like a password change, which writes the
		// user's row and then deletes the user's sessions, it takes the
		// user's row before any session's, so that the two never wait for
		// each other in a cycle.
		if err := tx.SessionCreate(sess); err != nil {
			return err
		}
		// Sessions that ended are swept here, at the rate of sign-ins.
		_, err := tx.SessionDeleteExpired(now.Add(-p.Idle), now.Add(-p.Absolute))
		return err
	})
	if err != nil {
		return "", Session{}, fmt.Errorf("begin session: %w", err)
	}
	return token, sess, nil
}

// errSessionEnded refuses a session that is unknown, signed out or expired.
var errSessionEnded = Errorf(RuleManageUnauthenticated, "Your session has ended; sign in again.")

// AuthenticateSession finds the user of a portal session token, ending the
// session when it has been idle or open too long (by the service's clock).
func (s *Service) AuthenticateSession(ctx context.Context, token string, p SessionPolicy) (*Actor, Session, error) {
	if token == "" {
		return nil, Session{}, errSessionEnded
	}
	hash := s.cfg.Credentials.Hash(token)
	now := s.clock.Now()
	var sess Session
	var a Actor
	expired := false
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		if sess, err = tx.SessionGet(hash); err != nil {
			return err
		}
		if now.Sub(sess.LastSeenAt) >= p.Idle || now.Sub(sess.CreatedAt) >= p.Absolute {
			expired = true
			return nil
		}
		a, err = actorOf(tx, sess.UserID)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, Session{}, errSessionEnded
	}
	if err != nil {
		return nil, Session{}, fmt.Errorf("authenticate session: %w", err)
	}
	if expired {
		if err := s.endSession(ctx, hash); err != nil {
			return nil, Session{}, err
		}
		return nil, Session{}, errSessionEnded
	}
	if now.Sub(sess.LastSeenAt) >= sessionTouchEvery {
		err := s.store.Update(ctx, func(tx Tx) error { return tx.SessionTouch(hash, now) })
		if errors.Is(err, ErrNotFound) {
			return nil, Session{}, errSessionEnded // signed out meanwhile
		}
		if err != nil {
			return nil, Session{}, fmt.Errorf("touch session: %w", err)
		}
		sess.LastSeenAt = now
	}
	a.Session = hash
	return &a, sess, nil
}

// SignOut ends the session of token; an unknown token is no error.
func (s *Service) SignOut(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	return s.endSession(ctx, s.cfg.Credentials.Hash(token))
}

func (s *Service) endSession(ctx context.Context, hash []byte) error {
	err := s.store.Update(ctx, func(tx Tx) error { return tx.SessionDelete(hash) })
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// actorOf reads a user and their roles.
func actorOf(tx Tx, userID string) (Actor, error) {
	u, err := tx.UserGet(userID)
	if err != nil {
		return Actor{}, err
	}
	ms, err := tx.MemberListByUser(u.ID)
	if err != nil {
		return Actor{}, err
	}
	a := Actor{User: u, Roles: make(map[string]Role, len(ms))}
	for _, m := range ms {
		a.Roles[m.WorkspaceID] = m.Role
	}
	return a, nil
}

// NewToken returns 256 random bits as unpadded base64url: a session or
// form token.
func NewToken() string { return randomToken() }

// randomToken returns 256 random bits, unpadded base64url.
func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("bus: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// MemberView is a workspace member with the user's name and email.
type MemberView struct {
	UserID string `json:"user_id"`
	Name   string `json:"name"`
	Email  string `json:"email"`
	Role   Role   `json:"role"`
}

// ListMembers lists a workspace's members (viewers and above), strongest
// role first, then by name.
func (s *Service) ListMembers(ctx context.Context, a *Actor, workspaceID string) ([]MemberView, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleViewer); err != nil {
		return nil, err
	}
	out := []MemberView{}
	err := s.store.View(ctx, func(tx Tx) error {
		ms, err := tx.MemberListByWorkspace(workspaceID)
		if err != nil {
			return err
		}
		for _, m := range ms {
			u, err := tx.UserGet(m.UserID)
			if err != nil {
				return err
			}
			out = append(out, MemberView{UserID: u.ID, Name: u.Name, Email: u.Email, Role: m.Role})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Role.Rank() != out[j].Role.Rank() {
			return out[i].Role.Rank() > out[j].Role.Rank()
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// SetMemberByEmail grants or changes the role of the user with email, as
// SetMember does (owners only).
func (s *Service) SetMemberByEmail(ctx context.Context, a *Actor, workspaceID, email string, role Role) (Member, error) {
	if err := s.requireRole(ctx, a, workspaceID, RoleOwner); err != nil {
		return Member{}, err
	}
	// Refused as a new user's would be: "No user has the email …" would
	// otherwise show an address that reads as an existing user's.
	if err := checkNewEmail(email); err != nil {
		return Member{}, err
	}
	var u User
	err := s.store.View(ctx, func(tx Tx) error {
		var err error
		u, err = tx.UserByEmail(email)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Member{}, Errorf(RuleManageNotFound, "No user has the email %s; an operator creates users.", email)
	}
	if err != nil {
		return Member{}, fmt.Errorf("find user: %w", err)
	}
	return s.SetMember(ctx, a, workspaceID, u.ID, role)
}
