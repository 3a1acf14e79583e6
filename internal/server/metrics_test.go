package server_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/server/servertest"
)

// scrape is one /metrics answer: each series ("name{a="x",b="y"}" with
// labels sorted, or "name") and its value; the "# TYPE" of each family is
// kept under "# TYPE family" with 0 for a counter, 1 a gauge, 2 a histogram,
// 3 anything else.
type scrape map[string]float64

var familyTypes = map[string]float64{"counter": 0, "gauge": 1, "histogram": 2}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrapeAt reads and parses GET base/metrics.
func scrapeAt(t *testing.T, n *servertest.Node, base string) scrape {
	t.Helper()
	r, err := servertest.Call(context.Background(), n.HTTP, base, "GET", "/metrics", "", nil)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	r.Must(t, 200)
	out := scrape{}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			typ, ok := familyTypes[f[3]]
			if !ok {
				typ = 3
			}
			out["# TYPE "+f[2]] = typ
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("scrape: unparsable line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("scrape: value of %q: %v", line, err)
		}
		var labels []string
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, fmt.Sprintf("%s=%q", p[1], p[2]))
		}
		sort.Strings(labels)
		key := m[1]
		if len(labels) > 0 {
			key += "{" + strings.Join(labels, ",") + "}"
		}
		out[key] = v
	}
	return out
}

// names are the metric names the scrape holds.
func (s scrape) names() map[string]bool {
	out := map[string]bool{}
	for k := range s {
		if !strings.HasPrefix(k, "#") {
			out[strings.SplitN(k, "{", 2)[0]] = true
		}
	}
	return out
}

// want checks one series' value.
func (s scrape) want(t *testing.T, series string, v float64) {
	t.Helper()
	got, ok := s[series]
	switch {
	case !ok:
		t.Errorf("scrape has no %s", series)
	case got != v:
		t.Errorf("%s = %v, want %v", series, got, v)
	}
}

func queueSeries(name, ws, conn string) string {
	return fmt.Sprintf("%s{connection_id=%q,workspace_id=%q}", name, conn, ws)
}

// traffic makes a bit of everything the metrics count: tokens issued and
// refused, publishes, receives, an ack, a nack, a dead-letter move by the
// sweeper and a redrive. It returns the pairs and the second consumer.
func traffic(t *testing.T, n *servertest.Node) (p, idle *servertest.Pair) {
	t.Helper()
	clock := n.ManualClock()
	p = n.NewPair(map[string]any{"attempt_limit": 1}) // 2 tokens issued
	idle = n.AddConsumer(p, nil)                      // 1 token issued
	n.TokenResponse(p.Consumer, "sbs_wrong").Must(t, 401)
	for _, id := range []string{"a1", "a2", "b1", "c1"} {
		n.Publish(p, servertest.Envelope(id, id[:1], nil)).Must(t, 202)
	}
	ds := n.Receive(p, "max=10&wait=0&visibility=30")
	if len(ds) != 3 {
		t.Fatalf("received %d messages, want a1 b1 c1", len(ds))
	}
	byID := map[string]string{}
	for _, d := range ds {
		byID[d.MessageID()] = d.ReceiptHandle
	}
	n.Settle(p, "ack", []string{byID["a1"]}, nil).Must(t, 200)
	delay := 60
	// b1 is released, and at once a dead letter (attempt limit 1).
	n.Settle(p, "nack", []string{byID["b1"]}, &delay).Must(t, 200)
	// The idle consumer releases a1 for a minute.
	ia := n.Receive(idle, "max=1&wait=0")
	if len(ia) != 1 {
		t.Fatalf("idle consumer received %d messages", len(ia))
	}
	n.Settle(idle, "nack", []string{ia[0].ReceiptHandle}, &delay).Must(t, 200)
	// c1 stays out past its visibility: the sweeper moves it to the dead
	// letters; then b1 and c1 are redriven, and a2 is received and left
	// to the sweeper too.
	clock.Advance(31 * time.Second)
	n.Maintain()
	n.Do("POST", "/v1/manage/workspaces/"+p.WS+"/connections/"+p.Consumer+"/dead-letters/redrive", servertest.BootstrapKey, map[string]any{}).Must(t, 200)
	d := n.Receive(p, "max=1&wait=0&visibility=1")
	if len(d) != 1 || d[0].MessageID() != "a2" {
		t.Fatalf("received %v, want a2", d)
	}
	clock.Advance(2 * time.Second)
	n.Maintain() // a2 moved to the dead letters
	return p, idle
}

