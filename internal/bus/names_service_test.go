package bus_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// TestNewNamesAndEmailsRefuseBidiControls: a user's name and email, a
// workspace's name and a connection's name (created or renamed) refuse the
// bidirectional controls that would reorder the text shown after them.
func TestNewNamesAndEmailsRefuseBidiControls(t *testing.T) {
	svc, op, ws, _ := operatorWorkspace(t, openStores["sqlite"](t))
	ctx := t.Context()
	kind, ok := bus.KindConsumer, "ok"
	c, err := svc.CreateConnection(ctx, op, ws, bus.ConnectionParams{Kind: &kind, Name: &ok})
	if err != nil {
		t.Fatal(err)
	}
	calls := nameSetters(svc, op, ws, c.ID)
	calls["user email"] = func(string) error {
		_, err := svc.CreateUser(ctx, op, bus.CreateUserParams{Name: "A", Email: "a\u2067b@example.com"})
		return err
	}
	for what, call := range calls {
		if err := call("pay\u202eroll"); err == nil || !strings.Contains(err.Error(), "bidirectional") {
			t.Errorf("%s with a bidirectional control: %v, want a refusal", what, err)
		}
	}
}

// nameSetters are the calls that give a name: a new user's, a new
// workspace's, a new connection's in ws, and connection connID's rename.
func nameSetters(svc *bus.Service, op *bus.Actor, ws, connID string) map[string]func(name string) error {
	kind := bus.KindConsumer
	return map[string]func(string) error{
		"user name": func(name string) error {
			_, err := svc.CreateUser(context.Background(), op, bus.CreateUserParams{Name: name, Email: "a@example.com"})
			return err
		},
		"workspace": func(name string) error { _, err := svc.CreateWorkspace(context.Background(), op, name); return err },
		"connection": func(name string) error {
			_, err := svc.CreateConnection(context.Background(), op, ws, bus.ConnectionParams{Kind: &kind, Name: &name})
			return err
		},
		"rename": func(name string) error {
			_, err := svc.UpdateConnection(context.Background(), op, ws, connID, bus.ConnectionParams{Name: &name})
			return err
		},
	}
}

// TestNamesRefuseInvisibleOnly: a user's, workspace's and connection's name
// (created or renamed) and a skill registration's fields refuse values
// made only of invisible characters, naming the field.
func TestNamesRefuseInvisibleOnly(t *testing.T) {
	svc, op, ws, _ := operatorWorkspace(t, openStores["sqlite"](t))
	ctx := t.Context()
	kind, ok := bus.KindConsumer, "ok"
	c, err := svc.CreateConnection(ctx, op, ws, bus.ConnectionParams{Kind: &kind, Name: &ok})
	if err != nil {
		t.Fatal(err)
	}
	for _, blank := range []string{"\ufeff", "\u200b", "\u200e\u200f\u061c", "\u200b\u2060\ufeff\u00ad"} {
		for what, call := range nameSetters(svc, op, ws, c.ID) {
			if err := call(blank); err == nil || !strings.Contains(err.Error(), "name must hold a visible character") {
				t.Errorf("%s %+q: %v, want a refusal", what, blank, err)
			}
		}
		for i, reg := range []bus.SkillRegistration{
			{InstanceID: blank, Skill: "s", Name: "n"},
			{InstanceID: "i", Skill: blank, Name: "n"},
			{InstanceID: "i", Skill: "s", Name: blank},
		} {
			reg.Values = json.RawMessage(`{}`)
			field := []string{"instance_id", "skill", "name"}[i]
			if _, err := svc.PutSkills(ctx, op, ws, c.ID, []bus.SkillRegistration{reg}); err == nil || !strings.Contains(err.Error(), "registrations[0]."+field+" must hold a visible character") {
				t.Errorf("skill registration's %s %+q: %v, want a refusal", field, blank, err)
			}
		}
	}
}

// TestEmailsThatLookAlikeAreRefused: next to a user x@example.com, emails
// that read the same (a line separator after it, a byte order mark or a
// right-to-left mark inside) are refused, not created as other users; an
// owner adding a member by such an email is refused the same way.
func TestEmailsThatLookAlikeAreRefused(t *testing.T) {
	svc, op, ws, _ := operatorWorkspace(t, openStores["sqlite"](t))
	ctx := t.Context()
	if _, err := svc.CreateUser(ctx, op, bus.CreateUserParams{Name: "X", Email: "x@example.com"}); err != nil {
		t.Fatal(err)
	}
	for _, email := range []string{"x@example.com\u2028", "x\ufeff@example.com", "bi\u200fdi@example.com", "x\u00a0@example.com"} {
		_, err := svc.CreateUser(ctx, op, bus.CreateUserParams{Name: "X", Email: email})
		if e, ok := bus.AsError(err); !ok || e.Rule() != bus.RuleManageBadRequest || !strings.HasPrefix(e.Violations[0].Message, "email must not hold white space, control or format characters") {
			t.Errorf("user with email %+q: %v, want manage.bad_request naming email", email, err)
		}
		_, err = svc.SetMemberByEmail(ctx, op, ws, email, bus.RoleViewer)
		if e, ok := bus.AsError(err); !ok || e.Rule() != bus.RuleManageBadRequest || !strings.HasPrefix(e.Violations[0].Message, "email must not hold") {
			t.Errorf("member by email %+q: %v, want manage.bad_request naming email", email, err)
		}
	}
	if _, err := svc.SetMemberByEmail(ctx, op, ws, "x@example.com", bus.RoleViewer); err != nil {
		t.Errorf("member by the plain email: %v", err)
	}
}
