package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/sombus/sombus/internal/bus"
)

// TestInterpretError is the classification of driver errors: which are
// the database being out of reach (bus.ErrUnavailable, answered 503 with
// Retry-After) and which are faults (500), conflicts or missing rows.
func TestInterpretError(t *testing.T) {
	own := errors.New("fn's own")
	pgErr := func(code string) error { return &pgconn.PgError{Code: code, Message: "server says " + code} }
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		name        string
		in          error
		is          error // errors.Is target, if any
		unavailable bool  // errors.Is bus.ErrUnavailable
		retryable   bool
	}{
		{"no rows", fmt.Errorf("get: %w", pgx.ErrNoRows), bus.ErrNotFound, false, false},
		{"unique", pgErr("23505"), bus.ErrConflict, false, false},
		// Deadlocks and serialization failures are retried by run; one that
		// outlasts the retries is a fault, not unavailability.
		{"deadlock", pgErr("40P01"), nil, false, true},
		{"serialization", pgErr("40001"), nil, false, true},
		{"connection exception", pgErr("08006"), nil, true, false},
		{"connection does not exist", pgErr("08003"), nil, true, false},
		{"disk full", pgErr("53100"), nil, true, false},
		{"out of memory", pgErr("53200"), nil, true, false},
		{"too many connections", pgErr("53300"), nil, true, false},
		{"admin shutdown", pgErr("57P01"), nil, true, false},
		{"crash shutdown", pgErr("57P02"), nil, true, false},
		{"cannot connect now", pgErr("57P03"), nil, true, false},
		{"io error", pgErr("58030"), nil, true, false},
		{"undefined table", pgErr("42P01"), nil, false, false},
		{"syntax error", pgErr("42601"), nil, false, false},
		{"check violation", pgErr("23514"), nil, false, false},
		{"read only transaction", pgErr("25006"), nil, false, false},
		{"query canceled (statement_timeout)", pgErr("57014"), nil, true, false},
		{"lock timeout", pgErr("55P03"), nil, true, false},
		{"net error", fmt.Errorf("read: %w", opErr), nil, true, false},
		{"connection closed", fmt.Errorf("conn closed: %w", io.EOF), nil, true, false},
		{"cut short", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), nil, true, false},
		{"pool closed", fmt.Errorf("acquire: %w", puddle.ErrClosedPool), nil, true, false},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), context.DeadlineExceeded, true, false},
		{"cancelled", fmt.Errorf("query: %w", context.Canceled), context.Canceled, false, false},
		{"not the driver's", fmt.Errorf("wrapped: %w", own), own, false, false},
		{"a bug", errors.New("unexpected state"), nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := interpretError(c.in)
			if c.is != nil && !errors.Is(got, c.is) {
				t.Errorf("interpretError(%v) = %v, want errors.Is %v", c.in, got, c.is)
			}
			if bus.IsUnavailable(got) != c.unavailable {
				t.Errorf("interpretError(%v) = %v: unavailable %v, want %v", c.in, got, !c.unavailable, c.unavailable)
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

// TestUnreachableDatabase: a database nobody listens for, and a closed
// store, are unavailability (503), not faults.
func TestUnreachableDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nobody listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Open(ctx, "postgres://sombus@"+addr+"/x?connect_timeout=2", nil)
	if !bus.IsUnavailable(err) {
		t.Fatalf("open of an unreachable database: %v, want bus.ErrUnavailable", err)
	}
}

// TestClosedStoreIsUnavailable: calls on a closed store (its pool closed)
// are unavailability, as on the SQLite store.
func TestClosedStoreIsUnavailable(t *testing.T) {
	s := OpenTest(t)
	_ = s.Close()
	ctx := context.Background()
	if err := s.Ping(ctx); !bus.IsUnavailable(err) {
		t.Errorf("Ping after Close: %v, want bus.ErrUnavailable", err)
	}
	err := s.View(ctx, func(tx bus.Tx) error { _, err := tx.UserCount(); return err })
	if !bus.IsUnavailable(err) {
		t.Errorf("View after Close: %v, want bus.ErrUnavailable", err)
	}
}
