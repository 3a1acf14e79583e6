package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/storetest"
)

// slowListStore pauses every read of a workspace's members in an Update,
// so that two Updates that read the members and then change one both read
// before either writes unless something orders them.
type slowListStore struct{ bus.Store }

type slowListTx struct{ bus.Tx }

func (t slowListTx) MemberListByWorkspace(workspaceID string) ([]bus.Member, error) {
	ms, err := t.Tx.MemberListByWorkspace(workspaceID)
	time.Sleep(300 * time.Millisecond)
	return ms, err
}

func (s slowListStore) Update(ctx context.Context, fn func(bus.Tx) error) error {
	return s.Store.Update(ctx, func(tx bus.Tx) error { return fn(slowListTx{tx}) })
}

// TestOwnersDemotingEachOtherKeepOne: a workspace's two owners demoted at
// the same moment on PostgreSQL: one demotion is taken and the other
// refused (409 manage.conflict), and an owner is left. Without an order
// between them, each found the other still an owner and both were taken.
func TestOwnersDemotingEachOtherKeepOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg, err := postgres.Open(ctx, pgtest.URL(t), storetest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	store := slowListStore{pg}
	clock := bus.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	svc := bus.NewService(bus.Config{Store: store, Clock: clock, Credentials: testCredentials{}, Logger: storetest.Logger(t)})
	user := func(name string) bus.User {
		u := bus.User{ID: bus.NewID(bus.PrefixUser), Name: name, Email: name + "@example.com", CreatedAt: clock.Now()}
		if err := pg.Update(ctx, func(tx bus.Tx) error { return tx.UserCreate(u) }); err != nil {
			t.Fatal(err)
		}
		return u
	}
	op := &bus.Actor{User: user("op"), Roles: map[string]bus.Role{}}
	op.User.Operator = true
	a, b := user("a"), user("b")
	ws, err := svc.CreateWorkspace(ctx, op, "ws")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []bus.User{a, b} {
		if _, err := svc.SetMember(ctx, op, ws.ID, u.ID, bus.RoleOwner); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.RemoveMember(ctx, op, ws.ID, op.User.ID); err != nil { // a and b are the owners
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, u := range []bus.User{a, b} {
		go func() {
			_, err := svc.SetMember(ctx, op, ws.ID, u.ID, bus.RoleAdmin)
			errs <- err
		}()
	}
	var taken, refused int
	for range 2 {
		err := <-errs
		if e, ok := bus.AsError(err); ok && e.Status == 409 && e.Rule() == bus.RuleManageConflict {
			refused++
		} else if err == nil {
			taken++
		} else {
			t.Errorf("a demotion: %v", err)
		}
	}
	if taken != 1 || refused != 1 {
		t.Fatalf("%d demotions taken and %d refused, want one of each (an owner left)", taken, refused)
	}
}
