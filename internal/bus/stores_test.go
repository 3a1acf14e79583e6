package bus_test

import (
	"path/filepath"
	"testing"

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
