package auth

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/sqlite"
)

// TestWithSQLiteStore runs the whole credential path on the real SQLite
// store: shared signing key and handle key, token exchange, checks, and a
// revoke seen through the cache window.
func TestWithSQLiteStore(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sombus.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	clock := bus.NewManualClock(t0)

	// Two nodes: one signing key, one handle key.
	a := newSignerT(t, store, clock, testEnv)
	b := newSignerT(t, store, clock, testEnv)
	if a.signKid != b.signKid {
		t.Fatalf("nodes sign with %s and %s", a.signKid, b.signKid)
	}
	k1, err := LoadHandleKey(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := LoadHandleKey(ctx, store)
	if !bytes.Equal(k1, k2) || len(k1) != 32 {
		t.Fatal("handle keys differ")
	}

	// A consumer connection with a secret.
	plain, hash := NewSecret()
	now := clock.Now()
	ws := bus.Workspace{ID: bus.NewID(bus.PrefixWorkspace), Name: "w", CreatedAt: now}
	conn := bus.Connection{
		ID: bus.NewID(bus.PrefixConnection), WorkspaceID: ws.ID, Kind: bus.KindConsumer, Name: "c",
		Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CredentialVersion: 1,
		CreatedAt: now, UpdatedAt: now, SecretState: bus.SecretActive, SecretHash: hash, SecretIssuedAt: &now,
	}
	if err := store.Update(ctx, func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(ws); err != nil {
			return err
		}
		return tx.ConnectionCreate(conn)
	}); err != nil {
		t.Fatal(err)
	}

	svc := NewTokenService(store, a, clock, NewMemoryFailureLimiter(clock))
	res, oe := svc.Exchange(ctx, conn.ID, plain, "192.0.2.1:1")
	if oe != nil {
		t.Fatal(oe)
	}
	if _, oe := svc.Exchange(ctx, conn.ID, "sbs_wrong", "192.0.2.1:1"); oe == nil || oe.Code != OAuthInvalidClient {
		t.Fatalf("wrong secret: %v", oe)
	}

	checker := NewChecker(store, b, clock, DefaultCheckTTL)
	if _, err := checker.Check(ctx, res.AccessToken, bus.KindConsumer, ws.ID, conn.ID); err != nil {
		t.Fatal(err)
	}

	// Revoked on node a: node b's checks refuse once the cache window ends.
	if err := store.Update(ctx, func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(conn.ID)
		if err != nil {
			return err
		}
		c.Status = bus.StatusRevoked
		return tx.ConnectionUpdate(c)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := checker.Check(ctx, res.AccessToken, bus.KindConsumer, ws.ID, conn.ID); err != nil {
		t.Fatalf("within the window: %v", err)
	}
	clock.Advance(DefaultCheckTTL)
	_, err = checker.Check(ctx, res.AccessToken, bus.KindConsumer, ws.ID, conn.ID)
	wantRefusal(t, err, bus.RuleNotRegistered)
	if _, oe := svc.Exchange(ctx, conn.ID, plain, "192.0.2.1:1"); oe == nil || oe.Code != OAuthInvalidClient {
		t.Fatalf("revoked connection got a token: %v", oe)
	}

	// Removed: 403 after the window.
	if err := store.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(conn.ID) }); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultCheckTTL + time.Second)
	_, err = checker.Check(ctx, res.AccessToken, bus.KindConsumer, ws.ID, conn.ID)
	wantRefusal(t, err, bus.RuleNotRegistered)
}

// TestSQLiteSignersStartingTogether: nodes that make keys at the same time
// still verify each other's tokens (an unknown kid makes them re-read).
func TestSQLiteSignersStartingTogether(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sombus.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	clock := bus.NewManualClock(t0)
	signers := make([]*Signer, 4)
	errs := make(chan error, len(signers))
	for i := range signers {
		go func() {
			var err error
			signers[i], err = NewSigner(ctx, store, testIssuer, testEnv, clock, nil)
			errs <- err
		}()
	}
	for range signers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(keyReloadInterval) // let unknown kids trigger a reload
	for _, from := range signers {
		tok := mustIssue(t, from)
		for _, to := range signers {
			if _, err := to.Verify(tok); err != nil {
				t.Fatalf("cross-node verify: %v", err)
			}
		}
	}
}
