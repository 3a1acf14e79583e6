package httpapi_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

func passwordPath(userID string) string { return "/v1/manage/users/" + userID + "/password" }

// TestSetPassword: operators set any user's portal password, users their
// own; the password is checked, kept only as a hash, and audited without
// itself.
func TestSetPassword(t *testing.T) {
	t.Parallel()
	n := start(t)
	opID := n.whoami(t, opKey)
	adaID, adaKey := n.user(t, "Ada", false)
	const pw = "a long enough secret phrase"

	if r := n.do(t, "PUT", passwordPath(adaID), opKey, map[string]any{"password": pw}); r.Status != 204 {
		t.Fatalf("operator sets Ada's password: %d %s", r.Status, r.Body)
	}
	if r := n.do(t, "PUT", passwordPath(adaID), adaKey, map[string]any{"password": "Ada's own new password"}); r.Status != 204 {
		t.Fatalf("Ada sets her own: %d %s", r.Status, r.Body)
	}
	wantRefusal(t, n.do(t, "PUT", passwordPath(opID), adaKey, map[string]any{"password": pw}), 403, bus.RuleManageForbidden)
	wantRefusal(t, n.do(t, "PUT", passwordPath("u00000000000000000000000000"), opKey, map[string]any{"password": pw}), 404, bus.RuleManageNotFound)
	wantRefusal(t, n.do(t, "PUT", passwordPath(adaID), "", map[string]any{"password": pw}), 401, bus.RuleManageUnauthenticated)

	for name, tc := range map[string]struct {
		body  any
		words []string
	}{
		"missing":    {map[string]any{}, []string{"password", "required"}},
		"short":      {map[string]any{"password": "elevenchars"}, []string{"password", "12 characters"}},
		"long":       {map[string]any{"password": strings.Repeat("é", 513)}, []string{"password", "1024 bytes"}},
		"not text":   {map[string]any{"password": 123456789012}, []string{"password"}},
		"line break": {map[string]any{"password": "éééééééééééé\n"}, []string{"password", "control characters"}},
		"tab":        {map[string]any{"password": "ééééé\tééééééé"}, []string{"password", "control characters"}},
		"NUL":        {map[string]any{"password": "éééééééééééé\u0000"}, []string{"password", "control characters"}},
		"C1":         {map[string]any{"password": "éééééééééééé\u0085"}, []string{"password", "control characters"}},
		"unknown":    {map[string]any{"password": pw, "hint": "x"}, []string{"hint"}},
		"null body":  {nil, nil},
	} {
		msg := wantRefusal(t, n.do(t, "PUT", passwordPath(adaID), opKey, tc.body), 400, bus.RuleManageBadRequest)
		wantMessage(t, msg, tc.words...)
		if strings.Contains(msg, "é") {
			t.Errorf("%s: the refusal repeats the password", name)
		}
	}
	// 12 characters of 2 bytes each are 24 bytes: characters count.
	if r := n.do(t, "PUT", passwordPath(adaID), opKey, map[string]any{"password": strings.Repeat("é", 12)}); r.Status != 204 {
		t.Fatalf("12 two-byte characters: %d %s", r.Status, r.Body)
	}

	all, _ := n.globalAudit(t, opKey, "100")
	var sets []auditEntry
	for _, e := range all {
		if e.Action == "user.password_set" {
			sets = append(sets, e)
		}
	}
	if len(sets) != 3 {
		t.Fatalf("%d user.password_set entries, want 3 (refusals write none)", len(sets))
	}
	if e := sets[2]; e.Actor != opID || e.Target != adaID {
		t.Errorf("first entry: actor %s target %s, want %s and %s", e.Actor, e.Target, opID, adaID)
	}
	if e := sets[1]; e.Actor != adaID || e.Target != adaID {
		t.Errorf("Ada's own entry: actor %s target %s", e.Actor, e.Target)
	}
	store := n.storeBytes(t)
	for _, p := range []string{pw, "Ada's own new password"} {
		if bytes.Contains(store, []byte(p)) {
			t.Error("a password is in the store in plain text")
		}
		if strings.Contains(n.logs.String(), p) {
			t.Error("a password is in the log")
		}
	}
	if !bytes.Contains(store, []byte("$argon2id$v=19$")) {
		t.Error("the store holds no Argon2id hash")
	}
}
