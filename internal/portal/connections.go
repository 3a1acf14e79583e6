package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
)

// The connection pages: the consumer and producer lists, a page per
// connection (secret, status, removal, queue picture, skills, usage), its
// dead letters, and the workspace's audit log. Every button calls the bus
// method the management API calls, as the signed-in user.

// connectionRoutes registers the connection pages.
func (p *Portal) connectionRoutes() {
	ws := "/portal/workspaces/{t}"
	conn := ws + "/connections/{c}"
	p.page("GET "+ws+"/consumers", p.consumersPage)
	p.page("GET "+ws+"/producers", p.producersPage)
	p.action("POST "+ws+"/connections", p.createConnection)
	p.page("GET "+conn, p.connectionPage)
	p.action("POST "+conn+"/secret", p.issueSecret)
	p.action("POST "+conn+"/rotate", p.rotateSecret)
	p.action("POST "+conn+"/stop-previous", p.stopPrevious)
	p.action("POST "+conn+"/revoke-secret", p.revokeSecret)
	p.action("POST "+conn+"/revoke", p.revokeConnection)
	p.action("POST "+conn+"/restore", p.restoreConnection)
	p.action("POST "+conn+"/remove", p.removeConnection)
	p.page("GET "+conn+"/dead-letters", p.deadLettersPage)
	p.action("POST "+conn+"/dead-letters/redrive", p.redrive)
	p.action("POST "+conn+"/purge", p.purge)
	p.page("GET "+ws+"/audit", p.auditPage)
}

// listPageSize is how many connections, dead letters or audit entries a
// page shows.
const listPageSize = 50

func wsPath(ws string) string      { return Prefix + "workspaces/" + url.PathEscape(ws) }
func connPath(ws, c string) string { return wsPath(ws) + "/connections/" + url.PathEscape(c) }

// --- lists

// connectionsData is a connection list's data.
type connectionsData struct {
	Workspace   bus.Workspace
	Role        bus.Role
	Kind        bus.ConnectionKind
	Connections []bus.ConnectionView
	NextCursor  string
	Tiers       []string
}

// CanAdmin reports whether the user may create connections.
func (d connectionsData) CanAdmin() bool { return d.Role.AtLeast(bus.RoleAdmin) }

// Consumer reports whether the list is of consumers.
func (d connectionsData) Consumer() bool { return d.Kind == bus.KindConsumer }

func (p *Portal) consumersPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showConnections(w, r, s, bus.KindConsumer, http.StatusOK, View{})
}

func (p *Portal) producersPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showConnections(w, r, s, bus.KindProducer, http.StatusOK, View{})
}

func kindLabel(k bus.ConnectionKind) string {
	if k == bus.KindProducer {
		return "Producer connections"
	}
	return "Consumer connections"
}

