package sqlite

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

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
