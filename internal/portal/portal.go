// Package portal is sombus's web portal, served under /portal/: pages
// rendered on the server with html/template, every asset embedded in the
// binary, and no script needed for any action.
//
// The portal holds no business rules. Every page and button calls the same
// bus.Service methods as the management API, as the signed-in user (a
// bus.Actor), so the role checks, the validation and the audit entries are
// the API's; a button hidden from a role is refused by the bus anyway.
//
// # Sessions and forms
//
// A user signs in with email and password (bus.Service.SignIn) and gets a
// session cookie; the session lives in the store, so every node sharing the
// store knows it. Every request but the sign-in page and the static assets
// needs a live session (bus.Service.AuthenticateSession), and every POST
// needs the session's CSRF token in the form field "csrf" (compared in
// constant time); the sign-in form, before any session, carries a token
// that must match a cookie of its own.
//
// # Adding a page
//
// A page is a template file templates/NAME.html that defines "title" and
// "content" (the layout draws the header, the navigation and the notices),
// and a handler registered in routes with p.page (GET) or p.action (POST):
//
//	p.page("GET /portal/workspaces/{t}/things", p.things)
//
//	func (p *Portal) things(w http.ResponseWriter, r *http.Request, s *Session) error {
//		list, err := p.svc.Things(r.Context(), s.Actor, r.PathValue("t"))
//		if err != nil {
//			return err // a refusal becomes an error page with its status
//		}
//		return p.render(w, r, s, http.StatusOK, "things", View{Title: "Things", Data: list})
//	}
//
// A form posts to an action; on success the action redirects (p.redirect,
// with a notice code from the notices map) and on a refusal it renders its
// page again with the refusal in View.Error and View.ErrorForm naming the
// form, shown by {{template "formerror" (errFor . "NAME")}} next to it.
//
// A page of a workspace shows the workspace's tabs with
// {{template "wstabs" (wsTabs .Data.Workspace .Section)}} and its trail with
// WorkspaceCrumbs; a new tab is an entry of workspaceSections. Tables given
// the class "list stack-sm" and data-label on their cells become one card a
// row on phones. Every form carries
// <input type="hidden" name="csrf" value="{{.Session.CSRF}}">, and a button
// is drawn only for the roles that may use it (the bus refuses the others
// anyway).
package portal

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
	"github.com/sombus/sombus/internal/limits"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Prefix is where the portal is served.
const Prefix = "/portal/"

// Cookie names.
const (
	sessionCookie = "sombus_session"
	// signinCookie carries the sign-in form's CSRF token (there is no
	// session yet whose token could protect it).
	signinCookie = "sombus_signin"
)

// maxFormBytes bounds a form body.
const maxFormBytes = 64 << 10

// ContentSecurityPolicy is sent with every portal answer: only the portal's
// own scripts, styles and images, never framed, forms posting only to it.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// Config wires the portal to the rest of the server.
type Config struct {
	Service *bus.Service
	// Failures limits failed sign-ins per email and per address, as the
	// token endpoint limits failed secrets (nil: one kept in process).
	Failures auth.FailureLimiter
	// Secure marks the cookies Secure (TLS is on, or the public URL is
	// https).
	Secure bool
	// Sessions bounds sessions (zero fields: bus's defaults).
	Sessions bus.SessionPolicy
	Logger   *slog.Logger
	// TierNames are the quota tiers the create form offers (nil: only
	// "standard").
	TierNames []string
	// Usage reads a connection's requests today against its daily quota
	// (nil: the connection page does not show it).
	Usage func(ctx context.Context, c bus.Connection) (limits.Usage, error)
}

// Portal is the web portal, an http.Handler for the paths under Prefix.
type Portal struct {
	cfg       Config
	svc       *bus.Service
	log       *slog.Logger
	mux       *http.ServeMux
	templates *templates
}

// New builds the portal.
func New(cfg Config) (*Portal, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Failures == nil {
		cfg.Failures = auth.NewMemoryFailureLimiter(cfg.Service.Clock())
	}
	if cfg.Sessions.Idle <= 0 {
		cfg.Sessions.Idle = bus.DefaultSessionIdle
	}
	if cfg.Sessions.Absolute <= 0 {
		cfg.Sessions.Absolute = bus.DefaultSessionAbsolute
	}
	t, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	p := &Portal{cfg: cfg, svc: cfg.Service, log: cfg.Logger, mux: http.NewServeMux(), templates: t}
	p.routes()
	return p, nil
}

