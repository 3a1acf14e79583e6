package httpapi_test

import (
	"strings"
	"testing"
)

// TestNamesNeedAVisibleCharacter: a workspace's, user's or connection's
// name made only of invisible characters (a byte order mark, zero-width
// characters, direction marks, a soft hyphen) is 400 manage.bad_request
// naming the field, as a blank one is; a name with a visible character
// among invisible ones is taken.
func TestNamesNeedAVisibleCharacter(t *testing.T) {
	n := start(t)
	ws := n.workspace(t, opKey, "names")
	c := n.connection(t, ws, "consumer", nil)
	for _, blank := range []string{"\ufeff", "\u200b", "\u200e\u200f\u061c", "\u200b\u2060\ufeff\u00ad"} {
		msg := wantRefusal(t, n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": blank}), 400, "manage.bad_request")
		wantMessage(t, msg, "name", "visible character")
		msg = wantRefusal(t, n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": blank, "email": "blank@example.com"}), 400, "manage.bad_request")
		wantMessage(t, msg, "name", "visible character")
		msg = wantRefusal(t, n.do(t, "POST", connsPath(ws), opKey, map[string]any{"kind": "producer", "name": blank}), 400, "manage.bad_request")
		wantMessage(t, msg, "name", "visible character")
		msg = wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.ID), opKey, map[string]any{"name": blank}), 400, "manage.bad_request")
		wantMessage(t, msg, "name", "visible character")
		msg = wantRefusal(t, n.do(t, "PUT", connPath(ws, c.ID)+"/skills", opKey, map[string]any{"registrations": []map[string]any{
			{"instance_id": "i", "skill": "s", "name": blank, "values": map[string]any{}, "authority_scale": 1}}}), 400, "manage.bad_request")
		wantMessage(t, msg, "registrations[0].name", "visible character")
	}
	// Blank as before: "is required".
	msg := wantRefusal(t, n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": "\u3000"}), 400, "manage.bad_request")
	wantMessage(t, msg, "name is required")
	n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": "\u200bx\u200d"}).Must(t, 201)
}

// TestEmailsThatLookAlikeAreRefused: next to a user x@example.com, a new
// user whose email reads the same (a line separator after it, a byte order
// mark or a right-to-left mark inside) is 400 manage.bad_request naming the
// field and the character, not a second user.
func TestEmailsThatLookAlikeAreRefused(t *testing.T) {
	n := start(t)
	n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": "X", "email": "x@example.com"}).Must(t, 201)
	for email, char := range map[string]string{
		"x@example.com\u2028":       "U+2028",
		"x\ufeff@example.com":       "U+FEFF",
		"bi\u200fdi@example.com":    "U+200F",
		"x\u00a0@example.com":       "U+00A0",
		"x\u200b@example.com":       "U+200B",
		"x@example.com\u2060\u00ad": "U+2060",
	} {
		msg := wantRefusal(t, n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": "X", "email": email}), 400, "manage.bad_request")
		wantMessage(t, msg, "email must not hold white space, control or format characters", char)
	}
}

// TestRefusalsEscapeBidiControls: a refusal quoting an id of the path that
// holds a bidirectional override or another format character shows it
// escaped (\u202e), never the character itself, which would reorder the
// message's own text after it.
func TestRefusalsEscapeBidiControls(t *testing.T) {
	n := start(t)
	ws := n.workspace(t, opKey, "escapes")
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/manage/workspaces/%E2%80%AE", `Workspace \u202e not found.`},
		{"GET", "/v1/manage/workspaces/w%E2%81%A7x%E2%80%8B", `Workspace w\u2067x\u200b not found.`},
		{"GET", connsPath(ws) + "/c%E2%80%AEfdp.exe", `Connection c\u202efdp.exe not found`},
		{"PUT", "/v1/manage/workspaces/" + ws + "/members/%E2%80%AE", `\u202e`},
		{"DELETE", "/v1/manage/workspaces/" + ws + "/members/u%EF%BB%BF%E2%80%AE", `u\ufeff\u202e`},
	} {
		var body any
		if tc.method == "PUT" {
			body = map[string]any{"role": "viewer"}
		}
		r := n.do(t, tc.method, tc.path, opKey, body)
		msg := wantRefusal(t, r, 404, "manage.not_found")
		wantMessage(t, msg, tc.want)
		if strings.ContainsAny(msg, "\u202e\u2067\u200b\ufeff") || strings.ContainsAny(string(r.Body), "\u202e\u2067\u200b\ufeff") {
			t.Errorf("%s %s: the refusal holds a format character: %+q", tc.method, tc.path, r.Body)
		}
	}
}
