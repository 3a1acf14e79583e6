package bus_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/sqlite"
	"github.com/sombus/sombus/internal/store/storetest"
)

// sampleEnv is a service on a fresh SQLite store with a manual clock, a
// workspace holding one consumer and one producer, an operator and a
// viewer of the workspace.
type sampleEnv struct {
	svc                 *bus.Service
	store               bus.Store
	clock               *bus.ManualClock
	op, viewer          *bus.Actor
	ws, queue, producer string
}

func newSampleEnv(t *testing.T, cfg bus.Config) *sampleEnv {
	t.Helper()
	ctx := t.Context()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "bus.db"), storetest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := &sampleEnv{store: store, clock: bus.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}
	cfg.Store, cfg.Clock, cfg.Logger = store, e.clock, storetest.Logger(t)
	e.svc = bus.NewService(cfg)
	user := func(name string, operator bool) *bus.Actor {
		u := bus.User{ID: bus.NewID(bus.PrefixUser), Name: name, Email: name + "@example.com", Operator: operator, CreatedAt: e.clock.Now()}
		if err := store.Update(ctx, func(tx bus.Tx) error { return tx.UserCreate(u) }); err != nil {
			t.Fatal(err)
		}
		return &bus.Actor{User: u, Roles: map[string]bus.Role{}}
	}
	e.op, e.viewer = user("op", true), user("viewer", false)
	ws, err := e.svc.CreateWorkspace(ctx, e.op, "ws")
	if err != nil {
		t.Fatal(err)
	}
	e.ws = ws.ID
	if _, err := e.svc.SetMember(ctx, e.op, e.ws, e.viewer.User.ID, bus.RoleViewer); err != nil {
		t.Fatal(err)
	}
	e.viewer.Roles[e.ws] = bus.RoleViewer
	consumer, producer := bus.KindConsumer, bus.KindProducer
	c, err := e.svc.CreateConnection(ctx, e.op, e.ws, bus.ConnectionParams{Kind: &consumer, Name: ptr("c"), Subscriptions: &[]bus.Subscription{{Topic: "som.>"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.CreateConnection(ctx, e.op, e.ws, bus.ConnectionParams{Kind: &producer, Name: ptr("p")})
	if err != nil {
		t.Fatal(err)
	}
	e.queue, e.producer = c.ID, p.ID
	return e
}

func (e *sampleEnv) publish(t *testing.T, ids ...string) {
	t.Helper()
	var msgs []bus.PublishMessage
	for _, id := range ids {
		msgs = append(msgs, bus.PublishMessage{MessageID: id, MessageType: "a", Topic: "som.a", CorrelationID: id, Envelope: []byte(`{}`)})
	}
	if _, err := e.store.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: e.ws, ProducerID: e.producer, Now: e.clock.Now(),
		DedupWindow: time.Minute, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
}

func (e *sampleEnv) sample(t *testing.T, want int) {
	t.Helper()
	n, err := e.svc.Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("Sample at %s wrote %d samples, want %d", e.clock.Now().Format(time.TimeOnly), n, want)
	}
}

// TestSampleIntervalsAndKeep: with the clock moved by hand, the service
// samples each queue once per 10-second interval, under the interval's
// start, with the counts of the moment, and drops samples after 24 hours.
func TestSampleIntervalsAndKeep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newSampleEnv(t, bus.Config{})
	if e.svc.SampleEvery() != 10*time.Second {
		t.Fatalf("default SampleEvery = %s, want 10s", e.svc.SampleEvery())
	}
	start := e.clock.Now() // 03:04:05: the interval starts at 03:04:00
	e.publish(t, "m1", "m2")
	e.sample(t, 1)
	e.clock.Advance(4 * time.Second) // 03:04:09: still the same interval
	e.publish(t, "m3")
	e.sample(t, 0)
	e.clock.Advance(time.Second) // 03:04:10: the next one
	if _, err := e.store.MessageReceive(ctx, &bus.ReceiveParams{QueueID: e.queue, Max: 1, Visibility: time.Minute, Now: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	e.sample(t, 1)

	got, err := e.svc.QueueHistory(ctx, e.viewer, e.ws, e.queue, start.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []bus.QueueSample{
		{At: time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC), Ready: 2},
		{At: time.Date(2030, 1, 2, 3, 4, 10, 0, time.UTC), Ready: 2, InFlight: 1},
	}
	if !equalSamples(got, want) {
		t.Fatalf("QueueHistory = %+v, want %+v", got, want)
	}
	// since is inclusive and cuts older samples.
	if got, _ := e.svc.QueueHistory(ctx, e.viewer, e.ws, e.queue, want[1].At); !equalSamples(got, want[1:]) {
		t.Fatalf("QueueHistory since the second sample = %+v", got)
	}

	// A day later the first two intervals are gone; the new one is kept.
	e.clock.Advance(24*time.Hour + 5*time.Second) // 03:04:15 the next day
	e.sample(t, 1)
	got, err = e.svc.QueueHistory(ctx, e.viewer, e.ws, e.queue, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// Both samples of the first day are more than 24h old at 03:04:15.
	if !equalSamples(got, []bus.QueueSample{{At: want[1].At.Add(24 * time.Hour), Ready: 3}}) {
		t.Fatalf("after a day QueueHistory = %+v, want only the sample of 03:04:10 the next day", got)
	}
}

func equalSamples(a, b []bus.QueueSample) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].At.Equal(b[i].At) || a[i].Ready != b[i].Ready || a[i].InFlight != b[i].InFlight ||
			a[i].Delayed != b[i].Delayed || a[i].DeadLetters != b[i].DeadLetters {
			return false
		}
	}
	return true
}

// TestQueueHistoryRoles: any member may read a queue's history; others
// are told the workspace does not exist, and a producer has no queue.
func TestQueueHistoryRoles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newSampleEnv(t, bus.Config{})
	stranger := &bus.Actor{User: bus.User{ID: bus.NewID(bus.PrefixUser)}, Roles: map[string]bus.Role{}}
	for _, tc := range []struct {
		name string
		a    *bus.Actor
		ws   string
		id   string
		rule string
	}{
		{"viewer", e.viewer, e.ws, e.queue, ""},
		{"operator", e.op, e.ws, e.queue, ""},
		{"non-member", stranger, e.ws, e.queue, bus.RuleManageNotFound},
		{"producer", e.viewer, e.ws, e.producer, bus.RuleManageNotFound},
		{"unknown connection", e.viewer, e.ws, bus.NewID(bus.PrefixConnection), bus.RuleManageNotFound},
	} {
		_, err := e.svc.QueueHistory(ctx, tc.a, tc.ws, tc.id, time.Time{})
		var be *bus.Error
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.rule != "" && (!errors.As(err, &be) || be.Rule() != tc.rule):
			t.Errorf("%s: err = %v, want rule %s", tc.name, err, tc.rule)
		}
	}
}

// TestSamplerRunsInTheBackground: Start samples the queues every
// SampleEvery without being asked, and Stop ends it.
func TestSamplerRunsInTheBackground(t *testing.T) {
	t.Parallel()
	e := newSampleEnv(t, bus.Config{SampleEvery: 20 * time.Millisecond, MaintainEvery: time.Hour})
	e.publish(t, "m1")
	e.svc.Start()
	defer e.svc.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		got, err := e.svc.QueueHistory(ctx, e.op, e.ws, e.queue, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			if got[0].Ready != 1 || !got[0].At.Equal(e.clock.Now().Truncate(20*time.Millisecond)) {
				t.Fatalf("background sample = %+v", got[0])
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no sample within 10s of Start with SampleEvery 20ms")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
