package portal

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sombus/sombus/internal/bus"
)

// View is what a page template sees.
type View struct {
	// Title names the page (the layout adds " · sombus").
	Title string
	// Section is the navigation entry to mark current ("workspaces",
	// "password").
	Section string
	// Session is the signed-in user, nil on the sign-in page.
	Session *Session
	// Crumbs lead from the workspaces list to this page.
	Crumbs []Crumb
	// Notice confirms what the last form did (set from ?done=).
	Notice string
	// Error is a refusal to show next to the form named ErrorForm.
	Error     string
	ErrorForm string
	// Form holds what was typed into the form that failed, to fill it in
	// again.
	Form url.Values
	// Data is the page's own data.
	Data any
}

// Crumb is one step of the breadcrumb trail; the last has no Href.
type Crumb struct {
	Label string
	Href  string
}

// notices are the confirmations a redirect may ask a page to show, by
// code: a code in the URL shows a fixed text, never text from the URL.
var notices = map[string]string{
	"signed-out":        "You are signed out.",
	"workspace-created": "Workspace created. You are its owner.",
	"member-set":        "Role saved.",
	"member-removed":    "Member removed.",
	"password-set":      "Password saved. Your other sessions were signed out.",
	// The connection pages.
	"connection-created":  "Connection created. Press Get client secret to give it credentials.",
	"connection-removed":  "Connection removed, with its queue and dead letters.",
	"connection-revoked":  "Connection revoked: its tokens stop working and it gets no new ones until restored.",
	"connection-restored": "Connection restored: it can get tokens again.",
	"previous-stopped":    "The old secret stopped working. Only the current secret gets tokens now.",
	"secret-revoked":      "Secret revoked: the connection has no working secret until you get a new one.",
	"redriven-0":          "Nothing to redrive: those dead letters were already gone.",
	"redriven-1":          "Redriven: the messages are back at the end of their stories, with their receive counts starting again.",
	"purged":              "Queue purged: every message waiting in it was dropped (dead letters stay).",
}

// templates holds one template set per page, each with the layout.
type templates struct {
	pages map[string]*template.Template
}

var funcs = template.FuncMap{
	// atLeast reports whether role is min or stronger.
	"atLeast": func(role bus.Role, min string) bool { return role.AtLeast(bus.Role(min)) },
	// when formats a time for people, in UTC.
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2 Jan 2006 15:04 UTC")
	},
	// iso formats a time for a <time datetime>.
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	// errFor is the view's error when it belongs to the form named.
	"errFor": func(v View, form string) string {
		if v.ErrorForm == form {
			return v.Error
		}
		return ""
	},
	// field is what was typed into a field of the form that failed, as
	// input shows it.
	"field": func(v View, name string) string { return shownInput(v.Form.Get(name)) },
	// input is a value from the request shown back in a field.
	"input": shownInput,
	// maxName and maxAttempts are the service's limits of a name and of an
	// attempt limit, for the forms' own checks.
	"maxName":     func() int { return bus.MaxNameLength },
	"maxAttempts": func() int { return bus.MaxAttemptLimit },
	// roles lists the roles, weakest first.
	"roles": func() []bus.Role { return []bus.Role{bus.RoleViewer, bus.RoleDeveloper, bus.RoleAdmin, bus.RoleOwner} },
	// pathEscape escapes one path segment.
	"pathEscape": url.PathEscape,
	// wsTabs is the data of the "wstabs" template: the workspace and the
	// current section.
	"wsTabs": func(ws bus.Workspace, section string) map[string]any {
		return map[string]any{"Workspace": ws, "Section": section}
	},
	// wsSections are the sections of a workspace's pages.
	"wsSections": func() []WorkspaceSection { return workspaceSections },
}

// WorkspaceSection is a tab of a workspace's pages.
type WorkspaceSection struct {
	// Key names the section (View.Section of its pages).
	Key   string
	Label string
	// Path follows /portal/workspaces/{id} ("" for the workspace's page).
	Path string
}

// workspaceSections are the tabs shown on every workspace page, in order.
var workspaceSections = []WorkspaceSection{
	{Key: "members", Label: "Members", Path: ""},
	{Key: "consumers", Label: "Consumers", Path: "/consumers"},
	{Key: "producers", Label: "Producers", Path: "/producers"},
	{Key: "audit", Label: "Audit log", Path: "/audit"},
}

// parseTemplates reads the layout and every page.
func parseTemplates() (*templates, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("portal layout: %w", err)
	}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	t := &templates{pages: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		c, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := c.ParseFS(templateFiles, n); err != nil {
			return nil, fmt.Errorf("portal page %s: %w", name, err)
		}
		t.pages[name] = c
	}
	return t, nil
}

// render writes page name with v and status.
func (p *Portal) render(w http.ResponseWriter, r *http.Request, s *Session, status int, name string, v View) error {
	t, ok := p.templates.pages[name]
	if !ok {
		return fmt.Errorf("portal: no page template %q", name)
	}
	v.Session = s
	if v.Notice == "" {
		v.Notice = notices[r.URL.Query().Get("done")]
	}
	if v.Form == nil {
		v.Form = url.Values{}
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("portal: render %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// errorPage is the data of the error page.
type errorPage struct {
	Message string
	Status  int
}

// renderError writes the error page.
func (p *Portal) renderError(w http.ResponseWriter, r *http.Request, s *Session, status int, title, message string) {
	err := p.render(w, r, s, status, "error", View{Title: title, Data: errorPage{Message: message, Status: status}})
	if err != nil {
		p.log.ErrorContext(r.Context(), "portal: render error page", "err", err)
		http.Error(w, message, status)
	}
}

// shownInput is a value from the request as a page shows it back in a
// field: bytes that are not UTF-8, and NUL, become U+FFFD (the template
// escapes the rest), so that nothing from outside reaches a page unchecked.
func shownInput(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// urlQueryEscape escapes a query value.
func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// safeNext reports whether next is a portal path to return to after
// signing in (never another site, never the sign-in or sign-out page).
// The checks hold for the path as it is written and as it is decoded,
// and no segment may be "." or "..", written or percent-encoded: the
// redirect tidies those away (and a browser decodes %2e), so
// /portal/../v1/... would leave the portal.
func safeNext(next string) bool {
	if !bus.PlainText(next) {
		return false
	}
	// What http.Redirect tidies: everything before the first "?", a
	// fragment included (/portal/#/../../v1 would become /v1).
	path := next
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	decoded, err := url.PathUnescape(path)
	if err != nil {
		return false
	}
	for _, seg := range strings.Split(decoded, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	for _, p := range []string{next, decoded} {
		if !strings.HasPrefix(p, Prefix) || strings.HasPrefix(p, "//") || strings.Contains(p, "\\") ||
			strings.HasPrefix(p, Prefix+"signin") || strings.HasPrefix(p, Prefix+"signout") ||
			strings.HasPrefix(p, Prefix+"static/") {
			return false
		}
	}
	return true
}
