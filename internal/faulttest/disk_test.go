package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/loadcheck"
)

// TestDiskFull fills the embedded store's disk while a node runs: a real
// tmpfs of 16 MiB, mounted in a mount namespace of the node's own, filled
// by the test until the kernel answers ENOSPC. SQLite then gets ENOSPC on
// its writes (SQLITE_FULL): the transaction rolls back and nothing is
// corrupt. The node must answer 503 with Retry-After (store.unavailable on
// publish and management, consumer.queue_unavailable on the pull routes,
// never 500), keep every message accepted before, and once the file is
// removed take writes again by itself, without a restart. This is not the
// failed fsync (tested in the sqlite package), after which the store
// refuses writes until the process is restarted.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	if err := canMountTmpfs(t); err != nil {
		ciOrSkip(t, "disk full: cannot mount a tmpfs in a namespace of the test's own: %v", err)
	}
	start := time.Now()
	dir := t.TempDir() // the mount point: the node sees a tmpfs here
	n := newNode(t, "disk", "sqlite:"+filepath.Join(dir, "sombus.db"))
	n.wrap = inTmpfs(dir, "16m")
	n.start()
	pid := n.pid()
	inside := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), dir)
	if _, err := os.Stat(filepath.Join(inside, "sombus.db")); err != nil {
		t.Fatalf("the node's database is not in its tmpfs: %v", err)
	}

	ws := workspace(t, n, "disk")
	prod := newConn(t, n, ws, "producer")
	cons := newConn(t, n, ws, "consumer")
	ctx := context.Background()
	led := newLedger()

	pad := strings.Repeat("x", 2000)
	seq := 0
	// publishBatch publishes 50 messages over 10 stories and records the
	// outcome: the answer, or nil when it could not be read.
	publishBatch := func() *answer {
		var envs []any
		var ids []string
		for range 50 {
			id := fmt.Sprintf("m%06d", seq)
			envs = append(envs, envelope(id, fmt.Sprintf("s%d", seq%10), seq, pad))
			ids = append(ids, id)
			seq++
		}
		a, err := n.do(ctx, "POST", batchPath(prod), prod.token, map[string]any{"messages": envs})
		if err != nil {
			t.Fatalf("batch publish: %v", err)
		}
		led.batchAnswer(t, ids, a)
		return a
	}

	// Before: 400 messages accepted, the first 50 received and acknowledged.
	for range 8 {
		if a := publishBatch(); a.Status != 200 {
			t.Fatalf("publish before the disk filled: %s", a)
		}
	}
	drain(t, n, cons, led, 50)

	filler, size, err := fill(inside)
	if err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	t.Logf("filled the node's tmpfs with %d KiB", size>>10)

	// Publish until the disk refuses (the WAL may first reuse space it
	// already has). Each refusal is 503 store.unavailable with Retry-After.
	refused := 0
	for i := 0; refused == 0; i++ {
		if i == 400 {
			t.Fatalf("400 batches of 100 KiB were accepted on a full disk")
		}
		a := publishBatch()
		switch a.Status {
		case 200:
		case 503:
			refused++
			checkUnavailable(t, "batch publish", a, "store.unavailable")
		default:
			t.Fatalf("batch publish on a full disk: %s, want 200 or 503", a)
		}
	}
	// Every route that writes answers 503 while the disk is full; none 500.
	a, err := n.do(ctx, "POST", publishPath(prod), prod.token, envelope(fmt.Sprintf("m%06d", seq), "s-full", seq, pad))
	if err != nil {
		t.Fatal(err)
	}
	seq++
	led.single(t, fmt.Sprintf("m%06d", seq-1), a)
	if a.Status != 503 {
		t.Errorf("publish on a full disk: %s, want 503", a)
	} else {
		checkUnavailable(t, "publish", a, "store.unavailable")
	}
	a, err = n.do(ctx, "POST", "/v1/manage/workspaces", bootstrapKey, map[string]any{"name": "full"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != 503 {
		t.Errorf("create a workspace on a full disk: %s, want 503", a)
	} else {
		checkUnavailable(t, "create workspace", a, "store.unavailable")
	}
	_, a, err = n.receive(ctx, cons, "max=10&wait=0&visibility=30")
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != 503 {
		t.Errorf("receive on a full disk: %s, want 503", a)
	} else {
		checkUnavailable(t, "receive", a, "consumer.queue_unavailable")
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		if a, err := n.do(ctx, "GET", path, "", nil); err != nil || a.Status == 500 {
			t.Errorf("GET %s on a full disk: %v %v", path, a, err)
		}
	}

	// Space returns: the node takes writes again, the same process.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := publishBatch()
		if a.Status == 200 {
			break
		}
		if a.Status != 503 || time.Now().After(deadline) {
			t.Fatalf("publish after space returned: %s", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 4 {
		if a := publishBatch(); a.Status != 200 {
			t.Fatalf("publish after space returned: %s", a)
		}
	}
	if got := n.pid(); got != pid {
		t.Fatalf("the node was restarted (pid %d, then %d)", pid, got)
	}
	n.must(t, 201, "POST", "/v1/manage/workspaces", bootstrapKey, map[string]any{"name": "after"}, nil)

	// Every accepted message is there, none acknowledged comes back.
	drain(t, n, cons, led, -1)
	v := led.verdict()
	t.Logf("disk full: %d accepted, %d refused with 503 (%d batches), %s, in %s",
		len(led.accepted), led.refused, refused, v, time.Since(start).Round(time.Millisecond))
	if !v.ok() {
		t.Errorf("after the disk was full: %s", v)
	}
	// Again under the load runner: the disk fills mid-load and frees up a
	// second after the first refusal; the checker finds nothing lost.
	var progress progressLog
	cfg := loadConfig(n.URL, 8*time.Second)
	cfg.Progress = progress.record
	cfg.ProgressEvery = 100 * time.Millisecond
	done := make(chan struct{})
	var rep *loadcheck.Report
	var rerr error
	go func() {
		defer close(done)
		rep, rerr = loadcheck.Run(context.Background(), cfg)
	}()
	progress.waitAccepted(t, 100, 30*time.Second)
	if filler, size, err = fill(inside); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	filled := time.Now()
	// Make sure the disk is full for the store, not only for the filler:
	// SQLite reuses the space its WAL already holds, so only writes that
	// grow a file meet ENOSPC. Batches of padded messages do, within a few
	// tries; the load runs on beside them.
	refusedUnderLoad := false
	for !refusedUnderLoad && time.Since(filled) < 5*time.Second {
		refusedUnderLoad = publishBatch().Status == 503
	}
	if !refusedUnderLoad {
		t.Fatalf("the store took every write for 5 s after the disk was filled")
	}
	errsAtFull := progress.get().Errors
	time.Sleep(time.Second)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	fullFor := time.Since(filled)
	<-done
	checkReport(t, rep, rerr)
	if rep != nil {
		t.Logf("disk full under load (%d KiB filled, full for %s, %d refusals before the last second of it): %s",
			size>>10, fullFor.Round(time.Millisecond), errsAtFull, summary(rep))
		// The load's own small writes may all fit in the WAL's space (see
		// above), so its 503s are reported, not required.
		t.Logf("503s the load met while the disk was full: %d", rep.Errors["store.unavailable"]+rep.Errors["consumer.queue_unavailable"])
	}
	if got := n.pid(); got != pid {
		t.Fatalf("the node was restarted (pid %d, then %d)", pid, got)
	}

	if strings.Contains(n.logs.Text(), "FSYNC OF THE WAL FAILED") {
		t.Errorf("a full disk put the store in its failed-fsync state")
	}
}

// checkUnavailable checks a 503: Retry-After and the rule wanted.
func checkUnavailable(t testing.TB, what string, a *answer, rule string) {
	t.Helper()
	if a.Header.Get("Retry-After") == "" {
		t.Errorf("%s: 503 without Retry-After", what)
	}
	if got := a.Rule(); got != rule {
		t.Errorf("%s: 503 rule %q, want %q: %s", what, got, rule, a)
	}
}

// ledger keeps what the test knows of each message, for tests that talk to
// the node directly rather than through the load runner.
type ledger struct {
	accepted map[string]bool // 202, or accepted in a 200 batch
	unsure   map[string]bool // the answer was 5xx or lost: either way is right
	refused  int
	acked    map[string]bool // ack answered OK: must never come back
	seen     map[string]int  // deliveries
	back     []string        // acknowledged and delivered again
}

func newLedger() *ledger {
	return &ledger{accepted: map[string]bool{}, unsure: map[string]bool{}, acked: map[string]bool{}, seen: map[string]int{}}
}

// batchAnswer records a batch publish's answer.
func (l *ledger) batchAnswer(t testing.TB, ids []string, a *answer) {
	t.Helper()
	switch {
	case a.Status == 200:
		var out struct {
			Results []struct {
				Accepted bool `json:"accepted"`
			} `json:"results"`
		}
		if err := json.Unmarshal(a.Body, &out); err != nil || len(out.Results) != len(ids) {
			t.Fatalf("batch answer: %v %s", err, a)
		}
		for i, r := range out.Results {
			if !r.Accepted {
				t.Fatalf("batch answer: message %s refused: %s", ids[i], a)
			}
			l.accepted[ids[i]] = true
		}
	case a.Status >= 500:
		if a.Status != 503 {
			t.Errorf("batch publish: %s, never 500", a)
		}
		l.refused += len(ids)
		for _, id := range ids {
			l.unsure[id] = true
		}
	default:
		t.Fatalf("batch publish: %s", a)
	}
}

// single records a single publish's answer.
func (l *ledger) single(t testing.TB, id string, a *answer) {
	t.Helper()
	switch {
	case a.Status == 202:
		l.accepted[id] = true
	case a.Status >= 500:
		if a.Status != 503 {
			t.Errorf("publish: %s, never 500", a)
		}
		l.refused++
		l.unsure[id] = true
	default:
		t.Fatalf("publish: %s", a)
	}
}

// verdict is what a ledger proves.
type verdict struct{ lost, resurrected, dups int }

func (v verdict) ok() bool { return v.lost == 0 && v.resurrected == 0 }

func (v verdict) String() string {
	s := "OK"
	if !v.ok() {
		s = "FAILED"
	}
	return fmt.Sprintf("%s (LOST=%d RESURRECTED=%d, duplicates %d)", s, v.lost, v.resurrected, v.dups)
}

func (l *ledger) verdict() verdict {
	var v verdict
	for id := range l.accepted {
		if l.seen[id] == 0 {
			v.lost++
		}
	}
	v.resurrected = len(l.back)
	for _, k := range l.seen {
		if k > 1 {
			v.dups += k - 1
		}
	}
	return v
}

// drain receives and acknowledges on n until it has acknowledged limit
// messages (-1: until the queue answers empty after every accepted message
// was seen, or 30 s passed).
func drain(t testing.TB, n *node, c conn, l *ledger, limit int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	done := 0
	for limit < 0 || done < limit {
		if time.Now().After(deadline) {
			t.Errorf("drain: still receiving after 30 s (%d acknowledged)", done)
			return
		}
		ms, a, err := n.receive(ctx, c, "max=10&wait=1&visibility=30")
		if err != nil || a.Status != 200 {
			t.Fatalf("drain: receive: %v %v", a, err)
		}
		if len(ms) == 0 {
			if limit < 0 && l.verdict().lost == 0 {
				return
			}
			continue
		}
		var hs []string
		for _, m := range ms {
			id := m.MessageID()
			if l.acked[id] {
				l.back = append(l.back, id)
			}
			l.seen[id]++
			hs = append(hs, m.ReceiptHandle)
		}
		a, err = n.ack(ctx, c, hs)
		if err != nil || a.Status != 200 {
			t.Fatalf("drain: ack: %v %v", a, err)
		}
		var out struct {
			Acked []string `json:"acked"`
		}
		_ = json.Unmarshal(a.Body, &out)
		if len(out.Acked) != len(hs) {
			t.Fatalf("drain: ack: %s", a)
		}
		for _, m := range ms {
			l.acked[m.MessageID()] = true
		}
		done += len(ms)
	}
}
