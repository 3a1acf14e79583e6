package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// lockedBuffer collects log lines from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// setSyncFile replaces the fsync of the WAL (nil puts the real one back).
func (s *Store) setSyncFile(fn func(path string) error) {
	if fn == nil {
		s.w.syncFile.Store(nil)
		return
	}
	s.w.syncFile.Store(&fn)
}

// TestFailedFsyncStopsWrites: after an fsync of the WAL fails, the store
// refuses every write for good (errors wrapping bus.ErrUnavailable), even
// once fsync works again, and Ping fails (the node is not ready); reads go
// on; the failure is logged once, saying to restart. A restart (reopening
// the file) takes writes again.
func TestFailedFsyncStopsWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &lockedBuffer{}
	path := filepath.Join(t.TempDir(), "f.db")
	s, err := Open(ctx, path, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ws, prod, cons := setupQueue(t, s, 5)
	publish := func(id string) error {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
		return err
	}
	if err := publish("m1"); err != nil {
		t.Fatalf("publish before the failure: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping before the failure: %v", err)
	}

	var syncs int
	var mu sync.Mutex
	s.setSyncFile(func(string) error {
		mu.Lock()
		syncs++
		mu.Unlock()
		return syscall.EIO
	})
	if err := publish("m2"); !bus.IsUnavailable(err) {
		t.Fatalf("publish whose fsync failed: %v, want bus.ErrUnavailable", err)
	}
	s.setSyncFile(nil) // the disk works again: the store still refuses

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Update(ctx, func(tx bus.Tx) error {
				return tx.WorkspaceCreate(bus.Workspace{ID: bus.NewID("w"), Name: "later", CreatedAt: t0})
			})
			if !bus.IsUnavailable(err) {
				t.Errorf("write %d after the failure: %v, want bus.ErrUnavailable", i, err)
			}
		}()
	}
	wg.Wait()
	if err := publish("m3"); !bus.IsUnavailable(err) {
		t.Fatalf("publish after the failure: %v, want bus.ErrUnavailable", err)
	}
	if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: cons, Max: 10, Visibility: 60e9, Now: t0}); !bus.IsUnavailable(err) {
		t.Fatalf("receive (a write) after the failure: %v, want bus.ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !bus.IsUnavailable(err) {
		t.Fatalf("ping after the failure: %v, want bus.ErrUnavailable (not ready)", err)
	}
	mu.Lock()
	if syncs != 1 {
		t.Errorf("%d fsyncs through the failing file, want 1", syncs)
	}
	mu.Unlock()

	// Reads go on.
	err = s.View(ctx, func(tx bus.Tx) error {
		_, err := tx.WorkspaceGet(ws)
		return err
	})
	if err != nil {
		t.Fatalf("read after the failure: %v", err)
	}
	if st, err := s.QueueStats(ctx, cons, t0); err != nil || st.Ready < 1 {
		t.Fatalf("queue stats after the failure: %+v, %v", st, err)
	}

	if n := strings.Count(logs.String(), "RESTART THE PROCESS"); n != 1 {
		t.Fatalf("the failure is logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("the failure is not logged as an error:\n%s", logs.String())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close of a failed store: %v", err)
	}

	// A restart recovers from what is on disk and takes writes again.
	s2, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Close() }()
	if err := s2.Update(ctx, func(tx bus.Tx) error {
		return tx.WorkspaceCreate(bus.Workspace{ID: bus.NewID("w"), Name: "after restart", CreatedAt: t0})
	}); err != nil {
		t.Fatalf("write after a restart: %v", err)
	}
	if errors.Is(s2.Ping(ctx), bus.ErrUnavailable) {
		t.Fatal("a restarted store is not ready")
	}
}

