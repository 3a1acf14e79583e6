package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// runIn runs args with stdin as standard input.
func (c *cli) runIn(stdin string, args ...string) (string, string, error) {
	c.t.Helper()
	root := newRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// signsIn reports whether email and password open a portal session.
func (c *cli) signsIn(email, password string) bool {
	c.t.Helper()
	_, _, err := c.node.Server.Service().SignIn(context.Background(), email, password,
		bus.SessionPolicy{Idle: bus.DefaultSessionIdle, Absolute: bus.DefaultSessionAbsolute})
	if err != nil {
		if e, ok := bus.AsError(err); ok && e.Rule() == bus.RuleManageUnauthenticated {
			return false
		}
		c.t.Fatal(err)
	}
	return true
}

// TestCLISetPassword: the bootstrap operator sets their own portal password
// with their API key, reading it from standard input; operators set other
// users'; nobody else may; the password is never printed.
func TestCLISetPassword(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	op := []string{"--url", c.node.URL, "--api-key", servertest.BootstrapKey}
	const pw = "the operator's portal password"

	if c.signsIn("operator@localhost", pw) {
		t.Fatal("signed in before any password was set")
	}
	out, errs, err := c.runIn(pw+"\n", append([]string{"user", "set-password"}, op...)...)
	if err != nil {
		t.Fatalf("set-password: %v\n%s", err, errs)
	}
	mustContain(t, out, "Password set for u")
	if strings.Contains(out+errs, pw) {
		t.Fatal("set-password printed the password")
	}
	if !c.signsIn("operator@localhost", pw) {
		t.Fatal("the password set from the CLI does not sign in")
	}

	// An operator sets Ada's (a Windows line ending is not part of it).
	var ada struct{ ID string }
	c.manageJSON(&ada, "user", "create", "--name", "Ada", "--email", "ada@example.com")
	out, _, err = c.runIn("Ada's portal password\r\n", append([]string{"user", "set-password", "--user", ada.ID, "-o", "json"}, op...)...)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || res["user_id"] != ada.ID || res["password_set"] != true {
		t.Fatalf("-o json printed %q", out)
	}
	if !c.signsIn("ADA@example.com", "Ada's portal password") {
		t.Fatal("Ada's password does not sign in")
	}

	// Ada, not an operator, may not set the operator's.
	var key struct {
		Key string `json:"api_key"`
	}
	c.manageJSON(&key, "key", "create", ada.ID)
	var me struct {
		User struct{ ID string } `json:"user"`
	}
	c.manageJSON(&me, "user", "whoami")
	_, _, err = c.runIn("Ada tries this one\n", "user", "set-password", "--user", me.User.ID, "--url", c.node.URL, "--api-key", key.Key)
	if err == nil || !strings.Contains(err.Error(), "manage.forbidden") {
		t.Fatalf("Ada set the operator's password: %v", err)
	}

	for name, tc := range map[string]struct{ stdin, want string }{
		"nothing":  {"", "no password on standard input"},
		"empty":    {"\n", "no password on standard input"},
		"short":    {"short\n", "12 characters"},
		"too long": {strings.Repeat("x", 2000), "1024 bytes"},
	} {
		_, _, err := c.runIn(tc.stdin, append([]string{"user", "set-password"}, op...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	if !c.signsIn("operator@localhost", pw) {
		t.Fatal("a refused set-password changed the password")
	}
}
