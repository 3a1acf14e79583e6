package auth

import (
	"context"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// fakeStore is a TEST FAKE of bus.Store: an in-memory map behind the few Tx
// methods auth uses (connections, signing keys, server secrets). Every other
// method panics through the nil embedded interfaces. It stands in until the
// SQLite store (internal/store/sqlite) is usable from these tests.
type fakeStore struct {
	bus.Store // nil: unused methods panic

	mu      sync.Mutex
	conns   map[string]bus.Connection
	keys    []bus.SigningKey
	secrets map[string][]byte
	views   int           // View calls, to see cache hits
	fail    error         // when set, View and Update return it
	delay   time.Duration // each View takes this long (a store across a network)
	// onKeyCreate, when set, runs before SigningKeyCreate (to let "another
	// node" win the race) and its error is returned.
	onKeyCreate func(f *fakeTx) error
}

func newFakeStore() *fakeStore {
	return &fakeStore{conns: map[string]bus.Connection{}, secrets: map[string][]byte{}}
}

type fakeTx struct {
	bus.Tx // nil: unused methods panic
	s      *fakeStore
}

func (f *fakeStore) Update(_ context.Context, fn func(tx bus.Tx) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	return fn(&fakeTx{s: f})
}

func (f *fakeStore) View(_ context.Context, fn func(tx bus.Tx) error) error {
	f.mu.Lock()
	d := f.delay
	f.mu.Unlock()
	time.Sleep(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views++
	if f.fail != nil {
		return f.fail
	}
	return fn(&fakeTx{s: f})
}

func (f *fakeStore) viewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.views
}

// put writes a connection directly, as another node would.
func (f *fakeStore) put(c bus.Connection) {
	f.mu.Lock()
	f.conns[c.ID] = c
	f.mu.Unlock()
}

func (f *fakeStore) get(id string) bus.Connection {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[id]
}

func (f *fakeStore) remove(id string) {
	f.mu.Lock()
	delete(f.conns, id)
	f.mu.Unlock()
}

func (t *fakeTx) ConnectionGet(id string) (bus.Connection, error) {
	c, ok := t.s.conns[id]
	if !ok {
		return bus.Connection{}, bus.ErrNotFound
	}
	return c, nil
}

// ConnectionList lists the workspace's connections (in no order: the
// Checker does not need one).
func (t *fakeTx) ConnectionList(workspaceID string, kind bus.ConnectionKind) ([]bus.Connection, error) {
	var out []bus.Connection
	for _, c := range t.s.conns {
		if c.WorkspaceID == workspaceID && (kind == "" || c.Kind == kind) {
			out = append(out, c)
		}
	}
	return out, nil
}

// ConnectionStates lists the workspace's connections' token-check fields.
func (t *fakeTx) ConnectionStates(workspaceID string) ([]bus.ConnectionState, error) {
	var out []bus.ConnectionState
	for _, c := range t.s.conns {
		if c.WorkspaceID == workspaceID {
			out = append(out, c.State())
		}
	}
	return out, nil
}

func (t *fakeTx) SigningKeyList() ([]bus.SigningKey, error) {
	return append([]bus.SigningKey(nil), t.s.keys...), nil
}

func (t *fakeTx) SigningKeyCreate(k bus.SigningKey) error {
	if t.s.onKeyCreate != nil {
		hook := t.s.onKeyCreate
		t.s.onKeyCreate = nil
		if err := hook(t); err != nil {
			return err
		}
	}
	for _, e := range t.s.keys {
		if e.ID == k.ID {
			return bus.ErrConflict
		}
	}
	t.s.keys = append(t.s.keys, k)
	return nil
}

func (t *fakeTx) ServerSecret(name string, fresh []byte) ([]byte, error) {
	if v, ok := t.s.secrets[name]; ok {
		return append([]byte(nil), v...), nil
	}
	t.s.secrets[name] = append([]byte(nil), fresh...)
	return append([]byte(nil), fresh...), nil
}