// After traffic /metrics holds the per-connection gauges with the queue's
// counts and the counters of what happened.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	p, idle := traffic(t, n)
	s := scrapeAt(t, n, n.URL)

	// p's queue: a2 dead, b1 and c1 ready again after the redrive; their
	// enqueued_at is their publish, 33 s ago.
	s.want(t, queueSeries("sombus_queue_messages_ready", p.WS, p.Consumer), 2)
	s.want(t, queueSeries("sombus_queue_messages_in_flight", p.WS, p.Consumer), 0)
	s.want(t, queueSeries("sombus_queue_messages_delayed", p.WS, p.Consumer), 0)
	s.want(t, queueSeries("sombus_queue_dead_letters", p.WS, p.Consumer), 1)
	s.want(t, queueSeries("sombus_queue_oldest_ready_age_seconds", p.WS, p.Consumer), 33)
	// The other consumer got every message and released a1 for a minute.
	s.want(t, queueSeries("sombus_queue_messages_ready", idle.WS, idle.Consumer), 3)
	s.want(t, queueSeries("sombus_queue_messages_in_flight", idle.WS, idle.Consumer), 0)
	s.want(t, queueSeries("sombus_queue_messages_delayed", idle.WS, idle.Consumer), 1)
	s.want(t, queueSeries("sombus_queue_dead_letters", idle.WS, idle.Consumer), 0)
	s.want(t, queueSeries("sombus_queue_oldest_ready_age_seconds", idle.WS, idle.Consumer), 33)
	// A producer has no queue.
	if _, ok := s[queueSeries("sombus_queue_messages_ready", p.WS, p.Producer)]; ok {
		t.Errorf("the producer has queue gauges")
	}

	s.want(t, "sombus_messages_published_total", 4)
	s.want(t, "sombus_messages_delivered_total", 5) // a1 b1 c1, then a2; a1 of the other queue
	s.want(t, "sombus_messages_acked_total", 1)
	s.want(t, "sombus_messages_released_total", 2)
	s.want(t, "sombus_messages_dead_lettered_total", 3) // b1 by its nack; c1, then a2, by the sweeper
	s.want(t, "sombus_messages_redriven_total", 2)
	s.want(t, `sombus_token_requests_total{result="issued"}`, 3)
	s.want(t, `sombus_token_requests_total{result="invalid_client"}`, 1)
	s.want(t, "sombus_long_polls_waiting", 0)
	s.want(t, "sombus_queue_gauges_errors_total", 0)
	for _, op := range []string{"message_publish", "message_receive", "message_ack", "message_nack", "maintain", "dead_letter_redrive", "update", "view"} {
		if s[fmt.Sprintf("sombus_store_operation_duration_seconds_count{operation=%q}", op)] < 1 {
			t.Errorf("no store timing of %s", op)
		}
	}
}

// A receive waiting for a message shows in sombus_long_polls_waiting until
// a publish answers it.
func TestMetricsLongPollsWaiting(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	p := n.NewPair(nil)
	done := make(chan error, 1)
	go func() {
		r, err := n.Try(context.Background(), "GET", p.MessagesPath()+"?wait=20", p.ConsumTok, nil)
		if err == nil && r.Status != 200 {
			err = fmt.Errorf("receive: %d %s", r.Status, r.Body)
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for scrapeAt(t, n, n.URL)["sombus_long_polls_waiting"] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("sombus_long_polls_waiting never reached 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.Publish(p, servertest.Envelope("m1", "s", nil)).Must(t, 202)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	scrapeAt(t, n, n.URL).want(t, "sombus_long_polls_waiting", 0)
}

// With --metrics-listen the API's /metrics is an unknown route and the
// metrics address serves the series.
func TestMetricsListen(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{MetricsListen: "127.0.0.1:0"})
	if n.Server.MetricsURL == "" || n.Server.MetricsURL == n.URL {
		t.Fatalf("MetricsURL = %q (API at %q)", n.Server.MetricsURL, n.URL)
	}
	r := n.Do("GET", "/metrics", "", nil)
	if r.Status != 404 || r.Rule() != "route.not_found" {
		t.Fatalf("GET /metrics on the API: %d %s, want 404 route.not_found", r.Status, r.Body)
	}
	n.NewPair(nil)
	s := scrapeAt(t, n, n.Server.MetricsURL)
	s.want(t, `sombus_token_requests_total{result="issued"}`, 2)
	if !s.names()["sombus_http_requests_total"] {
		t.Errorf("the metrics address has no sombus_http_requests_total")
	}
	// The metrics address serves nothing else.
	if r, err := servertest.Call(context.Background(), n.HTTP, n.Server.MetricsURL, "GET", "/healthz", "", nil); err != nil || r.Status != 404 {
		t.Errorf("GET /healthz on the metrics address: %v %v, want 404", r, err)
	}
	// Without the flag /metrics stays on the API.
	m := servertest.Start(t, servertest.Options{})
	if m.Server.MetricsURL != "" {
		t.Errorf("MetricsURL without --metrics-listen = %q", m.Server.MetricsURL)
	}
	scrapeAt(t, m, m.URL)
}
