package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/metrics"
)

// scrape serves reg once and returns its sample lines.
func scrape(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	var out []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// A failed read of the queue gauges leaves them out of that scrape, which
// still succeeds, and counts the failure in the same scrape.
func TestQueuesReadFailureCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	fail := true
	metrics.NewQueues(reg, func(ctx context.Context) ([]bus.QueueGauge, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the gauge read has no deadline")
		}
		if fail {
			return nil, errors.New("store down")
		}
		return []bus.QueueGauge{{WorkspaceID: "w1", ConnectionID: "c1", QueueStats: bus.QueueStats{Ready: 3, InFlight: 2, Delayed: 1, DeadLetters: 4, OldestReadyAgeSeconds: 1.5}}}, nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	if got, want := strings.Join(scrape(t, reg), "\n"), "sombus_queue_gauges_errors_total 1"; got != want {
		t.Errorf("scrape after a failed read:\n%s\nwant\n%s", got, want)
	}
	fail = false
	want := strings.Join([]string{
		`sombus_queue_dead_letters{connection_id="c1",workspace_id="w1"} 4`,
		`sombus_queue_gauges_errors_total 1`,
		`sombus_queue_messages_delayed{connection_id="c1",workspace_id="w1"} 1`,
		`sombus_queue_messages_in_flight{connection_id="c1",workspace_id="w1"} 2`,
		`sombus_queue_messages_ready{connection_id="c1",workspace_id="w1"} 3`,
		`sombus_queue_oldest_ready_age_seconds{connection_id="c1",workspace_id="w1"} 1.5`,
	}, "\n")
	if got := strings.Join(scrape(t, reg), "\n"); got != want {
		t.Errorf("scrape:\n%s\nwant\n%s", got, want)
	}
}