// TestFullDiskIsNotAFailedFsync: a write that finds the disk full (SQLite's
// SQLITE_FULL, here from a max_page_count the test sets; the kernel's
// ENOSPC on a write gives the same code) is refused as unavailable, its
// transaction rolls back and nothing is lost; the store is not put in its
// failed state, and once there is room it takes writes again without a
// restart. A failed fsync of the WAL, ENOSPC included, is different: the
// store then refuses writes until it is reopened. (The faulttest package
// fills a real filesystem under a running node.)
func TestFullDiskIsNotAFailedFsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "full.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ws, prod, cons := setupQueue(t, s, 5)
	publish := func(id string) error {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
		return err
	}
	setMaxPages := func(extra int) {
		t.Helper()
		err := s.w.do(ctx, func(d *dbq) error {
			var n int
			if err := d.row("PRAGMA page_count").Scan(&n); err != nil {
				return err
			}
			_, err := d.exec(fmt.Sprintf("PRAGMA max_page_count = %d", n+extra))
			return err
		})
		if err != nil {
			t.Fatalf("set max_page_count: %v", err)
		}
	}
	if err := publish("before"); err != nil {
		t.Fatal(err)
	}

	setMaxPages(0) // the database may not grow by a page
	var full error
	accepted := []string{"before"}
	for i := 0; full == nil; i++ {
		if i == 10000 {
			t.Fatal("10000 publishes fitted in a database that may not grow")
		}
		id := fmt.Sprintf("m%d", i)
		if full = publish(id); full == nil {
			accepted = append(accepted, id)
		}
	}
	if !bus.IsUnavailable(full) || !strings.Contains(full.Error(), "full") {
		t.Fatalf("publish on a full disk: %v, want bus.ErrUnavailable saying the disk is full", full)
	}
	if err := s.w.failure(); err != nil {
		t.Fatalf("a full disk put the store in its failed state: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping on a full disk: %v", err)
	}

	setMaxPages(1 << 20) // room again: writes go on, the same store
	if err := publish("after"); err != nil {
		t.Fatalf("publish once there is room: %v", err)
	}
	accepted = append(accepted, "after")
	got := map[string]bool{}
	for {
		res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: cons, Max: 10, Visibility: 60e9, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Deliveries) == 0 {
			break
		}
		for _, m := range res.Deliveries {
			got[m.MessageID] = true
		}
	}
	for _, id := range accepted {
		if !got[id] {
			t.Errorf("%s was accepted before or after the full disk and is gone", id)
		}
	}

	// ENOSPC from an fsync of the WAL: refused until a restart.
	s.setSyncFile(func(string) error { return syscall.ENOSPC })
	if err := publish("fsync-full"); !bus.IsUnavailable(err) {
		t.Fatalf("publish whose fsync failed with ENOSPC: %v, want bus.ErrUnavailable", err)
	}
	s.setSyncFile(nil)
	if err := publish("later"); !bus.IsUnavailable(err) || s.w.failure() == nil {
		t.Fatalf("publish after an fsync failed with ENOSPC: %v, want the failed state", err)
	}
}

// TestWALOpenFailureIsNotAFailedFsync: a WAL that cannot be opened for its
// fsync (too many open files) was never synced: the writes waiting for it
// are refused as unavailable, but the store is not put in its failed
// state. Once the WAL opens again it takes writes, and the refused write,
// committed all along, is there: a retried publish is a duplicate.
func TestWALOpenFailureIsNotAFailedFsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "emfile.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ws, prod, _ := setupQueue(t, s, 5)
	publish := func(id string) ([]bus.PublishOutcome, error) {
		return s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
	}
	s.setSyncFile(func(path string) error {
		return &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
	})
	if _, err := publish("m1"); !bus.IsUnavailable(err) {
		t.Fatalf("publish whose WAL could not be opened: %v, want bus.ErrUnavailable", err)
	}
	s.setSyncFile(nil)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after a WAL that would not open: %v, want ready", err)
	}
	if out, err := publish("m2"); err != nil || out[0].Duplicate {
		t.Fatalf("publish once the WAL opens: %+v, %v", out, err)
	}
	if out, err := publish("m1"); err != nil || !out[0].Duplicate {
		t.Fatalf("m1 published again: %+v, %v; want a duplicate (it was committed)", out, err)
	}
}

// TestWALOpenFailureReceiveGivesBack: a receive whose claim committed but
// whose fsync could not be made (the WAL would not open) is answered
// unavailable, and gives the messages back: ready at once, never
// delivered, so not dead-lettered at an attempt limit of 1.
func TestWALOpenFailureReceiveGivesBack(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 1)
	publishEach(t, s, ws, prod, "m0", "m1")
	var once sync.Once
	s.setSyncFile(func(path string) error {
		failed := false
		once.Do(func() { failed = true })
		if failed {
			return &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
		}
		return fsyncFile(path)
	})
	defer s.setSyncFile(nil)
	if _, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0}); !bus.IsUnavailable(err) {
		t.Fatalf("receive whose WAL would not open: %v, want unavailable", err)
	}
	receiveGivenBack(t, s, q, 2)
}

