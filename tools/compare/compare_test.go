package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bench/floor"
)

// The three phases run against a floor in this process: every message
// published is received and acknowledged once, and the table has a row
// with a rate and a ratio for each phase.
func TestMeasureAgainstFloor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, srv, err := floor.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{messages: 250, runs: 1, workers: 4, stories: 10, payload: 1024, batch: 100, receiveMax: 10}
	b := &httpBus{name: floorName, bases: []string{url}, client: newHTTPClient(cfg.workers), ws: "w", producer: "p", consumer: "c"}
	defer b.Close()
	res, err := measure(ctx, cfg, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range res {
		if r.rate <= 0 || r.p50 <= 0 || r.p99 < r.p50 {
			t.Errorf("%s: %+v", phases[p], r)
		}
	}
	if n := srv.Len(); n != 0 {
		t.Errorf("%d messages left after the drain", n)
	}
	var out strings.Builder
	table(&out, "header", []string{floorName}, map[string][]phaseResults{floorName: {res}}, true)
	if !strings.Contains(out.String(), "| "+floorName+" | ") || strings.Count(out.String(), "(1.00)") != 3 {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestEnvelopeIsValidJSON(t *testing.T) {
	var e map[string]any
	if err := json.Unmarshal(envelope("m-1", "story-1", strings.Repeat("x", 1024)), &e); err != nil || e["correlation_id"] != "story-1" {
		t.Fatalf("%v %v", err, e)
	}
}

func TestMedianAndThousands(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 values: %g", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 values: %g", m)
	}
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%g) = %q, want %q", v, got, want)
		}
	}
}
