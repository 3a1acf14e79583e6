package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sombus/sombus/internal/bus"
)

func TestInterpretError(t *testing.T) {
	own := errors.New("fn's own")
	for _, c := range []struct {
		name      string
		in        error
		is        error // errors.Is target, if any
		retryable bool
	}{
		{"no rows", fmt.Errorf("get: %w", pgx.ErrNoRows), bus.ErrNotFound, false},
		{"unique", &pgconn.PgError{Code: "23505", Message: "duplicate key"}, bus.ErrConflict, false},
		{"deadlock", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}, nil, true},
		{"serialization", &pgconn.PgError{Code: "40001", Message: "could not serialize"}, nil, true},
		{"shutdown", &pgconn.PgError{Code: "57P01", Message: "terminating"}, bus.ErrUnavailable, false},
		{"other server error", &pgconn.PgError{Code: "42P01", Message: "no such table"}, nil, false},
		{"not the driver's", fmt.Errorf("wrapped: %w", own), own, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := interpretError(c.in)
			if c.is != nil && !errors.Is(got, c.is) {
				t.Errorf("interpretError(%v) = %v, want errors.Is %v", c.in, got, c.is)
			}
			if isRetryable(got) != c.retryable {
				t.Errorf("isRetryable(%v) = %v, want %v", got, !c.retryable, c.retryable)
			}
			var pg *pgconn.PgError
			if errors.As(got, &pg) {
				t.Errorf("interpretError(%v) still carries a *pgconn.PgError", c.in)
			}
			if interpretError(got).Error() != got.Error() {
				t.Errorf("interpretError is not idempotent on %v", got)
			}
		})
	}
}
