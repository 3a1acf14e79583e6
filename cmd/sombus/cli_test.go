package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
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
	mustContain(t, out, "MESSAGE ID", "m1", "som.story.context", "Published 1 envelope: 1 accepted")
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
	mustContain(t, out, "Redrove 1 dead letter.")
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

// TestCLIReceiveVisibilityZero: --visibility 0s asks for 0 (the message
// is ready again at once), not the SDK's default of 60s.
func TestCLIReceiveVisibilityZero(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p := c.node.NewPair(nil)
	c.node.Publish(p, servertest.Envelope("v1", "s", nil)).Must(t, 202)
	creds := []string{"-o", "json", "--url", c.node.URL, "--client-id", p.Consumer, "--client-secret", p.ConsumerSecret}
	var m struct {
		ReceiveCount int `json:"receive_count"`
		Envelope     struct {
			MessageID string `json:"message_id"`
		} `json:"envelope"`
	}
	for want := 1; want <= 2; want++ {
		out, _, err := c.run(append([]string{"receive", "--visibility", "0s"}, creds...)...)
		if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &m) != nil || m.Envelope.MessageID != "v1" || m.ReceiveCount != want {
			t.Fatalf("receive --visibility 0s, time %d: %v\n%s", want, err, out)
		}
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

// refusedURL is the URL of a local port nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	_ = ln.Close()
	return u
}

// TestCLIErrorOutput checks what main prints for a failed command: the
// program's name once, and a hint when nothing answers at the bus's URL.
func TestCLIErrorOutput(t *testing.T) {
	u := refusedURL(t)
	var out, errb bytes.Buffer
	if code := execute(context.Background(), []string{"workspace", "list", "--url", u, "--api-key", "sbk_x"}, &out, &errb); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	msg := errb.String()
	if !strings.HasPrefix(msg, "sombus: ") || strings.Count(msg, "sombus:") != 1 {
		t.Errorf("the error names the program other than once:\n%s", msg)
	}
	mustContain(t, msg, "connection refused", "no bus answers at "+u, "SOMBUS_URL", "--url")

	// An error of the command itself: no hint.
	errb.Reset()
	t.Setenv("SOMBUS_API_KEY", "")
	if code := execute(context.Background(), []string{"workspace", "list", "--url", u}, &out, &errb); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if got := errb.String(); got != "sombus: no API key: pass --api-key or set SOMBUS_API_KEY\n" {
		t.Errorf("printed %q", got)
	}
}

// TestCLIReceiveFlagLimits checks that receive refuses flags out of range
// by their names, before it reaches the bus.
func TestCLIReceiveFlagLimits(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	creds := []string{"--url", refusedURL(t), "--client-id", "c1", "--client-secret", "s1"}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--max", "50"}, "--max must be 1 to 10 (got 50)"},
		{[]string{"--max", "0"}, "--max must be 1 to 10 (got 0)"},
		{[]string{"--wait", "30s"}, "--wait must be 0 to 20s (got 30s)"},
		{[]string{"--wait", "-1s"}, "--wait must be 0 to 20s (got -1s)"},
		{[]string{"--visibility", "13h"}, "--visibility must be 0 to 12h (got 13h0m0s)"},
		{[]string{"--visibility", "0s", "--follow"}, "--visibility 0 with --follow needs --ack: otherwise every message comes back at once, again and again, until it is dead-lettered"},
	} {
		_, _, err := c.run(append(append([]string{"receive"}, tc.flags...), creds...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("receive %v: %v, want %q", tc.flags, err, tc.want)
		}
	}
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	out, _, err := c.run("version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "sombus ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("sombus version printed %q", out)
	}
	out2, _, err := c.run("--version")
	if err != nil {
		t.Fatal(err)
	}
	if first := strings.SplitN(out, "\n", 2)[0]; !strings.HasPrefix(out2, first) {
		t.Errorf("--version printed %q, version %q", out2, first)
	}

	// The version set at link time wins; else the module's version and the
	// commit from the build information.
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got := versionOf("v2.0.0", bi, true); got != "v2.0.0" {
		t.Errorf("with -X main.version: %q", got)
	}
	if got := versionOf("", bi, true); got != "v1.4.0 (commit 0123456789ab, modified)" {
		t.Errorf("from build info: %q", got)
	}
	bi.Main.Version = "(devel)"
	if got := versionOf("", bi, true); got != "devel (commit 0123456789ab, modified)" {
		t.Errorf("a development build: %q", got)
	}
	if got := versionOf("", nil, false); got != "unknown" {
		t.Errorf("no build info: %q", got)
	}
}