func (p *Portal) showConnections(w http.ResponseWriter, r *http.Request, s *Session, kind bus.ConnectionKind, status int, v View) error {
	id := r.PathValue("t")
	ws, err := p.svc.GetWorkspace(r.Context(), s.Actor, id)
	if err != nil {
		return err
	}
	page, err := p.svc.ListConnections(r.Context(), s.Actor, id, kind, listPageSize, r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	d := connectionsData{Workspace: ws, Role: s.Actor.Roles[ws.ID], Kind: kind, Connections: page.Connections}
	if page.NextCursor != nil {
		d.NextCursor = *page.NextCursor
	}
	// Only the tiers this user may assign: one kept for operators would be
	// refused, and the refusal's page would lose what was typed.
	for _, name := range p.cfg.TierNames {
		if p.svc.MayAssignTier(s.Actor, name) {
			d.Tiers = append(d.Tiers, name)
		}
	}
	if len(d.Tiers) == 0 {
		d.Tiers = []string{limits.StandardTier}
	}
	label := kindLabel(kind)
	v.Title, v.Section, v.Data = label+" · "+ws.Name, string(kind)+"s", d
	v.Crumbs = WorkspaceCrumbs(ws, label)
	return p.render(w, r, s, status, "connections", v)
}

// formInt reads an optional whole number of a form; nil when empty.
func formInt(form url.Values, name string) (*int, error) {
	v := strings.TrimSpace(form.Get(name))
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if errors.Is(err, strconv.ErrRange) {
		// A whole number, only out of any range: the bus's check says which
		// range (Atoi gives the nearest int).
		err = nil
	}
	if err != nil {
		return nil, bus.Errorf(bus.RuleManageBadRequest, "%s must be a whole number.", strings.ReplaceAll(name, "_", " "))
	}
	return &n, nil
}

func (p *Portal) createConnection(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws := r.PathValue("t")
	// The kind goes to the bus as sent, which refuses any but the two (the
	// form offers no other); a refusal shows the consumers' page unless the
	// form was the producers'.
	kind := bus.ConnectionKind(r.PostForm.Get("kind"))
	page := bus.KindConsumer
	if kind == bus.KindProducer {
		page = bus.KindProducer
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	params := bus.ConnectionParams{Kind: &kind, Name: &name}
	if tier := strings.TrimSpace(r.PostForm.Get("quota_tier")); tier != "" {
		params.QuotaTier = &tier
	}
	limit, err := formInt(r.PostForm, "attempt_limit")
	if err == nil && kind == bus.KindConsumer {
		params.AttemptLimit = limit
		subs := []bus.Subscription{}
		for _, line := range strings.Split(r.PostForm.Get("subscriptions"), "\n") {
			if topic := strings.TrimSpace(line); topic != "" {
				subs = append(subs, bus.Subscription{Topic: topic})
			}
		}
		params.Subscriptions = &subs
	}
	var c bus.ConnectionView
	if err == nil {
		c, err = p.svc.CreateConnection(r.Context(), s.Actor, ws, params)
	}
	if err != nil {
		e, ok := bus.AsError(err)
		if !ok || e.Status == http.StatusForbidden || p.workspaceReadable(r, s) != nil {
			return err
		}
		return p.showConnections(w, r, s, page, e.Status, View{Error: refusalText(e), ErrorForm: "create", Form: r.PostForm})
	}
	p.redirect(w, r, connPath(ws, c.ID), "connection-created")
	return nil
}

// --- one connection

// connectionData is a connection page's data.
type connectionData struct {
	Workspace  bus.Workspace
	Role       bus.Role
	Connection bus.ConnectionView
	Skills     *bus.Skills
	Usage      *limits.Usage
	Chart      *queueChart
	// Issued is a secret just issued or rotated: shown this once.
	Issued   *bus.SecretIssued
	Commands []command
	Overlaps []overlapChoice
}

// command is a labelled shell command of the secret panel.
type command struct {
	ID, Label, Text string
}

// overlapChoice is an option of the rotate form.
type overlapChoice struct {
	Value, Label string
}

// overlapChoices are the rotate form's options, the default first.
var overlapChoices = []overlapChoice{
	{"24h", "24 hours"}, {"3d", "3 days"}, {"1h", "1 hour"}, {"none", "None: the old secret stops at once"},
}

// CanDevelop reports whether the user may change the connection's secret.
func (d connectionData) CanDevelop() bool { return d.Role.AtLeast(bus.RoleDeveloper) }

// CanAdmin reports whether the user may revoke, restore, remove and purge.
func (d connectionData) CanAdmin() bool { return d.Role.AtLeast(bus.RoleAdmin) }

// Consumer reports whether the connection is a consumer.
func (d connectionData) Consumer() bool { return d.Connection.Kind == bus.KindConsumer }

// UsagePercent is today's share of the daily quota, 0 to 100.
func (d connectionData) UsagePercent() int {
	if d.Usage == nil || d.Usage.Unlimited || d.Usage.DailyQuota <= 0 {
		return 0
	}
	return int(min(100, d.Usage.RequestsToday*100/d.Usage.DailyQuota))
}

func (p *Portal) connectionPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showConnection(w, r, s, http.StatusOK, View{}, nil)
}

// showConnection renders a connection's page, with a just issued secret
// when issued is not nil.
func (p *Portal) showConnection(w http.ResponseWriter, r *http.Request, s *Session, status int, v View, issued *bus.SecretIssued) error {
	ctx := r.Context()
	wsID, id := r.PathValue("t"), r.PathValue("c")
	ws, err := p.svc.GetWorkspace(ctx, s.Actor, wsID)
	if err != nil {
		return err
	}
	c, err := p.svc.GetConnection(ctx, s.Actor, wsID, id)
	if err != nil {
		return err
	}
	d := connectionData{Workspace: ws, Role: s.Actor.Roles[ws.ID], Connection: c, Issued: issued, Overlaps: overlapChoices}
	if issued != nil {
		d.Commands = pullCommands(*issued, c.Kind)
	}
	if c.Kind == bus.KindConsumer {
		sk, err := p.svc.GetSkills(ctx, s.Actor, wsID, id)
		if err != nil {
			return err
		}
		d.Skills = &sk
		now := p.svc.Clock().Now()
		window := r.URL.Query().Get("window")
		if _, ok := chartWindows[window]; !ok {
			window = "1h"
		}
		samples, err := p.svc.QueueHistory(ctx, s.Actor, wsID, id, now.Add(-chartWindows[window]))
		if err != nil {
			return err
		}
		ch := newQueueChart("queue-chart", samples, now, window, p.svc.SampleEvery())
		d.Chart = &ch
	}
	if p.cfg.Usage != nil {
		conn, err := p.svc.ConnectionOf(ctx, s.Actor, wsID, id, bus.RoleViewer)
		if err != nil {
			return err
		}
		u, err := p.cfg.Usage(ctx, conn)
		if err != nil {
			p.log.WarnContext(ctx, "portal: read usage", "connection_id", id, "err", err)
		} else {
			d.Usage = &u
		}
	}
	v.Title, v.Section, v.Data = c.Name+" · "+ws.Name, string(c.Kind)+"s", d
	v.Crumbs = []Crumb{{Label: "Workspaces", Href: Prefix}, {Label: ws.Name, Href: wsPath(ws.ID)},
		{Label: kindLabel(c.Kind), Href: wsPath(ws.ID) + "/" + string(c.Kind) + "s"}, {Label: c.Name}}
	return p.render(w, r, s, status, "connection", v)
}

// pullCommands are the curl commands of the pull API (consumers) or of
// publishing (producers), filled in with a just issued secret.
func pullCommands(is bus.SecretIssued, kind bus.ConnectionKind) []command {
	token := fmt.Sprintf(`TOKEN=$(curl -s %s \
  -u '%s:%s' -d grant_type=client_credentials | jq -r .access_token)`, is.TokenURL, is.ClientID, is.ClientSecret)
	cmds := []command{{ID: "cmd-token", Label: "Get an access token", Text: token}}
	if kind == bus.KindProducer {
		return append(cmds, command{ID: "cmd-publish", Label: "Publish a message", Text: fmt.Sprintf(`curl -s -X POST %s \
  -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"som_version":"1.0.0","message_id":"m-1","message_type":"example.hello","correlation_id":"c-1","payload":{}}'`, is.MessagesURL)})
	}
	return append(cmds,
		command{ID: "cmd-receive", Label: "Receive messages (waits up to 20 seconds)", Text: fmt.Sprintf(`curl -s "%s?max=10&wait=20" -H "Authorization: Bearer $TOKEN"`, is.MessagesURL)},
		command{ID: "cmd-ack", Label: "Acknowledge what you handled", Text: fmt.Sprintf(`curl -s -X POST %s -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d '{"receipt_handles":["<receipt_handle>"]}'`, is.AckURL)},
		command{ID: "cmd-nack", Label: "Release what you could not handle", Text: fmt.Sprintf(`curl -s -X POST %s -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d '{"receipt_handles":["<receipt_handle>"],"delay_seconds":30}'`, is.NackURL)},
		command{ID: "cmd-skills", Label: "Read your skill registrations", Text: fmt.Sprintf(`curl -s %s -H "Authorization: Bearer $TOKEN"`, is.SkillsURL)},
	)
}

// connectionFail shows a refusal of a form on the connection's page, or
// returns the error for the error page (a refusal the user may not even
// see the page of, or an internal error).
func (p *Portal) connectionFail(w http.ResponseWriter, r *http.Request, s *Session, form string, err error) error {
	e, ok := bus.AsError(err)
	if !ok || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound {
		return err
	}
	msg := refusalText(e)
	if e.Status == http.StatusConflict && (form == "secret" || form == "rotate") {
		// The usual way here is this page's own form sent twice (a reload
		// of the page that showed the secret, a second click): the first
		// answer showed the secret, which is not kept.
		msg += " If this page was sent twice and you did not see the new secret, rotate the secret to get another one."
	}
	return p.showConnection(w, r, s, e.Status, View{Error: msg, ErrorForm: form, Form: r.PostForm}, nil)
}

func (p *Portal) issueSecret(w http.ResponseWriter, r *http.Request, s *Session) error {
	is, err := p.svc.IssueSecret(r.Context(), s.Actor, r.PathValue("t"), r.PathValue("c"))
	if err != nil {
		return p.connectionFail(w, r, s, "secret", err)
	}
	return p.showConnection(w, r, s, http.StatusOK, View{Notice: "New client secret issued. Copy it now: it is shown only this once."}, &is)
}

func (p *Portal) rotateSecret(w http.ResponseWriter, r *http.Request, s *Session) error {
	// The form names the version it rotates from, so that sending it again
	// (a reload of the page that shows the new secret) rotates nothing.
	var from int64
	if v := r.PostForm.Get("version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return p.connectionFail(w, r, s, "rotate", bus.Errorf(bus.RuleManageBadRequest, "version must be a credential version (a positive integer)."))
		}
		from = n
	}
	is, err := p.svc.RotateSecretFrom(r.Context(), s.Actor, r.PathValue("t"), r.PathValue("c"), r.PostForm.Get("overlap"), from)
	if err != nil {
		return p.connectionFail(w, r, s, "rotate", err)
	}
	return p.showConnection(w, r, s, http.StatusOK, View{Notice: "Secret rotated. Copy the new secret now: it is shown only this once."}, &is)
}