// Wrap serves the portal's paths (/portal and everything under /portal/)
// and passes every other request to next unchanged.
func (p *Portal) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/portal" || strings.HasPrefix(r.URL.Path, Prefix) {
			p.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves a portal path with the portal's headers.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if p.cfg.Secure {
		// Reached over HTTPS (TLS here, or an https public URL in front):
		// browsers are to keep to it, so that a session cookie is never
		// offered to a plain-HTTP page of the same host. No
		// includeSubDomains: the portal knows nothing of the others.
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
		h.Set("Cache-Control", "no-store")
	}
	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			p.log.ErrorContext(r.Context(), "portal panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			p.renderError(w, r, nil, http.StatusInternalServerError, "Something went wrong", "The portal hit an internal error. Try again; if it goes on, the operator finds the details in the server's log.")
		}
	}()
	if r.URL.Path == "/portal" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if !edge.CleanPath(r.URL.Path) {
		// Before the mux, which would redirect it (a form posted again).
		p.renderError(w, r, nil, http.StatusNotFound, "Page not found", "There is no portal page at this address.")
		return
	}
	h2, pattern := p.mux.Handler(r)
	if pattern == "" {
		// 404 and 405 become pages. (The mux redirects only an unclean
		// path, refused above, or one missing a subtree's trailing slash,
		// which names a route and is served below.)
		code, header := edge.Recorded(h2, r)
		switch code {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", header.Get("Allow"))
			p.renderError(w, r, nil, http.StatusMethodNotAllowed, "Not allowed", "This address does not take a "+r.Method+" request.")
		default:
			p.renderError(w, r, nil, http.StatusNotFound, "Page not found", "There is no portal page at this address.")
		}
		return
	}
	p.mux.ServeHTTP(w, r)
}

// Session is the signed-in user of a request.
type Session struct {
	Actor *bus.Actor
	// CSRF is the session's CSRF token, for the forms of the page.
	CSRF string
}

// handler serves a request of a signed-in user.
type handler func(w http.ResponseWriter, r *http.Request, s *Session) error

// page registers a GET handler for signed-in users.
func (p *Portal) page(pattern string, h handler) {
	p.mux.Handle(pattern, p.signedIn(h, false))
}

// action registers a POST handler for signed-in users; the form must
// carry the session's CSRF token.
func (p *Portal) action(pattern string, h handler) {
	p.mux.Handle(pattern, p.signedIn(h, true))
}

// signedIn authenticates the session cookie, checks the CSRF token of a
// form, and runs h; a missing or ended session goes to the sign-in page.
func (p *Portal) signedIn(h handler, form bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var token string
		if c, err := r.Cookie(sessionCookie); err == nil {
			token = c.Value
		}
		a, sess, err := p.svc.AuthenticateSession(r.Context(), token, p.cfg.Sessions)
		if err != nil {
			if e, ok := bus.AsError(err); ok && e.Status == http.StatusUnauthorized {
				if token != "" {
					p.clearCookie(w, sessionCookie)
				}
				p.toSignIn(w, r, token != "")
				return
			}
			p.fail(w, r, nil, err)
			return
		}
		s := &Session{Actor: a, CSRF: sess.CSRFToken}
		for _, name := range []string{"t", "c", "u"} {
			// An id no store could hold (not UTF-8, a control character)
			// is no workspace, connection or user: never sent to a store.
			if v := r.PathValue(name); v != "" && !bus.PlainText(v) {
				p.renderError(w, r, s, http.StatusNotFound, "Not found", "There is nothing at this address.")
				return
			}
		}
		if form {
			if !p.readForm(w, r, s) {
				return
			}
			if !tokensEqual(r.PostForm.Get("csrf"), sess.CSRFToken) {
				p.refuseCSRF(w, r, s)
				return
			}
		}
		if err := h(w, r, s); err != nil {
			p.fail(w, r, s, err)
		}
	})
}

// toSignIn sends a visitor without a live session to the sign-in page,
// coming back to the page they asked for (a GET) afterwards.
func (p *Portal) toSignIn(w http.ResponseWriter, r *http.Request, ended bool) {
	q := ""
	next := r.URL.Path
	if r.Method == http.MethodGet && next != Prefix && safeNext(next) {
		q = "?next=" + urlQueryEscape(next)
	}
	if ended {
		if q == "" {
			q = "?"
		} else {
			q += "&"
		}
		q += "ended=1"
	}
	http.Redirect(w, r, Prefix+"signin"+q, http.StatusSeeOther) //nolint:gosec // a portal path; next is checked by safeNext and escaped
}

