package faulttest

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/loadcheck"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// kills is how many times TestSIGKILL kills the node per store.
func kills() int {
	if *long {
		return 50
	}
	return 5
}

// TestSIGKILL runs the load runner against one node and kills the node
// with SIGKILL at random moments mid-load, restarting it on the same store
// and address each time; after the drain the checker must find nothing
// lost, no story out of order or held twice, and no acknowledged message
// back (LOST = ORDER = RESURRECTED = 0), and no request answered 500.
func TestSIGKILL(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		killUnderLoad(t, "sqlite:"+filepath.Join(servertest.TempDir(t), "sombus.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		killUnderLoad(t, pgtest.URL(t))
	})
}

func killUnderLoad(t *testing.T, store string) {
	start := time.Now()
	n := startNode(t, "node", store)
	want := kills()
	var progress progressLog
	cfg := loadConfig(n.URL, time.Duration(want)*1500*time.Millisecond+3*time.Second)
	cfg.Progress = progress.record

	done := runLoad(cfg)

	// Kill only once the load runs.
	progress.waitAccepted(t, 1, 30*time.Second)
	killed := 0
	var downtime time.Duration
	for killed < want {
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("the load ended after %d of %d kills (make the load longer): %v %+v", killed, want, r.err, r.rep)
		default:
		}
		n.kill()
		killed++
		down := time.Now()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		n.start()
		downtime += time.Since(down)
	}
	killsDone := time.Since(start)
	r := <-done
	checkReport(t, r.rep, r.err)
	if r.rep != nil {
		t.Logf("%s: %d SIGKILLs survived in %s (%s down in all); %s; total %s",
			storeKind(store), killed, killsDone.Round(time.Millisecond), downtime.Round(time.Millisecond),
			summary(r.rep), time.Since(start).Round(time.Millisecond))
	}
}

// loadConfig is the load of the crash tests: modest, so that a shared
// CI machine keeps up, with nacks and batches in the mix; every client
// request is retried through the node's downtime.
func loadConfig(url string, d time.Duration) loadcheck.Config {
	return loadcheck.Config{
		URL:            url,
		APIKey:         bootstrapKey,
		Publishers:     4,
		Receivers:      4,
		Stories:        40,
		Duration:       d,
		PayloadSize:    256,
		BatchSize:      5,
		ReceiveMax:     10,
		ReceiveWait:    time.Second,
		Visibility:     5 * time.Second,
		NackRatio:      0.05,
		Rate:           150,
		DrainTimeout:   90 * time.Second,
		Quiet:          2 * time.Second,
		RequestTimeout: 5 * time.Second,
	}
}

// checkReport fails the test unless the run ended with verdict OK, drained,
// having accepted messages, and without a 500 among its retried errors.
func checkReport(t testing.TB, rep *loadcheck.Report, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("load run: %v", err)
	}
	if rep == nil {
		return
	}
	if !rep.OK() || !rep.Drained || rep.Accepted == 0 {
		t.Errorf("verdict %s (drained %v, %d accepted), violations %v:\n%s",
			rep.Verdict, rep.Drained, rep.Accepted, rep.Violations, strings.Join(rep.Examples, "\n"))
	}
	for rule, k := range rep.Errors {
		if strings.Contains(rule, "internal") || strings.Contains(rule, "500") || strings.Contains(rule, "server_error") {
			t.Errorf("%d requests answered %s: a store failure must be 503", k, rule)
		}
	}
}

// summary is a report in one line.
func summary(r *loadcheck.Report) string {
	return fmt.Sprintf("verdict %s (LOST=%d ORDER=%d RESURRECTED=%d): %d accepted, %d delivered (%d deliveries, %d duplicates), %d acked, %d nacked; retried errors %v",
		r.Verdict, r.Violations[loadcheck.RuleLost], r.Violations[loadcheck.RuleOrder], r.Violations[loadcheck.RuleResurrected],
		r.Accepted, r.Delivered, r.Deliveries, r.Duplicates, r.Acked, r.Nacked, r.Errors)
}

func storeKind(store string) string {
	kind, _, _ := strings.Cut(store, ":")
	return kind
}

// progressLog keeps the load runner's last progress.
type progressLog struct {
	mu   sync.Mutex
	last loadcheck.Progress
}

func (p *progressLog) record(pr loadcheck.Progress) {
	p.mu.Lock()
	p.last = pr
	p.mu.Unlock()
}

func (p *progressLog) get() loadcheck.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// waitAccepted waits until the runner reports at least k accepted messages.
func (p *progressLog) waitAccepted(t testing.TB, k int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for p.get().Accepted < k {
		if time.Now().After(deadline) {
			t.Fatalf("the load runner accepted nothing within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