// TestHungFsyncTimedOutReceiveGivesBackAfterWALOpenFailure: a receive
// answered at its deadline, whose claim then commits but cannot be made
// durable (the WAL would not open), gives the messages back all the same.
func TestHungFsyncTimedOutReceiveGivesBackAfterWALOpenFailure(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 1)
	ctx := context.Background()
	publishEach(t, s, ws, prod, "m0")
	// The first fsync hangs (behind it the publish of m1), the second (the
	// claim's) cannot open the WAL, the others work.
	hung, hanging := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	s.setSyncFile(func(path string) error {
		switch calls.Add(1) {
		case 1:
			close(hanging)
			<-hung
		case 2:
			return &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
		}
		return fsyncFile(path)
	})
	defer s.setSyncFile(nil)
	published := make(chan error, 1)
	go func() {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg("m1", "s-m1")}, Now: t0, DedupWindow: bus.DedupWindow})
		published <- err
	}()
	<-hanging
	rctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, bus.ErrTimedOut)
	defer cancel()
	if _, err := s.MessageReceive(rctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0}); !bus.IsUnavailable(err) {
		t.Fatalf("receive past its deadline: %v, want unavailable", err)
	}
	close(hung)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	receiveGivenBack(t, s, q, 2)
}

// TestHungFsyncAnswersATimedOutCaller: a caller whose request reached the
// node's deadline (bus.ErrTimedOut) is answered unavailable though its
// write is committed and waits for an fsync that does not return (a disk
// that hangs); a caller without that deadline still waits for the outcome,
// which comes once the fsync does.
func TestHungFsyncAnswersATimedOutCaller(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, _ := setupQueue(t, s, 5)
	release := make(chan struct{})
	s.setSyncFile(func(path string) error {
		<-release
		return fsyncFile(path)
	})
	publish := func(ctx context.Context, id string) error {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- publish(context.Background(), "m0") }()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, bus.ErrTimedOut)
	defer cancel()
	start := time.Now()
	err := publish(ctx, "m1")
	if !bus.IsUnavailable(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("timed-out caller: %v after %v, want unavailable at its deadline", err, time.Since(start))
	}
	select {
	case err := <-waited:
		t.Fatalf("the caller without a deadline was answered (%v) before the fsync returned", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-waited; err != nil {
		t.Fatalf("after the fsync: %v", err)
	}
	s.setSyncFile(nil)
}

// TestHungFsyncTimedOutReceiveGivesBack: a receive answered unavailable at
// its deadline while its claim waited for a hung fsync gives the messages
// back once the claim commits: ready at once, never delivered, so not
// dead-lettered at an attempt limit of 1.
func TestHungFsyncTimedOutReceiveGivesBack(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 1)
	ctx := context.Background()
	publishEach(t, s, ws, prod, "m0", "m1")
	woken := make(chan string, 10)
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	go func() { _ = s.Listen(lctx, func(queueID string) { woken <- queueID }) }()
	release := hangBehindPublish(t, s, ws, prod)
	rctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, bus.ErrTimedOut)
	defer cancel()
	if _, err := s.MessageReceive(rctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0}); !bus.IsUnavailable(err) {
		t.Fatalf("receive past its deadline: %v, want unavailable", err)
	}
	release()
	receiveGivenBack(t, s, q, 3)
	select {
	case id := <-woken:
		if id != q {
			t.Fatalf("woke queue %s, want %s", id, q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the give-back woke no long poll of the queue")
	}
}

// TestGiveBackLandsWhenTheStoreCloses: a receive under way when Close
// begins, whose deadline passes while its claim waits for a hung fsync,
// still gives its messages back before the store stops (reopened, they are
// ready, never delivered); a write that comes after Close began is refused
// at once, not run.
func TestGiveBackLandsWhenTheStoreCloses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "close.db")
	ctx := context.Background()
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q := setupQueue(t, s, 1)
	publish := func(ctx context.Context, id string) error {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
		return err
	}
	publishEach(t, s, ws, prod, "m0", "m1")
	release := hangBehindPublish(t, s, ws, prod)
	received := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeoutCause(ctx, 400*time.Millisecond, bus.ErrTimedOut)
		defer cancel()
		_, err := s.MessageReceive(rctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0})
		received <- err
	}()
	waitBusy(t, s, 2) // the publish behind the hung fsync and the receive
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.w.busyMu.Lock()
		closing := s.w.closing
		s.w.busyMu.Unlock()
		if closing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not begin")
		}
	}
	// (Were it taken, it would wait behind the hung fsync to its deadline.)
	pctx, cancel := context.WithTimeoutCause(ctx, 2*time.Second, bus.ErrTimedOut)
	defer cancel()
	start := time.Now()
	if err := publish(pctx, "late"); !bus.IsUnavailable(err) || time.Since(start) > time.Second {
		t.Fatalf("a publish after Close began: %v after %v, want unavailable at once", err, time.Since(start))
	}
	if err := <-received; !errors.Is(err, bus.ErrTimedOut) {
		t.Fatalf("receive past its deadline: %v, want its time-out (taken before Close began)", err)
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	receiveGivenBack(t, s, q, 3) // given back before the close
}

