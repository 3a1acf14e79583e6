package auth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

const (
	testIssuer = "https://sombus.test"
	testEnv    = "sandbox"
)

var t0 = time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)

func newSignerT(t *testing.T, store bus.Store, clock bus.Clock, audience string) *Signer {
	t.Helper()
	s, err := NewSigner(context.Background(), store, testIssuer, audience, clock, nil)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s
}

// addConn stores an active connection with an active secret and returns it
// with its plain secret.
func addConn(t *testing.T, store *fakeStore, clock bus.Clock, kind bus.ConnectionKind) (bus.Connection, string) {
	t.Helper()
	plain, hash := NewSecret()
	now := clock.Now()
	c := bus.Connection{
		ID:                bus.NewID(bus.PrefixConnection),
		WorkspaceID:       bus.NewID(bus.PrefixWorkspace),
		Kind:              kind,
		Name:              "test " + string(kind),
		Status:            bus.StatusActive,
		AttemptLimit:      5,
		QuotaTier:         "standard",
		CredentialVersion: 1,
		CreatedAt:         now,
		UpdatedAt:         now,
		SecretState:       bus.SecretActive,
		SecretHash:        hash,
		SecretIssuedAt:    &now,
	}
	store.put(c)
	return c, plain
}

// wantRefusal checks that err is a *bus.Error with rule (and its status).
func wantRefusal(t *testing.T, err error, rule string) *bus.Error {
	t.Helper()
	e, ok := bus.AsError(err)
	if !ok {
		t.Fatalf("want refusal %s, got %v", rule, err)
	}
	if e.Rule() != rule || e.Status != bus.StatusOf(rule) {
		t.Fatalf("want %s (%d), got %s (%d): %v", rule, bus.StatusOf(rule), e.Rule(), e.Status, e)
	}
	if len(e.Violations) != 1 || !strings.HasSuffix(e.Violations[0].Message, ".") {
		t.Fatalf("want one sentence, got %+v", e.Violations)
	}
	return e
}

// mustNotContain fails when any secret shows up in s.
func mustNotContain(t *testing.T, s string, secrets ...string) {
	t.Helper()
	for _, x := range secrets {
		if x != "" && strings.Contains(s, x) {
			t.Fatalf("%q leaks a secret", s)
		}
	}
}
