package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/loadcheck"
	"github.com/sombus/sombus/internal/server/servertest"
)

func benchCLI(t *testing.T) *cli {
	t.Helper()
	c := newCLI(t)
	c.node = servertest.Start(t, servertest.Options{Clock: bus.SystemClock{}})
	return c
}

func TestBenchJSONVerdictOK(t *testing.T) {
	c := benchCLI(t)
	out, errs, err := c.run("bench", "--url", c.node.URL, "--api-key", servertest.BootstrapKey,
		"--messages", "300", "--stories", "20", "--publishers", "2", "--receivers", "2", "--batch", "5",
		"--progress-every", "100ms", "-o", "json")
	if err != nil {
		t.Fatalf("bench: %v\nstdout: %s\nstderr: %s", err, out, errs)
	}
	var rep loadcheck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if rep.Verdict != "OK" || rep.Accepted != 300 || rep.Delivered != 300 || rep.Acked != 300 || rep.EndToEnd.Count != 300 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(errs, "published") {
		t.Errorf("no progress line on standard error: %q", errs)
	}
}

func TestBenchTableAndFailingVerdict(t *testing.T) {
	// A consumer that subscribes to another topic gets none of the
	// messages: every accepted one is LOST, and the command fails.
	c := benchCLI(t)
	p := c.node.NewPair(map[string]any{"subscriptions": []map[string]any{{"topic": "som.other"}}})
	out, _, err := c.run("bench", "--url", c.node.URL, "-q",
		"--producer-id", p.Producer, "--producer-secret", p.ProducerSecret,
		"--consumer-id", p.Consumer, "--consumer-secret", p.ConsumerSecret,
		"--messages", "20", "--stories", "5", "--drain-timeout", "1s", "--quiet-period", "100ms")
	if err == nil || !strings.Contains(err.Error(), "verdict FAIL: LOST 20") {
		t.Fatalf("err %v, want verdict FAIL: LOST 20\n%s", err, out)
	}
	for _, want := range []string{"verdict", "FAIL", "LOST 20, ORDER 0, RESURRECTED 0", "accepted, never delivered"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	c := benchCLI(t)
	for args, want := range map[string]string{
		"--receive-max 11":     "receive max must be 1 to 10",
		"--batch 101":          "batch size must be 1 to 100",
		"--nack-ratio 1":       "nack ratio",
		"--visibility 10ms":    "visibility must be 1s",
		"--progress-every -1s": "must not be negative",
	} {
		_, _, err := c.run(append([]string{"bench", "--url", c.node.URL, "--api-key", servertest.BootstrapKey}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", args, err, want)
		}
	}
	if _, _, err := c.run("bench", "--url", c.node.URL); err == nil || !strings.Contains(err.Error(), "no API key") {
		t.Errorf("without a key: %v", err)
	}
}
