package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// testLogger sends the store's log lines to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// reopenMigrated closes old, a store opened at an earlier schema
// (openUpTo), and opens its file again, which migrates it to the latest
// schema; the store is closed at the end of the test.
func reopenMigrated(t *testing.T, old *Store, path string) *Store {
	t.Helper()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openTemp opens a store in a fresh temporary file, closed at the end.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "sombus.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

var t0 = time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)

// setupQueue makes a workspace, a producer and one consumer subscribed to
// everything; it returns (workspace, producer, consumer) ids.
func setupQueue(t *testing.T, s *Store, attemptLimit int) (string, string, string) {
	t.Helper()
	ws, prod, cons := bus.NewID("w"), bus.NewID("c"), bus.NewID("c")
	err := s.Update(context.Background(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: t0}); err != nil {
			return err
		}
		for _, c := range []bus.Connection{
			{ID: prod, WorkspaceID: ws, Kind: bus.KindProducer, Name: "p", Status: bus.StatusActive, AttemptLimit: attemptLimit, QuotaTier: "standard", CreatedAt: t0, UpdatedAt: t0},
			{ID: cons, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "c", Status: bus.StatusActive, AttemptLimit: attemptLimit, QuotaTier: "standard",
				Subscriptions: []bus.Subscription{{Topic: "som.>"}}, CreatedAt: t0, UpdatedAt: t0},
		} {
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws, prod, cons
}

func msg(id, story string) bus.PublishMessage {
	return bus.PublishMessage{MessageID: id, MessageType: "story.context", Topic: "som.story.context",
		CorrelationID: story, Envelope: []byte(`{"message_id":"` + id + `"}`)}
}

func TestMigrationsApplyOnceAndRefuseNewer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	countRows := func(s *Store) (n, v int) {
		t.Helper()
		err := s.read(ctx, func(d *dbq) error {
			return d.row(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &v)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n, v
	}
	if n, v := countRows(s); n != latestVersion() || v != latestVersion() {
		t.Fatalf("schema_migrations has %d rows up to %d, want %d", n, v, latestVersion())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A second open applies nothing again.
	s, err = Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := countRows(s); n != latestVersion() {
		t.Fatalf("after reopen schema_migrations has %d rows, want %d", n, latestVersion())
	}
	// Pretend a newer binary migrated the file.
	err = s.w.do(ctx, func(d *dbq) error {
		_, err := d.exec(`INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, 'future.sql', 0)`, latestVersion()+1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open of a newer schema: got %v, want a refusal naming the newer version", err)
	}
}

func TestPragmas(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	var mode string
	var sync, fk int
	err := s.w.do(ctx, func(d *dbq) error {
		if err := d.row(`PRAGMA journal_mode`).Scan(&mode); err != nil {
			return err
		}
		if err := d.row(`PRAGMA synchronous`).Scan(&sync); err != nil {
			return err
		}
		return d.row(`PRAGMA foreign_keys`).Scan(&fk)
	})
	if err != nil {
		t.Fatal(err)
	}
	// synchronous NORMAL: the writer fsyncs the WAL itself (syncCommits).
	if mode != "wal" || sync != 1 || fk != 1 || !s.w.syncCommits {
		t.Fatalf("journal_mode %q synchronous %d foreign_keys %d syncCommits %v; want wal, 1 (NORMAL), 1, true", mode, sync, fk, s.w.syncCommits)
	}
	// The read pool refuses writes.
	err = s.View(ctx, func(tx bus.Tx) error {
		return tx.WorkspaceCreate(bus.Workspace{ID: "wx", Name: "x", CreatedAt: t0})
	})
	if err == nil {
		t.Fatal("a write in View succeeded")
	}
}

func TestGroupCommitAnswersEachCaller(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	errBoom := errors.New("boom")
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.Update(ctx, func(tx bus.Tx) error {
				// Every op writes; every third then fails, and every fifth
				// hits a uniqueness violation of its own making.
				id := fmt.Sprintf("w%03d", i)
				if err := tx.WorkspaceCreate(bus.Workspace{ID: id, Name: id, CreatedAt: t0}); err != nil {
					return err
				}
				switch {
				case i%5 == 0:
					return tx.WorkspaceCreate(bus.Workspace{ID: id, Name: "again", CreatedAt: t0})
				case i%3 == 0:
					return errBoom
				}
				return nil
			})
		}()
	}
	close(start)
	wg.Wait()
	want := 0
	for i, err := range errs {
		switch {
		case i%5 == 0:
			if !errors.Is(err, bus.ErrConflict) {
				t.Errorf("op %d: got %v, want ErrConflict", i, err)
			}
		case i%3 == 0:
			if !errors.Is(err, errBoom) {
				t.Errorf("op %d: got %v, want its own error", i, err)
			}
		default:
			want++
			if err != nil {
				t.Errorf("op %d: %v", i, err)
			}
		}
	}
	var got []bus.Workspace
	if err := s.View(ctx, func(tx bus.Tx) (err error) { got, err = tx.WorkspaceList(""); return }); err != nil {
		t.Fatal(err)
	}
	if len(got) != want {
		t.Fatalf("%d workspaces committed, want %d (only the successful ops)", len(got), want)
	}
	for _, w := range got {
		var i int
		_, _ = fmt.Sscanf(w.ID, "w%03d", &i)
		if i%5 == 0 || i%3 == 0 {
			t.Errorf("workspace %s of a failed op was committed", w.ID)
		}
	}
}

func TestCancelledBeforeRunIsNotRun(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := s.Update(ctx, func(tx bus.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("got %v, ran %v; want context.Canceled and not run", err, ran)
	}
}

func TestPanicInUpdateReachesCallerAndWriterSurvives(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want kaboom", r)
			}
		}()
		_ = s.Update(ctx, func(tx bus.Tx) error {
			_ = tx.WorkspaceCreate(bus.Workspace{ID: "wp", Name: "p", CreatedAt: t0})
			panic("kaboom")
		})
	}()
	if err := s.View(ctx, func(tx bus.Tx) error { _, err := tx.WorkspaceGet("wp"); return err }); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("write of the panicking op: got %v, want ErrNotFound", err)
	}
	if err := s.Update(ctx, func(tx bus.Tx) error { return tx.WorkspaceCreate(bus.Workspace{ID: "wq", Name: "q", CreatedAt: t0}) }); err != nil {
		t.Fatal(err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, prod, cons := setupQueue(t, s, 5)
	ws := ""
	if err := s.View(ctx, func(tx bus.Tx) error { c, err := tx.ConnectionGet(cons); ws = c.WorkspaceID; return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{msg("m1", "s1")}, Now: t0, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("ping after close: %v, want ErrUnavailable", err)
	}
	s, err = Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != path {
		t.Fatalf("Path() = %q, want %q", s.Path(), path)
	}
	res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: cons, Max: 10, Visibility: time.Minute, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deliveries) != 1 || res.Deliveries[0].MessageID != "m1" || string(res.Deliveries[0].Envelope) != `{"message_id":"m1"}` {
		t.Fatalf("after reopen got %+v", res.Deliveries)
	}
	if got := res.Deliveries[0].EnqueuedAt; !got.Equal(t0) || got.Location() != time.UTC {
		t.Fatalf("enqueued_at %v, want %v in UTC", got, t0)
	}
}

// TestConcurrentPublishReceiveAck runs 8 goroutines that publish, receive
// and ack over a few stories at once, and checks that every message is
// delivered, in order within its story, and that no story is ever handed
// out twice at once.
func TestConcurrentPublishReceiveAck(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, cons := setupQueue(t, s, 1000)
	const (
		workers    = 8
		stories    = 5
		perWorker  = 60
		total      = workers / 2 * perWorker
		visibility = time.Hour // no redelivery: the test clock does not move
	)
	var (
		published sync.Mutex // publishers of one story must not race (order = publish order)
		mu        sync.Mutex
		order     = map[string][]string{} // story -> message ids in publish order
		pos       = map[string]int{}      // story -> how many were received in order
		inFlight  = map[string]bool{}
		acked     atomic.Int64
		failed    atomic.Value
	)
	fail := func(format string, args ...any) { failed.CompareAndSwap(nil, fmt.Sprintf(format, args...)) }
	var wg sync.WaitGroup
	for w := range workers / 2 { // publishers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i += 3 {
				published.Lock()
				var ms []bus.PublishMessage
				for j := i; j < i+3; j++ {
					k := w*perWorker + j
					story := fmt.Sprintf("s%d", k%stories)
					ms = append(ms, msg(fmt.Sprintf("%s-%06d", story, k), story))
				}
				mu.Lock()
				for _, m := range ms {
					order[m.CorrelationID] = append(order[m.CorrelationID], m.MessageID)
				}
				mu.Unlock()
				_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0, DedupWindow: time.Minute})
				published.Unlock()
				if err != nil {
					fail("publish: %v", err)
					return
				}
			}
		}()
	}
	for range workers / 2 { // receivers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for acked.Load() < total && failed.Load() == nil {
				res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: cons, Max: 3, Visibility: visibility, Now: t0})
				if err != nil {
					fail("receive: %v", err)
					return
				}
				if len(res.Deliveries) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var hs []bus.Handle
				mu.Lock()
				for _, d := range res.Deliveries {
					if inFlight[d.CorrelationID] {
						fail("story %s handed out twice at once", d.CorrelationID)
					}
					inFlight[d.CorrelationID] = true
					hs = append(hs, d.Handle)
				}
				mu.Unlock()
				mu.Lock()
				for _, d := range res.Deliveries {
					story := d.CorrelationID
					if want := order[story][pos[story]]; d.MessageID != want {
						fail("story %s: got %s, want %s (publish order)", story, d.MessageID, want)
					}
					pos[story]++
					inFlight[story] = false
				}
				mu.Unlock()
				rs, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: cons, Handles: hs, Now: t0})
				if err != nil {
					fail("ack: %v", err)
					return
				}
				for _, r := range rs {
					if !r.OK {
						fail("ack failed: %+v", r)
					}
				}
				acked.Add(int64(len(rs)))
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	if got := acked.Load(); got != total {
		t.Fatalf("acked %d, want %d", got, total)
	}
	st, err := s.QueueStats(ctx, cons, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st != (bus.QueueStats{}) {
		t.Fatalf("stats after draining: %+v, want all zero", st)
	}
}

func TestCloseFinishesPendingAndRefusesLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Update(ctx, func(tx bus.Tx) error {
				return tx.WorkspaceCreate(bus.Workspace{ID: fmt.Sprintf("w%d", i), Name: "x", CreatedAt: t0})
			})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, bus.ErrUnavailable):
				refused.Add(1)
			default:
				t.Errorf("op %d: %v", i, err)
			}
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // no caller is left hanging
	if ok.Load()+refused.Load() != 100 {
		t.Fatalf("ok %d + refused %d != 100", ok.Load(), refused.Load())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestWALIsCheckpointedAndTruncated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	// Look every 10ms; anything past 64 KiB is too big.
	s, err := open(ctx, path, testLogger(t), walPolicy{every: 10 * time.Millisecond, limitBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ws, prod, _ := setupQueue(t, s, 5)
	big := make([]byte, 64<<10)
	for i := range 20 { // about 1.3 MB into the WAL
		m := msg(fmt.Sprint("m", i), "s")
		m.Envelope = big
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{m}, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 64<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAL is still %d bytes", fi.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Nothing was lost by the checkpoint.
	st, err := s.QueueStats(ctx, mustConsumer(t, s, ws), t0)
	if err != nil || st.Ready != 20 {
		t.Fatalf("stats after checkpoint: %+v, %v; want 20 ready", st, err)
	}
}

// mustConsumer returns the only consumer of a workspace.
func mustConsumer(t *testing.T, s *Store, ws string) string {
	t.Helper()
	var id string
	err := s.View(context.Background(), func(tx bus.Tx) error {
		cs, err := tx.ConnectionList(ws, bus.KindConsumer)
		if err == nil && len(cs) == 1 {
			id = cs[0].ID
		}
		return err
	})
	if err != nil || id == "" {
		t.Fatalf("consumer of %s: %v", ws, err)
	}
	return id
}

// TestAbandonedBatchRerunsTheOthers: when one operation loses the shared
// transaction (here it ends it itself), it gets an error and the other
// operations of its batch run again and commit.
func TestAbandonedBatchRerunsTheOthers(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	// Operations that form one batch, one of which ends the transaction:
	// the others may share the transaction that is lost, and then run again.
	const n = 20
	ops := make([]func() error, n)
	for i := range n {
		ops[i] = func() error {
			return s.Update(ctx, func(tx bus.Tx) error {
				return tx.WorkspaceCreate(bus.Workspace{ID: fmt.Sprintf("w%02d", i), Name: "x", CreatedAt: t0})
			})
		}
	}
	ops[n/2] = func() error {
		return s.w.do(ctx, func(d *dbq) error {
			_, err := d.exec("ROLLBACK") // the transaction is gone
			return err
		})
	}
	errs := inOneBatch(s, ops)
	for i, err := range errs {
		if i == n/2 {
			if err == nil {
				t.Errorf("the operation that ended the transaction got no error")
			}
			continue
		}
		if err != nil {
			t.Errorf("op %d: %v", i, err)
		}
	}
	var got []bus.Workspace
	if err := s.View(ctx, func(tx bus.Tx) (err error) { got, err = tx.WorkspaceList(""); return }); err != nil {
		t.Fatal(err)
	}
	if len(got) != n-1 {
		t.Fatalf("%d workspaces committed, want %d", len(got), n-1)
	}
}

func TestStoreParameters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, bad := range []string{"a.db?synchronous=off", "a.db?fast=1", "a.db?synchronous=full&synchronous=normal", "?synchronous=full", "a.db?x=%zz"} {
		if s, err := Open(context.Background(), filepath.Join(dir, bad), nil); err == nil {
			_ = s.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	for spec, want := range map[string]bool{"f.db": true, "f.db?synchronous=FULL": true, "n.db?synchronous=normal": false} {
		s, err := Open(context.Background(), filepath.Join(dir, spec), testLogger(t))
		if err != nil {
			t.Fatalf("Open(%q): %v", spec, err)
		}
		if s.w.syncCommits != want {
			t.Errorf("Open(%q): syncCommits %v, want %v", spec, s.w.syncCommits, want)
		}
		// Both answer their writes; the file's name has no parameters.
		ws, prod, _ := setupQueue(t, s, 5)
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg("m1", "s1")}, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
			t.Fatalf("%s: publish: %v", spec, err)
		}
		if _, err := os.Stat(filepath.Join(dir, strings.SplitN(spec, "?", 2)[0])); err != nil || strings.Contains(s.Path(), "?") {
			t.Errorf("%s: path %q, database file: %v", spec, s.Path(), err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// inOneBatch runs ops at once while the writer is held inside an
// operation, so that they queue up and form one batch when it lets go, and
// returns their errors.
func inOneBatch(s *Store, ops []func() error) []error {
	ctx := context.Background()
	hold, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		_ = s.w.do(ctx, func(d *dbq) error { once.Do(func() { close(held) }); <-hold; return nil })
	}()
	<-held
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = op()
		}()
	}
	for len(s.w.ops) < len(ops) { // every operation is waiting in the queue
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	return errs
}
