package main

import (
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
)

// TestCLIGlobalAudit: `sombus audit --global` shows operators the entries
// of no workspace (users and API keys); others get the bus's refusal.
func TestCLIGlobalAudit(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var u struct{ ID string }
	c.manageJSON(&u, "user", "create", "--name", "Grace", "--email", "grace@example.com")
	var key struct {
		Key string `json:"api_key"`
	}
	c.manageJSON(&key, "key", "create", u.ID)

	out := c.manage("audit", "--global")
	mustContain(t, out, "ACTION", "user.create", "key.create", u.ID, "system")
	var audit struct {
		Entries []struct{ Action, Target string }
	}
	c.manageJSON(&audit, "audit", "--global", "--limit", "1", "--all")
	if len(audit.Entries) != 3 || audit.Entries[0].Action != "key.create" || audit.Entries[1].Target != u.ID {
		t.Fatalf("audit --global --all: %+v", audit.Entries)
	}
	_, errs, err := c.run("audit", "--global", "--limit", "1", "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, errs, "More: --cursor ")

	_, _, err = c.run("audit", "--global", "--url", c.node.URL, "--api-key", key.Key)
	if err == nil || !strings.Contains(err.Error(), "manage.forbidden") {
		t.Fatalf("a non-operator read the global audit: %v", err)
	}
	_, _, err = c.run("audit", "--global", "-w", "wsome", "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), "--global") {
		t.Fatalf("--global with --workspace: %v", err)
	}
}
