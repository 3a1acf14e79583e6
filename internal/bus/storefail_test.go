package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// faultyStore fails every read and every queue call with err.
type faultyStore struct {
	bus.Store
	err error
}

func (f *faultyStore) View(context.Context, func(bus.Tx) error) error { return f.err }
func (f *faultyStore) MessageReceive(context.Context, *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	return nil, f.err
}

// TestConsumerSkillsAndReceiveStoreErrors: the pull API answers 503 with
// its own rule only when the store is out of reach; any other store error
// is returned as an internal error (500), never a refusal; and the skills
// of a connection removed since its token was checked are 403
// producer.not_registered, on both stores.
func TestConsumerSkillsAndReceiveStoreErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		rule string // "" for an internal error
	}{
		{fmt.Errorf("connect: %w", bus.ErrUnavailable), ""},
		{errors.New("a bug"), ""},
	} {
		svc := bus.NewService(bus.Config{Store: &faultyStore{err: c.err}, Logger: storetest.Logger(t)})
		_, serr := svc.ConsumerSkills(ctx, "cx")
		_, rerr := svc.Receive(ctx, bus.ReceiveRequest{QueueID: "cx", Max: 1, Visibility: time.Minute})
		for name, got := range map[string]error{"skills": serr, "receive": rerr} {
			e, refused := bus.AsError(got)
			switch {
			case bus.IsUnavailable(c.err):
				want := map[string]string{"skills": bus.RuleSkillsUnavailable, "receive": bus.RuleQueueUnavailable}[name]
				if !refused || e.Status != 503 || e.Rule() != want || e.RetryAfter <= 0 {
					t.Errorf("%s on %v: %v, want 503 %s with a wait", name, c.err, got, want)
				}
			case refused || !errors.Is(got, c.err):
				t.Errorf("%s on %v: %v, want the error itself (500)", name, c.err, got)
			}
		}
	}

	for name, open := range openStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			svc := bus.NewService(bus.Config{Store: open(t), Logger: storetest.Logger(t)})
			_, err := svc.ConsumerSkills(ctx, bus.NewID("c"))
			if e, ok := bus.AsError(err); !ok || e.Rule() != bus.RuleNotRegistered {
				t.Fatalf("skills of a removed connection: %v, want 403 %s", err, bus.RuleNotRegistered)
			}
		})
	}
}