// readForm parses a form body of at most maxFormBytes; false when it
// answered a refusal.
func (p *Portal) readForm(w http.ResponseWriter, r *http.Request, s *Session) bool {
	tooLarge, err := edge.ParseForm(w, r, maxFormBytes)
	if tooLarge {
		p.renderError(w, r, s, http.StatusRequestEntityTooLarge, "Form too large", "The form sent more than 64 KiB. Shorten what you typed and send it again.")
		return false
	}
	if slow, ok := errors.AsType[*edge.BodyTimeoutError](err); ok {
		p.renderError(w, r, s, http.StatusBadRequest, "Form too slow",
			"The form did not arrive within "+slow.Timeout.String()+", the longest a form may take to send, so nothing was changed. Send it again.")
		return false
	}
	if err != nil {
		p.renderError(w, r, s, http.StatusBadRequest, "Unreadable form", "The portal could not read the form that was sent. Reload the page and try again.")
		return false
	}
	return true
}

// refuseCSRF answers a form without the right CSRF token.
func (p *Portal) refuseCSRF(w http.ResponseWriter, r *http.Request, s *Session) {
	p.log.InfoContext(r.Context(), "portal form refused: missing or wrong CSRF token", "path", r.URL.Path)
	p.renderError(w, r, s, http.StatusForbidden, "Form refused",
		"This form did not come from your current portal page (its security token is missing or out of date), so nothing was changed. Go back, reload the page and send the form again.")
}

// tokensEqual compares a token in constant time; empty never matches.
func tokensEqual(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// setCookie sets a portal cookie.
func (p *Portal) setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	//nolint:gosec // Secure is on whenever the portal is reached over HTTPS (TLS or an https public URL)
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, HttpOnly: true, Secure: p.cfg.Secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(maxAge / time.Second)})
}

// clearCookie removes a portal cookie.
func (p *Portal) clearCookie(w http.ResponseWriter, name string) {
	//nolint:gosec // as in setCookie
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: Prefix, HttpOnly: true, Secure: p.cfg.Secure,
		SameSite: http.SameSiteLaxMode, MaxAge: -1})
}

// fail answers a handler's error: a refusal as an error page with its
// status; a store outage as 503; anything else as 500, logged.
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, s *Session, err error) {
	if e, ok := bus.AsError(err); ok {
		title := http.StatusText(e.Status)
		switch e.Status {
		case http.StatusNotFound:
			title = "Not found"
		case http.StatusForbidden:
			title = "Not allowed"
		}
		p.renderError(w, r, s, e.Status, title, refusalText(e))
		return
	}
	if errors.Is(err, bus.ErrUnavailable) {
		p.log.WarnContext(r.Context(), "portal: store unavailable", "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		p.renderError(w, r, s, http.StatusServiceUnavailable, "Try again shortly", "The store cannot be reached right now. Nothing was changed; try again in a moment.")
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p.log.ErrorContext(r.Context(), "portal error", "method", r.Method, "path", r.URL.Path, "err", err)
	p.renderError(w, r, s, http.StatusInternalServerError, "Something went wrong", "The portal hit an internal error. Try again; if it goes on, the operator finds the details in the server's log.")
}

// refusalText joins a refusal's messages, each escaped and cut as the API
// escapes and cuts them (a message quotes what was sent, up to a form's
// 64 KiB, bidirectional controls included).
func refusalText(e *bus.Error) string {
	msgs := make([]string, 0, len(e.Violations))
	for _, v := range e.Violations {
		msgs = append(msgs, bus.CutText(v.Message, bus.MaxRefusalBytes))
	}
	return strings.Join(msgs, " ")
}

// redirect answers a successful form with 303 See Other to path, with a
// notice code the page shows (see notices).
func (p *Portal) redirect(w http.ResponseWriter, r *http.Request, path, notice string) {
	if notice != "" {
		if strings.Contains(path, "?") {
			path += "&done=" + notice
		} else {
			path += "?done=" + notice
		}
	}
	http.Redirect(w, r, path, http.StatusSeeOther) //nolint:gosec // path is a portal path the handlers build, ids path-escaped
}

// static serves the embedded assets.
func (p *Portal) static() http.Handler {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the files themselves: no listing of the folder, and no
		// file server's plain 404 or redirect (of index.html).
		name := strings.TrimPrefix(r.URL.Path, Prefix+"static/")
		if info, err := fs.Stat(sub, name); err != nil || info.IsDir() || path.Base(name) == "index.html" {
			w.Header().Set("Cache-Control", "no-store")
			p.renderError(w, r, nil, http.StatusNotFound, "Page not found", "There is no portal page at this address.")
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