func TestCLIRootHelpShowsConnectionFlags(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	out, _, err := c.run("--help")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "--url", "SOMBUS_URL", "--api-key", "SOMBUS_API_KEY", "-o, --output", "--version", "skills", "version")
	// The commands see them as global flags and still read them.
	out, _, err = c.run("connection", "list", "--help")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "Global Flags", "--url", "--api-key", "-o, --output", "-w, --workspace")
	out, _, err = c.run("receive", "--help")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "--client-id", "--client-secret", "--url", "-o, --output")
}

func TestCLISkills(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p := c.node.NewPair(nil)

	// Before any put: none.
	out := c.manage("skills", "get", p.Consumer, "-w", p.WS)
	mustContain(t, out, "No skill registrations.")

	regs := `{"registrations":[{"instance_id":"i1","skill":"search","name":"Web search","values":{"engine":"x"},"authority_scale":40},
		{"instance_id":"i2","skill":"mail","name":"Mail","values":{},"authority_scale":100}]}`
	path := filepath.Join(t.TempDir(), "skills.json")
	if err := os.WriteFile(path, []byte(regs), 0o600); err != nil {
		t.Fatal(err)
	}
	out = c.manage("skills", "put", p.Consumer, "-f", path, "-w", p.WS)
	mustContain(t, out, "INSTANCE ID", "SKILL", "AUTHORITY", "i1", "search", "Web search", "40", `{"engine":"x"}`, "i2", "mail", "100")

	var got struct {
		Registrations []struct {
			InstanceID     string          `json:"instance_id"`
			Values         json.RawMessage `json:"values"`
			AuthorityScale int             `json:"authority_scale"`
		}
		UpdatedAt string `json:"updated_at"`
	}
	c.manageJSON(&got, "skills", "get", p.Consumer, "-w", p.WS)
	var values bytes.Buffer
	if len(got.Registrations) == 2 {
		_ = json.Compact(&values, got.Registrations[0].Values)
	}
	if len(got.Registrations) != 2 || got.Registrations[0].InstanceID != "i1" || values.String() != `{"engine":"x"}` || got.UpdatedAt == "" {
		t.Fatalf("skills get -o json: %+v", got)
	}

	// The consumer reads its own with its credentials.
	out, _, err := c.run("skills", "mine", "--url", c.node.URL, "--client-id", p.Consumer, "--client-secret", p.ConsumerSecret)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, out, "i1", "i2", "Web search")

	// A bare array as an argument replaces them; a misspelt field is refused
	// before anything is sent.
	out = c.manage("skills", "put", p.Consumer, `[{"instance_id":"i3","skill":"s","name":"n","values":{},"authority_scale":0}]`, "-w", p.WS)
	if strings.Contains(out, "i1") || !strings.Contains(out, "i3") {
		t.Fatalf("put replaced nothing:\n%s", out)
	}
	_, _, err = c.run("skills", "put", p.Consumer, `[{"instance":"i4"}]`, "-w", p.WS, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), `unknown field "instance"`) {
		t.Fatalf("a misspelt field: %v", err)
	}
	// So is a name that is right only ignoring case, and a null.
	_, _, err = c.run("skills", "put", p.Consumer, `[{"instance_id":"i4","skill":"s","name":"n","Values":{},"authority_scale":0}]`, "-w", p.WS, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), `member "[0].Values" differs from "[0].values" only by case`) {
		t.Fatalf("a name in the wrong case: %v", err)
	}
	_, _, err = c.run("skills", "put", p.Consumer, `{"registrations":[{"instance_id":"i4","skill":"s","name":"n","values":null,"authority_scale":0}]}`, "-w", p.WS, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), "registrations[0].values must not be null") {
		t.Fatalf("null values: %v", err)
	}
	// The bus's refusal names the rule.
	_, _, err = c.run("skills", "put", p.Consumer, `[{"instance_id":"i5","skill":"s","name":"n","values":{},"authority_scale":101}]`, "-w", p.WS, "--url", c.node.URL, "--api-key", servertest.BootstrapKey)
	if err == nil || !strings.Contains(err.Error(), "authority_scale") {
		t.Fatalf("authority_scale 101: %v", err)
	}
}
