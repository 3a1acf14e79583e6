// Package store opens the store a --store value names: the embedded SQLite
// store (sqlite:PATH) or the PostgreSQL store (a postgres:// URL). Callers
// then know it as bus.Store only.
package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres"
	"github.com/sombus/sombus/internal/store/sqlite"
)

// Open opens the store spec names. On error the store is nil (not a nil
// pointer in a non-nil interface).
func Open(ctx context.Context, spec string, log *slog.Logger) (bus.Store, error) {
	switch {
	case strings.HasPrefix(spec, "sqlite:"):
		path := strings.TrimPrefix(spec, "sqlite:")
		if path == "" {
			return nil, errors.New("--store sqlite: needs a path, as in sqlite:./sombus.db")
		}
		s, err := sqlite.Open(ctx, path, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		s, err := postgres.Open(ctx, spec, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, errors.New("--store must be sqlite:PATH or a postgres:// URL")
}
