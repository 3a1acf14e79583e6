package portal

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

func (p *Portal) routes() {
	p.mux.Handle("GET "+Prefix+"static/", p.static())
	p.mux.HandleFunc("GET "+Prefix+"signin", p.signinPage)
	p.mux.HandleFunc("POST "+Prefix+"signin", p.signin)
	p.action("POST "+Prefix+"signout", p.signout)

	p.page("GET "+Prefix+"{$}", p.workspaces)
	p.action("POST "+Prefix+"workspaces", p.createWorkspace)
	p.page("GET "+Prefix+"workspaces/{t}", p.workspace)
	p.action("POST "+Prefix+"workspaces/{t}/members", p.setMember)
	p.action("POST "+Prefix+"workspaces/{t}/members/{u}", p.changeMember)
	p.action("POST "+Prefix+"workspaces/{t}/members/{u}/remove", p.removeMember)
	p.page("GET "+Prefix+"password", p.passwordPage)
	p.action("POST "+Prefix+"password", p.setPassword)
	p.connectionRoutes()
}

// --- sign in and out

// signinData is the sign-in page's data.
type signinData struct {
	CSRF  string
	Next  string
	Ended bool
}

// signinPage shows the sign-in form (or goes home when signed in).
func (p *Portal) signinPage(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		if _, _, err := p.svc.AuthenticateSession(r.Context(), c.Value, p.cfg.Sessions); err == nil {
			http.Redirect(w, r, p.nextOf(r.URL.Query().Get("next")), http.StatusSeeOther) //nolint:gosec // nextOf keeps only portal paths (safeNext)
			return
		}
	}
	p.showSignin(w, r, http.StatusOK, View{}, r.URL.Query().Get("next"))
}

// showSignin renders the sign-in form with a fresh form token (kept in
// its cookie) unless the visitor has one.
func (p *Portal) showSignin(w http.ResponseWriter, r *http.Request, status int, v View, next string) {
	token := ""
	if c, err := r.Cookie(signinCookie); err == nil && len(c.Value) >= 32 && bus.PlainText(c.Value) {
		token = c.Value
	} else {
		token = newToken()
		p.setCookie(w, signinCookie, token, p.cfg.Sessions.Absolute)
	}
	if !safeNext(next) {
		next = ""
	}
	v.Title = "Sign in"
	v.Data = signinData{CSRF: token, Next: next, Ended: r.URL.Query().Get("ended") == "1"}
	if err := p.render(w, r, nil, status, "signin", v); err != nil {
		p.fail(w, r, nil, err)
	}
}

// signin checks the sign-in form and begins a session.
func (p *Portal) signin(w http.ResponseWriter, r *http.Request) {
	if !p.readForm(w, r, nil) {
		return
	}
	c, err := r.Cookie(signinCookie)
	if err != nil || !tokensEqual(r.PostForm.Get("csrf"), c.Value) {
		p.refuseCSRF(w, r, nil)
		return
	}
	email, password, next := strings.TrimSpace(r.PostForm.Get("email")), r.PostForm.Get("password"), r.PostForm.Get("next")
	form := url.Values{"email": {email}}
	v := View{ErrorForm: "signin", Form: form}
	if email == "" || password == "" {
		v.Error = "Enter your email and your password."
		p.showSignin(w, r, http.StatusBadRequest, v, next)
		return
	}
	// Failures count per email (folded to lower case; under a name no
	// connection id can have) and per address, as the token endpoint
	// counts failed secrets.
	key, addr := failureKey(email), remoteHost(r)
	// The limits are checked, the password hashed and a failure counted
	// while this sign-in holds a password slot: concurrent attempts take
	// turns, each seeing the failures counted before it.
	release, err := bus.AcquirePasswordWork(r.Context())
	if err != nil {
		return // the client went away while it waited
	}
	defer release()
	wait, err := p.cfg.Failures.Blocked(r.Context(), key, addr)
	if err != nil {
		p.fail(w, r, nil, err)
		return
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		v.Error = "Too many failed sign-ins. Wait " + strconv.Itoa(int(wait.Seconds())) + " seconds, then try again."
		p.showSignin(w, r, http.StatusTooManyRequests, v, next)
		return
	}
	token, _, err := p.svc.SignIn(r.Context(), email, password, p.cfg.Sessions)
	if err != nil {
		if e, ok := bus.AsError(err); ok && e.Status == http.StatusUnauthorized {
			if err := p.cfg.Failures.Failed(r.Context(), key, addr); err != nil {
				p.fail(w, r, nil, err)
				return
			}
			v.Error = "Wrong email or password."
			p.showSignin(w, r, http.StatusUnauthorized, v, next)
			return
		}
		p.fail(w, r, nil, err)
		return
	}
	// The session this browser held until now (the same user's, or
	// another's who used it) ends: its cookie is replaced, and a session no
	// browser shows any more should not stay open until it goes idle, for
	// anyone who copied its cookie. Not ending it does not undo the sign-in.
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := p.svc.SignOut(r.Context(), c.Value); err != nil {
			p.log.WarnContext(r.Context(), "portal: the session a sign-in replaced could not be ended; it ends when it goes idle", "err", err)
		}
	}
	p.setCookie(w, sessionCookie, token, p.cfg.Sessions.Absolute)
	p.clearCookie(w, signinCookie)
	http.Redirect(w, r, p.nextOf(next), http.StatusSeeOther) //nolint:gosec // nextOf keeps only portal paths (safeNext)
}

