package bus_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/sqlite"
	"github.com/sombus/sombus/internal/store/storetest"
)

// openStores open a fresh store of each kind, closed when the test that
// opened it ends: the embedded one in a temporary file, PostgreSQL in a
// database of the test's own (pgtest).
var openStores = map[string]func(t *testing.T) bus.Store{
	"sqlite": func(t *testing.T) bus.Store {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "bus.db"), storetest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
	"postgres": func(t *testing.T) bus.Store {
		s, err := postgres.Open(t.Context(), pgtest.URL(t), storetest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

// operatorWorkspace starts a service on store (clock, a manual one, and
// the test credentials) with an operator, whose user it adds to the store,
// and a workspace the operator made.
func operatorWorkspace(t *testing.T, store bus.Store) (svc *bus.Service, op *bus.Actor, ws string, clock *bus.ManualClock) {
	t.Helper()
	ctx := t.Context()
	clock = bus.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	svc = bus.NewService(bus.Config{Store: store, Clock: clock, Credentials: testCredentials{}, Logger: storetest.Logger(t)})
	op = &bus.Actor{User: bus.User{ID: bus.NewID(bus.PrefixUser), Name: "op", Email: "op@example.com", Operator: true, CreatedAt: clock.Now()}, Roles: map[string]bus.Role{}}
	if err := store.Update(ctx, func(tx bus.Tx) error { return tx.UserCreate(op.User) }); err != nil {
		t.Fatal(err)
	}
	w, err := svc.CreateWorkspace(ctx, op, "ws")
	if err != nil {
		t.Fatal(err)
	}
	return svc, op, w.ID, clock
}
