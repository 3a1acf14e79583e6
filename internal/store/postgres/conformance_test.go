package postgres_test

import (
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres"
	"github.com/sombus/sombus/internal/store/storetest"
)

// TestConformance runs the store conformance suite (internal/store/SPEC.md)
// against a fresh schema per subtest of the database named by
// SOMBUS_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test).
// An unreachable database fails the test under CI=true and skips it
// elsewhere (postgres.OpenTest).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) bus.Store { return postgres.OpenTest(t) })
}
