package httpapi_test

import (
	"net/url"
	"slices"
	"testing"
)

const globalAuditPath = "/v1/manage/audit"

// globalAudit reads the installation-wide audit log with key, page by page
// (limit entries a page), newest first.
func (n *node) globalAudit(t testing.TB, key string, limit string) ([]auditEntry, int) {
	t.Helper()
	var all []auditEntry
	cursor := ""
	for pages := 1; pages < 1000; pages++ {
		q := url.Values{"limit": {limit}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Entries    []auditEntry `json:"entries"`
			NextCursor *string      `json:"next_cursor"`
		}
		n.do(t, "GET", globalAuditPath+"?"+q.Encode(), key, nil).Must(t, 200).Decode(t, &page)
		all = append(all, page.Entries...)
		if page.NextCursor == nil {
			return all, pages
		}
		cursor = *page.NextCursor
	}
	t.Fatal("global audit paging does not end")
	return nil, 0
}

// TestGlobalAudit: operators read the entries that belong to no workspace
// (users and API keys), newest first and page by page; nobody else may.
func TestGlobalAudit(t *testing.T) {
	t.Parallel()
	n := start(t)
	opID := n.whoami(t, opKey)
	ws := n.workspace(t, opKey, "not global")
	adaID, adaKey := n.user(t, "Ada", false) // user.create, key.create
	n.member(t, ws, adaID, "owner")
	opsID, opsKey := n.user(t, "Second operator", true)

	all, pages := n.globalAudit(t, opKey, "100")
	if pages != 1 {
		t.Errorf("%d pages of 100 for %d entries", pages, len(all))
	}
	want := []string{"key.create", "user.create", "key.create", "user.create", "user.create"}
	if got := actions(all); !slices.Equal(got, want) {
		t.Fatalf("global audit = %v, want newest first %v", got, want)
	}
	if e := all[3]; e.Target != adaID || e.Actor != opID || e.Details["name"] != "Ada" {
		t.Errorf("user.create entry: %+v", e)
	}
	if e := all[0]; e.Target != opsID || e.Details["key_id"] == nil {
		t.Errorf("key.create entry: %+v", e)
	}
	if e := all[4]; e.Actor != "system" || e.Details["bootstrap"] != true {
		t.Errorf("the bootstrap operator's entry: %+v", e)
	}
	// Pages of one cover every entry once, in the same order.
	one, pages := n.globalAudit(t, opsKey, "1")
	if pages != len(all) || !slices.EqualFunc(one, all, func(a, b auditEntry) bool { return a.ID == b.ID }) {
		t.Errorf("pages of 1: %d pages, %v", pages, actions(one))
	}
	// The default page holds them all.
	var page struct {
		Entries []auditEntry `json:"entries"`
	}
	n.do(t, "GET", globalAuditPath, opKey, nil).Must(t, 200).Decode(t, &page)
	if len(page.Entries) != len(all) {
		t.Errorf("default page: %d entries, want %d", len(page.Entries), len(all))
	}

	// Ada owns a workspace but is no operator.
	msg := wantRefusal(t, n.do(t, "GET", globalAuditPath, adaKey, nil), 403, "manage.forbidden")
	wantMessage(t, msg, "operator")
	wantRefusal(t, n.do(t, "GET", globalAuditPath, "", nil), 401, "manage.unauthenticated")
	for _, q := range []string{"?limit=0", "?limit=101", "?cursor=bogus", "?cursor=" + all[0].ID + "x", "?workspace=" + ws, "?limit=1&limit=2"} {
		wantRefusal(t, n.do(t, "GET", globalAuditPath+q, opKey, nil), 400, "manage.bad_request")
	}
	// A workspace's entry is not a cursor of this listing.
	wsEntry := n.auditLog(t, ws)[0].ID
	wantRefusal(t, n.do(t, "GET", globalAuditPath+"?cursor="+wsEntry, opKey, nil), 400, "manage.bad_request")
	wantRefusal(t, n.do(t, "POST", globalAuditPath, opKey, nil), 405, "route.method_not_allowed")
}