// connectionChange runs a change of the connection and goes back to its
// page with a notice.
func (p *Portal) connectionChange(w http.ResponseWriter, r *http.Request, s *Session, form, notice string, fn func(ctx context.Context, ws, id string) error) error {
	ws, id := r.PathValue("t"), r.PathValue("c")
	if err := fn(r.Context(), ws, id); err != nil {
		return p.connectionFail(w, r, s, form, err)
	}
	p.redirect(w, r, connPath(ws, id), notice)
	return nil
}

func (p *Portal) stopPrevious(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.connectionChange(w, r, s, "stop-previous", "previous-stopped", func(ctx context.Context, ws, id string) error {
		_, err := p.svc.StopPreviousSecret(ctx, s.Actor, ws, id)
		return err
	})
}

func (p *Portal) revokeSecret(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.connectionChange(w, r, s, "revoke-secret", "secret-revoked", func(ctx context.Context, ws, id string) error {
		_, err := p.svc.RevokeSecret(ctx, s.Actor, ws, id)
		return err
	})
}

func (p *Portal) revokeConnection(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.connectionChange(w, r, s, "status", "connection-revoked", func(ctx context.Context, ws, id string) error {
		_, err := p.svc.SetConnectionStatus(ctx, s.Actor, ws, id, bus.StatusRevoked)
		return err
	})
}

