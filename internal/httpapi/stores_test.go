package httpapi_test

import (
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// forEachStore runs fn against a node on a fresh SQLite file and one on a
// fresh PostgreSQL schema, in parallel subtests: both stores must answer
// the same.
func forEachStore(t *testing.T, fn func(t *testing.T, n *node)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, start(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, startWith(t, servertest.Options{Store: pgtest.URL(t)}))
	})
}
