// Package store opens the store a --store value names: the embedded SQLite
// store (sqlite:PATH) or the PostgreSQL store (a postgres:// URL). Callers
// then know it as bus.Store only.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres"
	"github.com/sombus/sombus/internal/store/sqlite"
)

// The kinds of store.
const (
	KindSQLite   = "sqlite"
	KindPostgres = "postgres"
)

// Spec is a checked --store value.
type Spec struct {
	Kind string // KindSQLite or KindPostgres
	// Path is the SQLite database file (without its parameters).
	Path string
	// Target is what the store's Open takes: for SQLite the path with its
	// parameters, for PostgreSQL the URL.
	Target string
}

// ParseSpec checks a --store value without opening anything. A refusal
// says what is wrong and never repeats a password the value holds.
func ParseSpec(spec string) (Spec, error) {
	switch {
	case strings.HasPrefix(spec, "sqlite:"):
		target := strings.TrimPrefix(spec, "sqlite:")
		if target == "" {
			return Spec{}, errors.New("--store sqlite: needs a path, as in sqlite:./sombus.db")
		}
		path, err := sqlite.ParseSpec(target)
		if err != nil {
			return Spec{}, err
		}
		return Spec{Kind: KindSQLite, Path: path, Target: target}, nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		if _, err := pgxpool.ParseConfig(spec); err != nil {
			return Spec{}, fmt.Errorf("postgres: parse url: %w", maskedParseError(spec, err))
		}
		return Spec{Kind: KindPostgres, Target: spec}, nil
	}
	return Spec{}, errors.New("--store must be sqlite:PATH or a postgres:// URL")
}

// Open opens the store spec names. On error the store is nil (not a nil
// pointer in a non-nil interface).
func Open(ctx context.Context, spec string, log *slog.Logger) (bus.Store, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if s.Kind == KindSQLite {
		st, err := sqlite.Open(ctx, s.Target, log)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	st, err := postgres.Open(ctx, s.Target, log)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// maskedParseError is the refusal of a PostgreSQL URL that does not parse,
// without its passwords. pgx masks the password it finds, but a URL that
// does not parse may quote it in the parser's own words (a password with a
// space, say). So when the URL holds a password (Redact masks something),
// the refusal is that of the same URL with its passwords masked, or, if
// that one parses, a sentence saying the user information is malformed.
func maskedParseError(spec string, err error) error {
	masked := Redact(spec)
	if masked == spec {
		return err
	}
	if _, merr := pgxpool.ParseConfig(masked); merr != nil {
		return merr
	}
	return errors.New("the user name or password is malformed (percent-encode reserved characters and spaces, as %20)")
}