// TestTimedOutCallerPanicIsLogged: a write whose caller was answered at its
// deadline and that then panics is logged, since nobody raises the panic.
func TestTimedOutCallerPanicIsLogged(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, bus.ErrTimedOut)
	defer cancel()
	err = s.w.do(ctx, func(d *dbq) error {
		time.Sleep(300 * time.Millisecond)
		panic("boom")
	})
	if !bus.IsUnavailable(err) {
		t.Fatalf("caller past its deadline: %v, want unavailable", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "boom"); {
		if time.Now().After(deadline) {
			t.Fatalf("the panic was not logged:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHungFsyncTimedOutReceiveWithAttemptKeepsItsClaim: a receive with an
// attempt id answered unavailable at its deadline keeps its claim: the
// client's retry with the same attempt id replays the same deliveries,
// which stay theirs to acknowledge (no give-back undoes them).
func TestHungFsyncTimedOutReceiveWithAttemptKeepsItsClaim(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	ctx := context.Background()
	publishEach(t, s, ws, prod, "m0", "m1")
	release := hangBehindPublish(t, s, ws, prod)
	recv := func(ctx context.Context) (*bus.ReceiveResult, error) {
		return s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0,
			AttemptID: "a1", AttemptWindow: bus.AttemptWindow})
	}
	rctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, bus.ErrTimedOut)
	defer cancel()
	if _, err := recv(rctx); !bus.IsUnavailable(err) {
		t.Fatalf("receive past its deadline: %v, want unavailable", err)
	}
	release()
	r, err := recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deliveries) != 3 || !r.Replayed {
		t.Fatalf("the retry got %d deliveries (replayed %v), want the 3 claimed, replayed", len(r.Deliveries), r.Replayed)
	}
	waitBusy(t, s, 0) // a give-back, if any, has landed
	res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range res {
		if !x.OK {
			t.Fatalf("ack of replayed delivery %d refused (%s): the claim was given back under the receiver", i, x.Code)
		}
	}
}

// waitBusy waits until the writer counts n calls under way (give-backs
// included), for at most 5 s.
func waitBusy(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.w.busyMu.Lock()
		busy := s.w.busy
		s.w.busyMu.Unlock()
		if busy == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer counts %d calls under way, want %d", busy, n)
		}
	}
}

// publishEach publishes one message for each id, on story "s-"+id.
func publishEach(t *testing.T, s *Store, ws, prod string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow}); err != nil {
			t.Fatal(err)
		}
	}
}

// receiveGivenBack receives from q until it has want messages or 5 s have
// passed (a give-back runs beside its refused receive), and checks that it
// got want messages, each delivered for the first time (the claim that
// was given back undone). A receive answered unavailable is tried again.
func receiveGivenBack(t *testing.T, s *Store, q string, want int) {
	t.Helper()
	var got []bus.Delivery
	for deadline := time.Now().Add(5 * time.Second); len(got) < want && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(time.Second)})
		if bus.IsUnavailable(err) {
			continue // e.g. in a batch whose WAL would not open
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Deliveries...)
	}
	if len(got) != want {
		t.Fatalf("received %d messages after the refused receive, want %d (given back)", len(got), want)
	}
	for _, d := range got {
		if d.ReceiveCount != 1 {
			t.Fatalf("%s delivered with receive count %d, want 1 (the refused claim undone)", d.MessageID, d.ReceiveCount)
		}
	}
}

// hangBehindPublish makes the WAL's fsync hang and publishes m2 (story
// s-m2) behind it: the writer's next transaction stays open, so the next
// operations run in it and wait. release lets the fsync through, waits for
// that publish and puts the real fsync back.
func hangBehindPublish(t *testing.T, s *Store, ws, prod string) (release func()) {
	t.Helper()
	hung, hanging := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.setSyncFile(func(path string) error {
		once.Do(func() { close(hanging) })
		<-hung
		return fsyncFile(path)
	})
	published := make(chan error, 1)
	go func() {
		_, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg("m2", "s-m2")}, Now: t0, DedupWindow: bus.DedupWindow})
		published <- err
	}()
	<-hanging // the publish's fsync hangs
	return func() {
		t.Helper()
		close(hung)
		if err := <-published; err != nil {
			t.Fatal(err)
		}
		s.setSyncFile(nil)
	}
}