// failureKey is the failure limiter's key of an email: folded to lower
// case, under a name no connection id can have (the limiter bounds its
// size and quotes what is not plain text: auth.LimiterKey).
func failureKey(email string) string {
	return "portal:" + strings.ToLower(email)
}

// nextOf is where to go after signing in.
func (p *Portal) nextOf(next string) string {
	if safeNext(next) {
		return next
	}
	return Prefix
}

// signout ends the session.
func (p *Portal) signout(w http.ResponseWriter, r *http.Request, s *Session) error {
	c, err := r.Cookie(sessionCookie)
	if err == nil {
		if err := p.svc.SignOut(r.Context(), c.Value); err != nil {
			return err
		}
	}
	p.clearCookie(w, sessionCookie)
	p.redirect(w, r, Prefix+"signin", "signed-out")
	return nil
}

// remoteHost is the client's address without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// newToken returns 256 random bits as text.
func newToken() string { return bus.NewToken() }

// --- workspaces

// workspaceRow is one line of the workspaces list.
type workspaceRow struct {
	bus.Workspace
	Role bus.Role
}

func (p *Portal) workspaces(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showWorkspaces(w, r, s, http.StatusOK, View{})
}

func (p *Portal) showWorkspaces(w http.ResponseWriter, r *http.Request, s *Session, status int, v View) error {
	list, err := p.svc.ListWorkspaces(r.Context(), s.Actor)
	if err != nil {
		return err
	}
	rows := make([]workspaceRow, 0, len(list))
	for _, ws := range list {
		rows = append(rows, workspaceRow{Workspace: ws, Role: s.Actor.Roles[ws.ID]})
	}
	v.Title, v.Section, v.Data = "Workspaces", "workspaces", rows
	return p.render(w, r, s, status, "workspaces", v)
}

func (p *Portal) createWorkspace(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws, err := p.svc.CreateWorkspace(r.Context(), s.Actor, strings.TrimSpace(r.PostForm.Get("name")))
	if err != nil {
		if e, ok := bus.AsError(err); ok && e.Status != http.StatusForbidden {
			return p.showWorkspaces(w, r, s, e.Status, View{Error: refusalText(e), ErrorForm: "create", Form: r.PostForm})
		}
		return err // not an operator: the form is not theirs to see
	}
	p.redirect(w, r, Prefix+"workspaces/"+url.PathEscape(ws.ID), "workspace-created")
	return nil
}

// --- a workspace and its members

// workspaceData is a workspace page's data.
type workspaceData struct {
	Workspace bus.Workspace
	// Role is the signed-in user's role there ("" for an operator who is
	// no member: they may read it).
	Role    bus.Role
	Members []bus.MemberView
}

// CanOwn reports whether the user may change members.
func (d workspaceData) CanOwn() bool { return d.Role.AtLeast(bus.RoleOwner) }

func (p *Portal) workspace(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showWorkspace(w, r, s, http.StatusOK, View{})
}

// WorkspaceCrumbs is the trail of a workspace's pages.
func WorkspaceCrumbs(ws bus.Workspace, page string) []Crumb {
	return []Crumb{{Label: "Workspaces", Href: Prefix}, {Label: ws.Name, Href: Prefix + "workspaces/" + url.PathEscape(ws.ID)}, {Label: page}}
}

func (p *Portal) showWorkspace(w http.ResponseWriter, r *http.Request, s *Session, status int, v View) error {
	id := r.PathValue("t")
	ws, err := p.svc.GetWorkspace(r.Context(), s.Actor, id)
	if err != nil {
		return err
	}
	members, err := p.svc.ListMembers(r.Context(), s.Actor, id)
	if err != nil {
		return err
	}
	v.Title, v.Section = ws.Name, "members"
	v.Crumbs = WorkspaceCrumbs(ws, "Members")
	v.Data = workspaceData{Workspace: ws, Role: s.Actor.Roles[ws.ID], Members: members}
	return p.render(w, r, s, status, "workspace", v)
}