func (p *Portal) restoreConnection(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.connectionChange(w, r, s, "status", "connection-restored", func(ctx context.Context, ws, id string) error {
		_, err := p.svc.SetConnectionStatus(ctx, s.Actor, ws, id, bus.StatusActive)
		return err
	})
}

func (p *Portal) removeConnection(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws, id := r.PathValue("t"), r.PathValue("c")
	c, err := p.svc.ConnectionOf(r.Context(), s.Actor, ws, id, bus.RoleAdmin)
	if err != nil {
		return err
	}
	if r.PostForm.Get("confirm_name") != c.Name {
		return p.showConnection(w, r, s, http.StatusBadRequest, View{ErrorForm: "remove", Form: r.PostForm,
			Error: fmt.Sprintf("Type the connection's name, %q, exactly to confirm; nothing was removed.", c.Name)}, nil)
	}
	if err := p.svc.RemoveConnection(r.Context(), s.Actor, ws, id); err != nil {
		return p.connectionFail(w, r, s, "remove", err)
	}
	p.redirect(w, r, wsPath(ws)+"/"+string(c.Kind)+"s", "connection-removed")
	return nil
}

// --- dead letters

// deadLettersData is the dead-letter page's data.
type deadLettersData struct {
	Workspace   bus.Workspace
	Role        bus.Role
	Connection  bus.ConnectionView
	DeadLetters []deadLetterRow
	NextCursor  string
	First       bool
}

// deadLetterRow is a dead letter with its envelope pretty-printed.
type deadLetterRow struct {
	bus.DeadLetter
	Pretty string
}

// CanDevelop reports whether the user may redrive.
func (d deadLettersData) CanDevelop() bool { return d.Role.AtLeast(bus.RoleDeveloper) }

// CanAdmin reports whether the user may purge.
func (d deadLettersData) CanAdmin() bool { return d.Role.AtLeast(bus.RoleAdmin) }

