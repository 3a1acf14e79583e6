package loadcheck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/loadcheck"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// runShort drives a few seconds of load with nacks through an in-process
// node on store and wants the verdict OK with every message accepted,
// delivered and acknowledged, and the connections removed.
func runShort(t *testing.T, store string) {
	n := servertest.Start(t, servertest.Options{Store: store, Clock: bus.SystemClock{}})
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := loadcheck.Run(ctx, loadcheck.Config{
		URL: n.URL, APIKey: servertest.BootstrapKey,
		Publishers: 4, Receivers: 4, Stories: 50, Messages: 1500, PayloadSize: 256, BatchSize: 10,
		ReceiveMax: 10, ReceiveWait: time.Second, Visibility: 30 * time.Second, NackRatio: 0.05,
		ProgressWriter: &progress, ProgressEvery: 500 * time.Millisecond, DrainTimeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("progress:\n%s", progress.String())
	t.Logf("accepted %d delivered %d deliveries %d acked %d nacked %d publish %.0f/s delivery %.0f/s e2e p50 %.1f ms p99 %.1f ms errors %v",
		rep.Accepted, rep.Delivered, rep.Deliveries, rep.Acked, rep.Nacked, rep.PublishRate, rep.DeliveryRate, rep.EndToEnd.P50, rep.EndToEnd.P99, rep.Errors)
	if !rep.OK() || rep.Accepted != 1500 || rep.Delivered != 1500 || rep.Acked != 1500 || !rep.Drained {
		t.Fatalf("verdict %s, violations %v %v; accepted %d delivered %d acked %d drained %v",
			rep.Verdict, rep.Violations, rep.Examples, rep.Accepted, rep.Delivered, rep.Acked, rep.Drained)
	}
	if rep.Nacked == 0 || rep.Duplicates == 0 {
		t.Errorf("nacked %d, duplicates %d: want some of each at a nack ratio of 5%%", rep.Nacked, rep.Duplicates)
	}
	if rep.QuotaTier != "unlimited" || !rep.Removed {
		t.Errorf("quota tier %q, removed %v: want unlimited, true", rep.QuotaTier, rep.Removed)
	}
}

func TestRunSQLite(t *testing.T) {
	runShort(t, "")
}

func TestRunPostgres(t *testing.T) {
	runShort(t, pgtest.URL(t)) // skips when unreachable, fails under CI=true
}