// memberFail shows a refusal of a member form on the workspace page, or
// returns an internal error.
func (p *Portal) memberFail(w http.ResponseWriter, r *http.Request, s *Session, form string, err error) error {
	e, ok := bus.AsError(err)
	if !ok {
		return err
	}
	if e.Status == http.StatusForbidden || p.workspaceReadable(r, s) != nil {
		// Not theirs to change (or to see): the error page says so.
		return err
	}
	if e.Status == http.StatusNotFound && strings.HasPrefix(form, "member-") {
		// The member's row is gone (removed meanwhile, or never there):
		// the refusal goes above the list, where it can be seen.
		form = "members"
	}
	return p.showWorkspace(w, r, s, e.Status, View{Error: refusalText(e), ErrorForm: form, Form: r.PostForm})
}

// workspaceReadable is nil when the user may read the workspace of the
// request.
func (p *Portal) workspaceReadable(r *http.Request, s *Session) error {
	_, err := p.svc.GetWorkspace(r.Context(), s.Actor, r.PathValue("t"))
	return err
}

func (p *Portal) setMember(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws := r.PathValue("t")
	_, err := p.svc.SetMemberByEmail(r.Context(), s.Actor, ws, strings.TrimSpace(r.PostForm.Get("email")), bus.Role(r.PostForm.Get("role")))
	if err != nil {
		return p.memberFail(w, r, s, "add", err)
	}
	p.redirect(w, r, Prefix+"workspaces/"+url.PathEscape(ws), "member-set")
	return nil
}

func (p *Portal) changeMember(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws := r.PathValue("t")
	_, err := p.svc.ChangeMemberRole(r.Context(), s.Actor, ws, r.PathValue("u"), bus.Role(r.PostForm.Get("role")))
	if err != nil {
		return p.memberFail(w, r, s, "member-"+r.PathValue("u"), err)
	}
	p.redirect(w, r, Prefix+"workspaces/"+url.PathEscape(ws), "member-set")
	return nil
}

func (p *Portal) removeMember(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws := r.PathValue("t")
	if err := p.svc.RemoveMember(r.Context(), s.Actor, ws, r.PathValue("u")); err != nil {
		return p.memberFail(w, r, s, "member-"+r.PathValue("u"), err)
	}
	if r.PathValue("u") == s.Actor.User.ID && !s.Actor.User.Operator {
		// They left the workspace: its page is no longer theirs to see.
		p.redirect(w, r, Prefix, "member-removed")
		return nil
	}
	p.redirect(w, r, Prefix+"workspaces/"+url.PathEscape(ws), "member-removed")
	return nil
}

// --- my password

func (p *Portal) passwordPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.render(w, r, s, http.StatusOK, "password", View{Title: "Your password", Section: "password"})
}

// currentPasswordMatches checks the "current" password of the signed-in
// user as a sign-in does: within the failure limits (wait > 0 when they are
// reached), a wrong one counted as a failed sign-in, all while holding a
// password slot.
func (p *Portal) currentPasswordMatches(r *http.Request, s *Session) (wait time.Duration, ok bool, err error) {
	release, err := bus.AcquirePasswordWork(r.Context())
	if err != nil {
		return 0, false, err
	}
	defer release()
	key, addr := failureKey(s.Actor.User.Email), remoteHost(r)
	if wait, err = p.cfg.Failures.Blocked(r.Context(), key, addr); err != nil || wait > 0 {
		return wait, false, err
	}
	if ok, err = p.svc.PasswordMatches(r.Context(), s.Actor.User.ID, r.PostForm.Get("current")); err != nil || ok {
		return 0, ok, err
	}
	return 0, false, p.cfg.Failures.Failed(r.Context(), key, addr)
}

func (p *Portal) setPassword(w http.ResponseWriter, r *http.Request, s *Session) error {
	pw, again := r.PostForm.Get("password"), r.PostForm.Get("confirm")
	v := View{Title: "Your password", Section: "password", ErrorForm: "password"}
	// The current password first, so that a session left open does not
	// let another person take the account; wrong guesses count as failed
	// sign-ins.
	wait, ok, err := p.currentPasswordMatches(r, s)
	if err != nil {
		return err
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		v.Error = "Too many wrong passwords. Wait " + strconv.Itoa(int(wait.Seconds())) + " seconds, then try again."
		return p.render(w, r, s, http.StatusTooManyRequests, "password", v)
	}
	if !ok {
		v.Error = "Your current password is wrong. Nothing was changed."
		return p.render(w, r, s, http.StatusForbidden, "password", v)
	}
	if pw != again {
		v.Error = "The two passwords differ. Type the same new password twice."
		return p.render(w, r, s, http.StatusBadRequest, "password", v)
	}
	// Every session of the user ends, this one too (its cookie may have
	// been copied); this browser goes on in a new one.
	token, err := p.svc.SetOwnPasswordNewSession(r.Context(), s.Actor, pw)
	if err != nil {
		e, ok := bus.AsError(err)
		if !ok {
			return err
		}
		v.Error = refusalText(e)
		return p.render(w, r, s, e.Status, "password", v)
	}
	p.setCookie(w, sessionCookie, token, p.cfg.Sessions.Absolute)
	p.redirect(w, r, Prefix+"password", "password-set")
	return nil
}
