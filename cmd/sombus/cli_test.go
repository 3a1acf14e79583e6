package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
)

// cli runs the sombus command in process against one node.
type cli struct {
	t    *testing.T
	node *servertest.Node
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	for _, v := range []string{"SOMBUS_URL", "SOMBUS_API_KEY", "SOMBUS_WORKSPACE", "SOMBUS_CLIENT_ID", "SOMBUS_CLIENT_SECRET"} {
		if os.Getenv(v) != "" {
			t.Fatalf("unset %s to run the CLI tests", v)
		}
	}
	return &cli{t: t, node: servertest.Start(t, servertest.Options{})}
}

// run runs args and returns standard output and error.
func (c *cli) run(args ...string) (string, string, error) {
	c.t.Helper()
	root := newRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// manage runs a management command as the bootstrap operator; it must succeed.
func (c *cli) manage(args ...string) string {
	c.t.Helper()
	out, errs, err := c.run(append(args, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)...)
	if err != nil {
		c.t.Fatalf("sombus %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

// manageJSON runs a management command with -o json and decodes its output.
func (c *cli) manageJSON(v any, args ...string) {
	c.t.Helper()
	out := c.manage(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("sombus %s -o json printed no JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestCLIManagement(t *testing.T) {
	t.Parallel()
	c := newCLI(t)

	// Workspaces: table and JSON.
	var ws struct{ ID, Name string }
	c.manageJSON(&ws, "workspace", "create", "acme")
	if !strings.HasPrefix(ws.ID, "w") || ws.Name != "acme" {
		t.Fatalf("workspace %+v", ws)
	}
	out := c.manage("workspace", "list")
	mustContain(t, out, "ID", "NAME", "CREATED", ws.ID, "acme")
	out = c.manage("workspace", "show", ws.ID)
	mustContain(t, out, ws.ID)

	// Users, keys, members.
	var u struct{ ID string }
	c.manageJSON(&u, "user", "create", "--name", "Ada", "--email", "ada@example.com")
	out, errs, err := c.run("key", "create", u.ID, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "API KEY", u.ID)
	mustContain(t, errs, "shown only now")
	var key struct {
		Key string `json:"api_key"`
	}
	c.manageJSON(&key, "key", "create", u.ID)
	out = c.manage("member", "set", u.ID, "developer", "-w", ws.ID)
	mustContain(t, out, "WORKSPACE", "developer")
	// Ada's own key sees her role.
	out, _, err = c.run("user", "whoami", "--url", c.node.URL, "--api-key", key.Key)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "Ada", ws.ID, "developer")
	// A developer may not create connections: the refusal's rule is shown.
	_, _, err = c.run("connection", "create", "--kind", "producer", "--name", "p", "-w", ws.ID, "--url", c.node.URL, "--api-key", key.Key)
	if err == nil || !strings.Contains(err.Error(), "manage.forbidden") {
		t.Fatalf("developer created a connection: %v", err)
	}
	c.manage("member", "remove", u.ID, "-w", ws.ID)

	// Connections.
	var cons struct {
		ID, Kind, Status string
		AttemptLimit     int `json:"attempt_limit"`
		Subscriptions    []struct {
			Topic     string
			Producers []string
		}
	}
	var prod struct{ ID string }
	c.manageJSON(&prod, "connection", "create", "--kind", "producer", "--name", "writer", "-w", ws.ID)
	c.manageJSON(&cons, "connection", "create", "--kind", "consumer", "--name", "reader", "--attempt-limit", "3",
		"--subscribe", "som.story.*", "--subscribe", "som.alert.>="+prod.ID, "-w", ws.ID)
	if cons.Kind != "consumer" || cons.AttemptLimit != 3 || len(cons.Subscriptions) != 2 || cons.Subscriptions[1].Producers[0] != prod.ID {
		t.Fatalf("consumer %+v", cons)
	}
	out = c.manage("connection", "list", "-w", ws.ID)
	mustContain(t, out, "KIND", "READY", cons.ID, prod.ID, "reader", "writer", "som.story.* som.alert.>="+prod.ID)
	out = c.manage("connection", "list", "--kind", "producer", "-w", ws.ID)
	if strings.Contains(out, cons.ID) {
		t.Fatalf("--kind producer listed the consumer:\n%s", out)
	}
	out = c.manage("connection", "show", cons.ID, "-w", ws.ID)
	mustContain(t, out, "attempt limit", "3", "dead letters", "credential version")
	out = c.manage("connection", "update", cons.ID, "--name", "reader2", "-w", ws.ID)
	mustContain(t, out, "reader2", "som.story.*")

	// Secrets.
	var sec struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		TokenURL     string `json:"token_url"`
	}
	c.manageJSON(&sec, "secret", "get", cons.ID, "-w", ws.ID)
	if sec.ClientID != cons.ID || sec.ClientSecret == "" || !strings.HasSuffix(sec.TokenURL, "/v1/oauth/token") {
		t.Fatalf("secret %+v", sec)
	}
	out = c.manage("secret", "rotate", cons.ID, "--overlap", "1h", "-w", ws.ID)
	mustContain(t, out, "client secret", "credential version", "2")
	out = c.manage("connection", "rotate", cons.ID, "--overlap", "none", "-w", ws.ID)
	mustContain(t, out, "client secret")
	out = c.manage("secret", "stop-previous", cons.ID, "-w", ws.ID)
	mustContain(t, out, "secret", "active")
	out = c.manage("secret", "revoke", cons.ID, "-w", ws.ID)
	mustContain(t, out, "revoked")

	// Revoke, restore, usage, remove.
	out = c.manage("connection", "revoke", prod.ID, "-w", ws.ID)
	mustContain(t, out, prod.ID, "revoked")
	var restored struct{ Status string }
	c.manageJSON(&restored, "connection", "restore", prod.ID, "-w", ws.ID)
	if restored.Status != "active" {
		t.Fatalf("restore: %+v", restored)
	}
	out = c.manage("connection", "usage", prod.ID, "-w", ws.ID)
	mustContain(t, out, "TIER", "standard", "REQUESTS")
	if _, _, err := c.run("connection", "remove", prod.ID, "-w", ws.ID, "--url", c.node.URL, "--api-key", servertest.BootstrapKey); err == nil {
		t.Fatal("remove without --yes succeeded")
	}
	c.manage("connection", "remove", prod.ID, "--yes", "-w", ws.ID)
	_, _, err = c.run("connection", "show", prod.ID, "-w", ws.ID, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), "manage.not_found") {
		t.Fatalf("show after remove: %v", err)
	}

	// Audit: table and JSON.
	out = c.manage("audit", "-w", ws.ID)
	mustContain(t, out, "ACTION", "connection.remove", "secret.rotate", "member.set", "workspace.create")
	var audit struct {
		Entries []struct{ Action string }
	}
	c.manageJSON(&audit, "audit", "--limit", "2", "--all", "-w", ws.ID)
	if len(audit.Entries) < 10 || audit.Entries[0].Action != "connection.remove" {
		t.Fatalf("audit --all: %d entries, first %+v", len(audit.Entries), audit.Entries)
	}
}

func TestCLIConfigFromEnvironment(t *testing.T) {
	c := newCLI(t)
	t.Setenv("SOMBUS_URL", c.node.URL)
	t.Setenv("SOMBUS_API_KEY", servertest.BootstrapKey)
	out, _, err := c.run("workspace", "create", "from-env")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "from-env")
	// A flag wins over the environment.
	_, _, err = c.run("workspace", "list", "--api-key", "sbk_wrong")
	if err == nil || !strings.Contains(err.Error(), "manage.unauthenticated") {
		t.Fatalf("wrong --api-key: %v", err)
	}
	t.Setenv("SOMBUS_API_KEY", "")
	_, _, err = c.run("workspace", "list")
	if err == nil || !strings.Contains(err.Error(), "SOMBUS_API_KEY") {
		t.Fatalf("no key: %v", err)
	}
}

func TestCLIPublishReceiveDeadLetters(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var ws struct{ ID string }
	c.manageJSON(&ws, "workspace", "create", "msgs")
	var prod, cons struct{ ID string }
	c.manageJSON(&prod, "connection", "create", "--kind", "producer", "--name", "p", "--quota-tier", "unlimited", "-w", ws.ID)
	c.manageJSON(&cons, "connection", "create", "--kind", "consumer", "--name", "c", "--quota-tier", "unlimited",
		"--attempt-limit", "1", "--subscribe", "som.>", "-w", ws.ID)
	var ps, cs struct {
		Secret string `json:"client_secret"`
	}
	c.manageJSON(&ps, "secret", "get", prod.ID, "-w", ws.ID)
	c.manageJSON(&cs, "secret", "get", cons.ID, "-w", ws.ID)
	asProducer := []string{"--url", c.node.URL, "--client-id", prod.ID, "--client-secret", ps.Secret}
	asConsumer := []string{"--url", c.node.URL, "--client-id", cons.ID, "--client-secret", cs.Secret}

	// One envelope from flags, one from an argument.
	out, _, err := c.run(append([]string{"publish", "--type", "story.context", "--correlation-id", "s1", "--message-id", "m1", "--payload", `{"text":"hello"}`}, asProducer...)...)
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	mustContain(t, out, "MESSAGE ID", "m1", "som.story.context", "Published 1 envelopes: 1 accepted")
	out, _, err = c.run(append([]string{"publish", "-o", "json", `{"som_version":"1.0.0","message_id":"m2","message_type":"story.context","correlation_id":"s2","payload":{}}`}, asProducer...)...)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Accepted   bool
		MessageID  string `json:"message_id"`
		Deliveries int
	}
	if json.Unmarshal([]byte(out), &res) != nil || !res.Accepted || res.MessageID != "m2" || res.Deliveries != 1 {
		t.Fatalf("publish -o json: %s", out)
	}

	// A file of JSON lines: 250 envelopes in three batches, one refused.
	var lines []string
	for i := range 250 {
		lines = append(lines, fmt.Sprintf(`{"som_version":"1.0.0","message_id":"f%d","message_type":"story.bulk","correlation_id":"bulk-%d","payload":{"i":%d}}`, i, i%5, i))
	}
	lines[100] = `{"som_version":"1.0.0","message_id":"bad","message_type":"Bad Type","correlation_id":"x","payload":{}}`
	path := filepath.Join(t.TempDir(), "envs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, err := c.run(append([]string{"publish", "-f", path, "--progress"}, asProducer...)...)
	if err == nil || !strings.Contains(err.Error(), "1 of 250 envelopes refused") {
		t.Fatalf("publish -f: %v\n%s", err, out)
	}
	mustContain(t, out, "101", "envelope.message_type", "Published 250 envelopes: 249 accepted (0 duplicates), 1 refused.")
	mustContain(t, errs, "publish") // the progress bar
	if strings.Count(out, "\n") > 5 {
		t.Errorf("bulk publish printed every envelope:\n%s", out)
	}

	// Receive once (table), without acknowledging.
	out, _, err = c.run(append([]string{"receive", "--max", "2"}, asConsumer...)...)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "MESSAGE ID", "STORY", "m1", "m2", `{"text":"hello"}`)
	// Receive with --ack as JSON: one message a line.
	out, _, err = c.run(append([]string{"receive", "--max", "3", "--ack", "-o", "json"}, asConsumer...)...)
	if err != nil {
		t.Fatal(err)
	}
	msgLines := strings.Split(strings.TrimSpace(out), "\n")
	if len(msgLines) != 3 {
		t.Fatalf("receive -o json printed %d lines:\n%s", len(msgLines), out)
	}
	var m struct {
		ReceiptHandle string          `json:"receipt_handle"`
		Envelope      json.RawMessage `json:"envelope"`
		ReceiveCount  int             `json:"receive_count"`
	}
	if err := json.Unmarshal([]byte(msgLines[0]), &m); err != nil || m.ReceiptHandle == "" || len(m.Envelope) == 0 {
		t.Fatalf("message line %s: %v", msgLines[0], err)
	}

	// m1 and m2 are in flight with attempt limit 1: let their visibility run
	// out, and they move to the dead-letter queue.
	c.node.ManualClock().Advance(61e9)
	var page struct {
		DeadLetters []struct {
			MessageID string `json:"message_id"`
		} `json:"dead_letters"`
	}
	for range 100 {
		c.manageJSON(&page, "dead-letters", "list", cons.ID, "--all", "-w", ws.ID)
		if len(page.DeadLetters) == 2 {
			break
		}
		// The move happens before the next receive, or within seconds.
		_, _, _ = c.run(append([]string{"receive", "--max", "1", "--visibility", "1h"}, asConsumer...)...)
	}
	if len(page.DeadLetters) != 2 {
		t.Fatalf("dead letters %+v, want m1 and m2", page.DeadLetters)
	}
	out = c.manage("dead-letters", "list", cons.ID, "-w", ws.ID)
	mustContain(t, out, "DEAD-LETTERED", "m1", "m2")
	out = c.manage("dead-letters", "redrive", cons.ID, "m1", "-w", ws.ID)
	mustContain(t, out, "Redrove 1 dead letters.")
	var redriven struct{ Redriven int }
	c.manageJSON(&redriven, "dead-letters", "redrive", cons.ID, "-w", ws.ID)
	if redriven.Redriven != 1 {
		t.Fatalf("redrive all: %+v", redriven)
	}

	// Purge needs --yes.
	if _, _, err := c.run("purge", cons.ID, "-w", ws.ID, "--url", c.node.URL, "--api-key", servertest.BootstrapKey); err == nil {
		t.Fatal("purge without --yes succeeded")
	}
	var purged struct{ Purged int }
	c.manageJSON(&purged, "purge", cons.ID, "--yes", "-w", ws.ID)
	if purged.Purged < 200 {
		t.Fatalf("purged %d, want the bulk messages", purged.Purged)
	}
}

func TestCLIReceiveFollow(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p := c.node.NewPair(nil)
	for i := range 3 {
		c.node.Publish(p, servertest.Envelope(fmt.Sprintf("f%d", i), "s", nil)).Must(t, 202)
	}
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCommand()
	var out bytes.Buffer
	w := &notifyWriter{w: &out, lines: make(chan struct{}, 100)}
	root.SetOut(w)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"receive", "--follow", "--ack", "-o", "json", "--url", c.node.URL, "--client-id", p.Consumer, "--client-secret", p.ConsumerSecret})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	// The messages of one story come one by one: each is acknowledged
	// before the next is delivered.
	for range 3 {
		<-w.lines
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("receive --follow: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	mustContain(t, out.String(), `"message_id":"f0"`, `"message_id":"f1"`, `"message_id":"f2"`)
}

func TestCLICompletion(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	out, _, err := c.run("completion", "bash")
	if err != nil || !strings.Contains(out, "bash completion") {
		t.Fatalf("completion bash: %v", err)
	}
	out, _, err = c.run("__complete", "connection", "")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "create", "rotate", "restore", "remove")
}

// notifyWriter signals every line written to it.
type notifyWriter struct {
	mu    sync.Mutex
	w     *bytes.Buffer
	lines chan struct{}
}

func (n *notifyWriter) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for range bytes.Count(p, []byte("\n")) {
		n.lines <- struct{}{}
	}
	return n.w.Write(p)
}