func (p *Portal) deadLettersPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	return p.showDeadLetters(w, r, s, http.StatusOK, View{})
}

func (p *Portal) showDeadLetters(w http.ResponseWriter, r *http.Request, s *Session, status int, v View) error {
	ctx := r.Context()
	wsID, id := r.PathValue("t"), r.PathValue("c")
	ws, err := p.svc.GetWorkspace(ctx, s.Actor, wsID)
	if err != nil {
		return err
	}
	cursor := r.URL.Query().Get("cursor")
	page, err := p.svc.ListDeadLetters(ctx, s.Actor, wsID, id, listPageSize, cursor)
	if err != nil {
		return err
	}
	c, err := p.svc.GetConnection(ctx, s.Actor, wsID, id)
	if err != nil {
		return err
	}
	d := deadLettersData{Workspace: ws, Role: s.Actor.Roles[ws.ID], Connection: c, First: cursor == ""}
	for _, dl := range page.DeadLetters {
		d.DeadLetters = append(d.DeadLetters, deadLetterRow{DeadLetter: dl, Pretty: prettyJSON(dl.Envelope)})
	}
	if page.NextCursor != nil {
		d.NextCursor = *page.NextCursor
	}
	v.Title, v.Section, v.Data = "Dead letters of "+c.Name, "consumers", d
	v.Crumbs = []Crumb{{Label: "Workspaces", Href: Prefix}, {Label: ws.Name, Href: wsPath(ws.ID)},
		{Label: kindLabel(c.Kind), Href: wsPath(ws.ID) + "/consumers"}, {Label: c.Name, Href: connPath(ws.ID, c.ID)}, {Label: "Dead letters"}}
	return p.render(w, r, s, status, "deadletters", v)
}

// prettyJSON indents a JSON document as the producer wrote it: members in
// their order, numbers in their own digits (decoding into Go values would
// sort the members and round big numbers). Other bytes come back as they
// are.
func prettyJSON(raw []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return string(raw)
	}
	return out.String()
}

func (p *Portal) deadLetterFail(w http.ResponseWriter, r *http.Request, s *Session, form string, err error) error {
	e, ok := bus.AsError(err)
	if !ok || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound {
		return err
	}
	return p.showDeadLetters(w, r, s, e.Status, View{Error: refusalText(e), ErrorForm: form})
}

func (p *Portal) redrive(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws, id := r.PathValue("t"), r.PathValue("c")
	var ids []string // nil: all
	switch {
	case r.PostForm.Get("all") == "1":
	case r.PostForm.Get("message_id") != "":
		ids = []string{r.PostForm.Get("message_id")}
	default:
		ids = r.PostForm["message_ids"]
		if len(ids) == 0 {
			return p.deadLetterFail(w, r, s, "redrive", bus.Errorf(bus.RuleManageBadRequest, "Select the dead letters to redrive first, or press Redrive all."))
		}
	}
	n, err := p.svc.Redrive(r.Context(), s.Actor, ws, id, ids)
	if err != nil {
		return p.deadLetterFail(w, r, s, "redrive", err)
	}
	p.redirect(w, r, connPath(ws, id)+"/dead-letters", "redriven-"+strconv.Itoa(min(n, 1)))
	return nil
}

func (p *Portal) purge(w http.ResponseWriter, r *http.Request, s *Session) error {
	ws, id := r.PathValue("t"), r.PathValue("c")
	if _, err := p.svc.Purge(r.Context(), s.Actor, ws, id); err != nil {
		return p.deadLetterFail(w, r, s, "purge", err)
	}
	p.redirect(w, r, connPath(ws, id), "purged")
	return nil
}

// --- audit log

// auditData is the audit page's data.
type auditData struct {
	Workspace   bus.Workspace
	Entries     []auditRow
	Members     []bus.MemberView
	Connections []bus.ConnectionView
	Actions     []string
	Filter      url.Values
	NextCursor  string
	First       bool
}

// auditRow is an audit entry with names for its ids.
type auditRow struct {
	bus.AuditEntry
	ActorName  string
	TargetName string
	Details    string
}

// NextHref is the link to the next page: the filters and the cursor.
func (d auditData) NextHref() template.URL {
	q := url.Values{}
	for k, v := range d.Filter {
		if k != "cursor" && len(v) > 0 && v[0] != "" {
			q.Set(k, v[0])
		}
	}
	q.Set("cursor", d.NextCursor)
	return template.URL("?" + q.Encode()) //nolint:gosec // a query of encoded values, relative to this page
}

