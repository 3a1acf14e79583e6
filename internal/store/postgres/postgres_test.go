package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// openURL opens another store (another "node") on url.
func openURL(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// appliedVersions lists schema_migrations of the store's schema.
func appliedVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrateConcurrentOpens(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 4
	stores := make([]*Store, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), url, testLogger(t)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	got := appliedVersions(t, stores[0])
	if len(got) != len(all) {
		t.Fatalf("schema_migrations = %v, want versions 1..%d once each", got, len(all))
	}
	for i, v := range got {
		if v != i+1 {
			t.Fatalf("schema_migrations = %v, want versions 1..%d once each", got, len(all))
		}
	}
	// Every node works on the one schema.
	for i, s := range stores {
		if err := s.Update(t.Context(), func(tx bus.Tx) error {
			return tx.WorkspaceCreate(bus.Workspace{ID: bus.NewID(bus.PrefixWorkspace), Name: fmt.Sprint(i), CreatedAt: time.Now()})
		}); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(t.Context(), url, testLogger(t))
	if err == nil {
		s2.Close()
		t.Fatal("Open succeeded on a schema newer than the binary")
	}
	if !strings.Contains(err.Error(), "9999") {
		t.Errorf("error %q does not name the database's version", err)
	}
}

func TestOpenReappliesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	before := appliedVersions(t, s)
	s2 := openURL(t, url)
	if after := appliedVersions(t, s2); len(after) != len(before) {
		t.Fatalf("second Open changed schema_migrations: %v -> %v", before, after)
	}
}

// listen starts s.Listen and returns the ids it hears.
func listen(t *testing.T, s *Store) <-chan string {
	ctx, cancel := context.WithCancel(t.Context())
	heard := make(chan string, 1024)
	done := make(chan error)
	go func() {
		done <- s.Listen(ctx, func(id string) {
			select {
			case heard <- id:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen returned %v, want nil at ctx end", err)
		}
	})
	return heard
}

// waitFor repeats send until want is heard (the listener may not be
// listening yet when the first notification goes out).
func waitFor(t *testing.T, heard <-chan string, want string, send func()) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	send()
	for {
		select {
		case id := <-heard:
			if id == want {
				return
			}
		case <-tick.C:
			send()
		case <-deadline:
			t.Fatalf("never heard %q", want)
		}
	}
}

func TestPostReachesOtherNode(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openURL(t, url), openURL(t, url)
	heard := listen(t, a)
	q1, q2 := bus.NewID(bus.PrefixConnection), bus.NewID(bus.PrefixConnection)
	waitFor(t, heard, q2, func() { b.notify.post([]string{q1, q2}) })
}

func TestPublishNotifiesOtherNode(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openURL(t, url), openURL(t, url)
	heard := listen(t, a)
	ws, prod, q := setupQueue(t, b, 5)
	n := 0
	waitFor(t, heard, q, func() {
		n++
		// A new story each time: only a new story makes the queue ready.
		m := testMessage(fmt.Sprint("m", n), fmt.Sprint("s", n))
		if _, err := b.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{m}, Now: time.Now()}); err != nil {
			t.Errorf("MessagePublish: %v", err)
		}
	})
}

func TestPayloadsSplit(t *testing.T) {
	var ids []string
	for range 1000 {
		ids = append(ids, bus.NewID(bus.PrefixConnection))
	}
	ps := payloads(ids)
	if len(ps) < 2 {
		t.Fatalf("%d payloads for 1000 ids, want several", len(ps))
	}
	var back []string
	for _, p := range ps {
		if len(p) > maxPayload {
			t.Errorf("payload of %d bytes", len(p))
		}
		back = append(back, strings.Split(p, ",")...)
	}
	if strings.Join(back, ",") != strings.Join(ids, ",") {
		t.Error("payloads do not carry the ids in order")
	}
}

// setupQueue makes a workspace with a producer and a consumer queue that
// takes every message.
func setupQueue(t testing.TB, s *Store, attemptLimit int) (ws, producer, queue string) {
	t.Helper()
	ws, producer, queue = bus.NewID(bus.PrefixWorkspace), bus.NewID(bus.PrefixConnection), bus.NewID(bus.PrefixConnection)
	now := time.Now()
	conn := func(id string, kind bus.ConnectionKind, subs []bus.Subscription) bus.Connection {
		return bus.Connection{ID: id, WorkspaceID: ws, Kind: kind, Name: string(kind), Status: bus.StatusActive,
			AttemptLimit: attemptLimit, QuotaTier: "standard", CredentialVersion: 1, Subscriptions: subs,
			CreatedAt: now, UpdatedAt: now, SecretState: bus.SecretNone}
	}
	err := s.Update(t.Context(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: now}); err != nil {
			return err
		}
		if err := tx.ConnectionCreate(conn(producer, bus.KindProducer, nil)); err != nil {
			return err
		}
		return tx.ConnectionCreate(conn(queue, bus.KindConsumer, []bus.Subscription{{Topic: "som.>"}}))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws, producer, queue
}

func testMessage(id, story string) bus.PublishMessage {
	return bus.PublishMessage{MessageID: id, MessageType: "t.x", Topic: bus.TopicOf("t.x"), CorrelationID: story,
		Envelope: []byte(`{"message_id":"` + id + `"}`)}
}

func TestListenReconnects(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	// A name of its own, so that only this test's listener is cut off.
	app := "sombus_listen_" + strings.ToLower(bus.NewID(""))[:12]
	a := openURL(t, url+"&application_name="+app)
	b := openURL(t, url)
	heard := listen(t, a)
	q := bus.NewID(bus.PrefixConnection)
	notify := func() { b.notify.post([]string{q}) }
	waitFor(t, heard, q, notify)

	// Cut the listening connection as a failover or a restart would.
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("terminated %d listening connections, want 1", n)
	}
	for len(heard) > 0 {
		<-heard
	}
	waitFor(t, heard, q, notify)
}
