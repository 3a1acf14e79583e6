package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/sqlite"
	"github.com/sombus/sombus/internal/store/storetest"
)

// TestConformance runs the store conformance suite (internal/store/SPEC.md)
// against a fresh SQLite database per subtest.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) bus.Store {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "test.db"), storetest.Logger(t))
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}
