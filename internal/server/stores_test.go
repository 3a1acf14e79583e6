package server_test

import (
	"go/build"
	"testing"

	"github.com/sombus/sombus/internal/server"
	"github.com/sombus/sombus/internal/store/postgres"
)

// The PostgreSQL store offers the node its shared start-up lock and limits
// through the server's optional interfaces; a change of signature on either
// side would silently fall back to in-process limits.
var (
	_ server.StartupLocker       = (*postgres.Store)(nil)
	_ server.RateLimiterStore    = (*postgres.Store)(nil)
	_ server.FailureLimiterStore = (*postgres.Store)(nil)
)

// TestServerKnowsNoStoreType checks that the server package works on
// bus.Store and the optional interfaces alone: it imports no store package
// (opening a store by its --store value is the store package's job).
func TestServerKnowsNoStoreType(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch imp {
		case "github.com/sombus/sombus/internal/store/postgres", "github.com/sombus/sombus/internal/store/sqlite":
			t.Errorf("package server imports %s; it should know stores only as bus.Store", imp)
		}
	}
}
