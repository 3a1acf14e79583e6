package bus_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// vanishingStore removes a connection right after the service has read it
// in a View (armed with the connection's id), in a transaction of its own
// once that View ended: as a DELETE that commits between the service's
// check that the connection exists and its work with the store does. It
// reproduces, one at a time, what overlapping requests do. (A read in an
// Update cannot see the removal before the Update's own write: the
// embedded store runs one write transaction at a time, and PostgreSQL's
// Update locks the row it reads, TestUpdateReadsLockTheConnection. A
// removal before that read is the plain 404 of a missing connection.)
type vanishingStore struct {
	bus.Store
	armed string
}

type vanishingTx struct {
	bus.Tx
	s    *vanishingStore
	read bool // the View read the armed connection
}

func (t *vanishingTx) ConnectionGet(id string) (bus.Connection, error) {
	c, err := t.Tx.ConnectionGet(id)
	if err == nil && id == t.s.armed {
		t.read = true
	}
	return c, err
}

func (s *vanishingStore) View(ctx context.Context, fn func(bus.Tx) error) error {
	vt := &vanishingTx{s: s}
	err := s.Store.View(ctx, func(tx bus.Tx) error { vt.Tx = tx; return fn(vt) })
	if id := s.armed; vt.read && id != "" {
		s.armed = ""
		if derr := s.Store.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(id) }); derr != nil {
			return derr
		}
	}
	return err
}

// testCredentials makes random secrets with their plain bytes as hashes.
type testCredentials struct{}

func (testCredentials) NewSecret() (string, []byte) { p := rand.Text(); return p, []byte(p) }
func (testCredentials) NewAPIKey() (string, []byte) { p := rand.Text(); return p, []byte(p) }
func (testCredentials) Hash(p string) []byte        { return []byte(p) }
func (testCredentials) HashPassword(p string) string {
	return p
}
func (testCredentials) PasswordMatches(p, h string) bool { return h != "" && p == h }

// TestConnectionRemovedMeanwhileIsNotFound: every management call on a
// connection that checks it in one transaction and works with the store in
// another (skills, dead letters, redrive, purge) answers 404
// manage.not_found when the connection's removal commits in between (an
// overlapping DELETE of it), as the same call a moment later does, on both
// stores: never a 500 from the store's "not found" of the connection or
// its queue.
func TestConnectionRemovedMeanwhileIsNotFound(t *testing.T) {
	t.Parallel()
	type call struct {
		name string
		do   func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error
	}
	calls := []call{
		{name: "put skills", do: func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error {
			_, err := svc.PutSkills(ctx, a, ws, id, []bus.SkillRegistration{{InstanceID: "i1", Skill: "s", Name: "n", Values: json.RawMessage(`{}`)}})
			return err
		}},
		{name: "get skills", do: func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error {
			_, err := svc.GetSkills(ctx, a, ws, id)
			return err
		}},
		{name: "list dead letters", do: func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error {
			_, err := svc.ListDeadLetters(ctx, a, ws, id, 10, "")
			return err
		}},
		{name: "redrive", do: func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error {
			_, err := svc.Redrive(ctx, a, ws, id, nil)
			return err
		}},
		{name: "purge", do: func(ctx context.Context, svc *bus.Service, a *bus.Actor, ws, id string) error {
			_, err := svc.Purge(ctx, a, ws, id)
			return err
		}},
	}
	for name, open := range openStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := &vanishingStore{Store: open(t)}
			svc, op, ws, _ := operatorWorkspace(t, store)
			for _, c := range calls {
				v, err := svc.CreateConnection(ctx, op, ws, bus.ConnectionParams{Kind: ptr(bus.KindConsumer), Name: ptr(c.name),
					Subscriptions: &[]bus.Subscription{{Topic: "som.>"}}})
				if err != nil {
					t.Fatal(err)
				}
				store.armed = v.ID
				err = c.do(ctx, svc, op, ws, v.ID)
				if store.armed != "" {
					t.Fatalf("%s: the connection was never read, so never removed", c.name)
				}
				if e, ok := bus.AsError(err); !ok || e.Status != 404 || e.Rule() != bus.RuleManageNotFound {
					t.Errorf("%s of a connection removed meanwhile: %v, want 404 %s", c.name, err, bus.RuleManageNotFound)
				}
			}
		})
	}
}