// auditActions are the actions the bus writes, for the action filter.
var auditActions = []string{
	"workspace.create", "member.set", "member.remove", "connection.create", "connection.update", "connection.remove",
	"connection.revoke", "connection.restore", "secret.issue", "secret.rotate", "secret.stop_previous", "secret.revoke",
	"skills.update", "dead_letters.redrive", "queue.purge",
}

// parseDay reads a form date (YYYY-MM-DD, a UTC day) or date and time.
func parseDay(field, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, bus.Errorf(bus.RuleManageBadRequest, "%s must be a date (YYYY-MM-DD) or a date and time (YYYY-MM-DDTHH:MM), in UTC.", field)
}

func (p *Portal) auditPage(w http.ResponseWriter, r *http.Request, s *Session) error {
	ctx := r.Context()
	wsID := r.PathValue("t")
	ws, err := p.svc.GetWorkspace(ctx, s.Actor, wsID)
	if err != nil {
		return err
	}
	// Admins only, whatever the filter: a viewer must not get the page
	// (its form and the workspace's names) by a date it cannot parse.
	if err := p.svc.RequireRole(ctx, s.Actor, wsID, bus.RoleAdmin); err != nil {
		return err
	}
	q := r.URL.Query()
	f := bus.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("connection")}
	v := View{Title: "Audit log · " + ws.Name, Section: "audit", Crumbs: WorkspaceCrumbs(ws, "Audit log"), ErrorForm: "filter"}
	status := http.StatusOK
	d := auditData{Workspace: ws, Actions: auditActions, Filter: q, First: q.Get("cursor") == ""}
	var to time.Time
	f.From, err = parseDay("from", q.Get("from"))
	if err == nil {
		to, err = parseDay("to", q.Get("to"))
		if err == nil && !to.IsZero() && len(strings.TrimSpace(q.Get("to"))) == len("2006-01-02") {
			to = to.Add(24 * time.Hour) // a day "to" includes that day
		}
		f.To = to
	}
	var page bus.AuditPage
	if err == nil {
		page, err = p.svc.SearchAudit(ctx, s.Actor, wsID, f, listPageSize, q.Get("cursor"))
	}
	if err != nil {
		e, ok := bus.AsError(err)
		if !ok || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound {
			return err
		}
		v.Error, status = refusalText(e), e.Status
	}
	members, err := p.svc.ListMembers(ctx, s.Actor, wsID)
	if err != nil {
		return err
	}
	d.Members = members
	names := map[string]string{}
	for _, m := range members {
		names[m.UserID] = m.Name
	}
	conns, err := p.svc.ListConnections(ctx, s.Actor, wsID, "", bus.MaxAuditPage, "")
	if err != nil {
		return err
	}
	d.Connections = conns.Connections
	for _, c := range conns.Connections {
		names[c.ID] = c.Name
	}
	for _, e := range page.Entries {
		var details strings.Builder
		enc := json.NewEncoder(&details)
		enc.SetEscapeHTML(false) // the page escapes; "som.>" stays readable
		_ = enc.Encode(e.Details)
		d.Entries = append(d.Entries, auditRow{AuditEntry: e, ActorName: names[e.Actor], TargetName: names[e.Target],
			Details: strings.TrimSpace(details.String())})
	}
	if page.NextCursor != nil {
		d.NextCursor = *page.NextCursor
	}
	v.Data = d
	return p.render(w, r, s, status, "audit", v)
}

func init() {
	// age formats a number of seconds for people: "45 s", "12 min", "3 h".
	funcs["age"] = func(sec float64) string {
		switch {
		case sec <= 0:
			return "—"
		case sec < 90:
			return strconv.Itoa(int(sec+0.5)) + " s"
		case sec < 90*60:
			return strconv.Itoa(int(sec/60+0.5)) + " min"
		case sec < 48*3600:
			return strconv.Itoa(int(sec/3600+0.5)) + " h"
		default:
			return strconv.Itoa(int(sec/86400+0.5)) + " d"
		}
	}
	// topics joins a connection's subscription topics, one a line.
	funcs["topics"] = func(subs []bus.Subscription) string {
		out := make([]string, 0, len(subs))
		for _, s := range subs {
			out = append(out, s.Topic)
		}
		return strings.Join(out, "\n")
	}
}
