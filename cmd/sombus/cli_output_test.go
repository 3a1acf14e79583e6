package main

import (
	"strings"
	"testing"
)

// TestCLIJSONLinesWriteHTMLCharactersAsIs: receive -o json prints ">", "<"
// and "&" of an envelope as they are, as the bus sent them.
func TestCLIJSONLinesWriteHTMLCharactersAsIs(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var ws, prod, cons struct{ ID string }
	c.manageJSON(&ws, "workspace", "create", "out")
	c.manageJSON(&prod, "connection", "create", "--kind", "producer", "--name", "p", "-w", ws.ID)
	c.manageJSON(&cons, "connection", "create", "--kind", "consumer", "--name", "c", "--subscribe", "som.>", "-w", ws.ID)
	var ps, cs struct {
		Secret string `json:"client_secret"`
	}
	c.manageJSON(&ps, "secret", "get", prod.ID, "-w", ws.ID)
	c.manageJSON(&cs, "secret", "get", cons.ID, "-w", ws.ID)
	out, _, err := c.run("publish", "--type", "story.context", "--correlation-id", "s1", "--message-id", "m1",
		"--payload", `{"text":"a>b & <c>"}`, "-o", "json", "--url", c.node.URL, "--client-id", prod.ID, "--client-secret", ps.Secret)
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	out, _, err = c.run("receive", "-o", "json", "--url", c.node.URL, "--client-id", cons.ID, "--client-secret", cs.Secret)
	if err != nil {
		t.Fatalf("receive: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"a>b & <c>"`) || strings.Contains(out, `\u00`) {
		t.Fatalf("receive -o json escapes HTML characters:\n%s", out)
	}
}
