package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// waitAlone waits until s's notifier holds its posts: its check found no
// other listener.
func waitAlone(t *testing.T, s *Store) {
	t.Helper()
	waitNotifier(t, s, "the node never found itself alone on its database", func(n *notifier) bool { return n.alone })
}

// waitNotifier waits up to 10 s for cond of s's notifier (read under its
// lock), failing with what.
func waitNotifier(t *testing.T, s *Store, what string, cond func(n *notifier) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.notify.mu.Lock()
		ok := cond(s.notify)
		s.notify.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cycle publishes two messages of a new story on pub and receives and
// acknowledges them on sub, one at a time: the publish makes the queue
// ready, and so does the first ack (the story's next message).
func cycle(t *testing.T, pub, sub *Store, ws, prod, q string, n int) {
	t.Helper()
	ctx := t.Context()
	story := fmt.Sprint("cs", n)
	msgs := []bus.PublishMessage{testMessage(fmt.Sprint("c", n, "a"), story), testMessage(fmt.Sprint("c", n, "b"), story)}
	if _, err := pub.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: msgs, Now: time.Now()}); err != nil {
		t.Fatalf("MessagePublish: %v", err)
	}
	for range msgs {
		res, err := sub.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: time.Now()})
		if err != nil || len(res.Deliveries) != 1 {
			t.Fatalf("MessageReceive: %v, %d deliveries, want 1", err, len(res.Deliveries))
		}
		rs, err := sub.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{res.Deliveries[0].Handle}, Now: time.Now()})
		if err != nil || !rs[0].OK {
			t.Fatalf("MessageAck: %v %+v", err, rs)
		}
	}
}

// TestAloneSendsNoNotify: a node alone on its database (its own listener
// the only one) sends no NOTIFY for a publish, receive and ack, and sends
// them again once another node listens.
func TestAloneSendsNoNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t) // a database of its own: no other test's listeners
	a := openURL(t, url)
	listen(t, a)
	ws, prod, q := setupQueue(t, a, 5)
	waitAlone(t, a)
	before := a.notify.sent.Load()
	for i := range 5 {
		cycle(t, a, a, ws, prod, q, i)
	}
	if sent := a.notify.sent.Load() - before; sent != 0 {
		t.Fatalf("a node alone sent %d NOTIFY statements, want none", sent)
	}

	// A second node starts listening: a's writes are notified again.
	b := openURL(t, url)
	heard := listen(t, b)
	n := 100
	waitFor(t, heard, q, func() {
		n++
		cycle(t, a, a, ws, prod, q, n)
	})
	// The notifier counts a NOTIFY once its statement has returned, which
	// can be after b has heard it: wait for the count a little.
	for deadline := time.Now().Add(5 * time.Second); a.notify.sent.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a notified nothing with b listening")
		}
	}
}

// TestSecondNodeWokenAtOnce: a publish on a node that was alone, right
// after a second node's listener started, reaches that listener within a
// short time: at once through the second node's hello, or at the first
// node's next check, which sends what it held meanwhile.
func TestSecondNodeWokenAtOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a := openURL(t, url)
	listen(t, a)
	ws, prod, q := setupQueue(t, a, 5)
	b := openURL(t, url)
	for round := range 3 {
		waitAlone(t, a)
		// b's listener starts; a publishes once as soon as it listens.
		ctx, cancel := context.WithCancel(t.Context())
		heard := make(chan string, 64)
		done := make(chan error, 1)
		go func() {
			done <- b.Listen(ctx, func(id string) {
				select {
				case heard <- id:
				default:
				}
			})
		}()
		waitListeners(t, b, 2)
		start := time.Now()
		m := testMessage(fmt.Sprint("r", round), fmt.Sprint("rs", round))
		if _, err := a.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{m}, Now: time.Now()}); err != nil {
			t.Fatalf("MessagePublish: %v", err)
		}
		// checkEvery is 1 s; 3 s is room for a busy machine, far under a
		// poll's wait.
		timeout := time.After(3 * time.Second)
	wait:
		for {
			select {
			case id := <-heard:
				if id == q {
					t.Logf("round %d: heard after %v", round, time.Since(start))
					break wait
				}
			case <-timeout:
				t.Fatalf("round %d: b never heard the publish made right after it started listening", round)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Listen: %v", err)
		}
	}
}

// TestEarlierVersionListenerSeen: a listener that sends no hello (as a node
// of an earlier version) is seen by the next check, and the ids the node
// held meanwhile reach it then.
func TestEarlierVersionListenerSeen(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a := openURL(t, url)
	listen(t, a)
	waitAlone(t, a)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `LISTEN sombus_ready`); err != nil {
		t.Fatal(err)
	}
	q := bus.NewID(bus.PrefixConnection)
	a.notify.post([]string{q}) // most likely held: a has not checked since
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("the earlier version's listener never heard the held id: %v", err)
		}
		if n.Payload == q {
			return
		}
	}
}

// waitListeners waits until count sessions on s's database listen.
func waitListeners(t *testing.T, s *Store, count int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = $1`, listenStatement).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= count {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners, want %d", n, count)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNotifySpacedUnderLoad: ids posted faster than notifyGap go out
// together. A node (without a listener of its own, so it sends every post)
// posts a new queue id about every 50 µs for 300 ms; it sends at most one
// NOTIFY statement per notifyGap (and the first at once), and another
// node's listener hears every id.
func TestNotifySpacedUnderLoad(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a := openURL(t, url)
	b := openURL(t, url)
	ctx, cancel := context.WithCancel(t.Context())
	heard := make(chan string, 1<<16)
	done := make(chan error, 1)
	go func() { done <- b.Listen(ctx, func(id string) { heard <- id }) }()
	t.Cleanup(func() { cancel(); <-done })
	waitListeners(t, b, 1)

	before := a.notify.sent.Load()
	start := time.Now()
	posted := 0
	for time.Since(start) < 300*time.Millisecond {
		a.notify.post([]string{fmt.Sprint("q", posted)})
		posted++
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)

	missing := make(map[string]bool, posted)
	for i := range posted {
		missing[fmt.Sprint("q", i)] = true
	}
	deadline := time.After(10 * time.Second)
	for len(missing) > 0 {
		select {
		case id := <-heard:
			delete(missing, id)
		case <-deadline:
			t.Fatalf("%d of %d posted ids never heard", len(missing), posted)
		}
	}
	// The count goes up once a statement has returned, which can be
	// after the listener heard it.
	a.notify.close()
	sent := a.notify.sent.Load() - before
	limit := int64(elapsed/notifyGap) + 2
	t.Logf("%d ids posted in %v went out in %d NOTIFY statements", posted, elapsed, sent)
	if sent > limit {
		t.Fatalf("%d NOTIFY statements for %d ids posted in %v, want at most %d (one per %v)", sent, posted, elapsed, limit, notifyGap)
	}
}

// waitGated waits until s's notifier sends posts only for announced
// queues: its check saw only listeners that said hello with their pid.
func waitGated(t *testing.T, s *Store) {
	t.Helper()
	waitNotifier(t, s, "the node never sent its posts to announced queues only", func(n *notifier) bool { return n.gated })
}

// gatedPair opens two nodes listening on a database of their own and
// waits until each sends its posts to announced queues only; heard is
// what b's listener hears.
func gatedPair(t *testing.T) (url string, a, b *Store, heard <-chan string) {
	t.Helper()
	url = pgtest.Database(t)
	a, b = openURL(t, url), openURL(t, url)
	listen(t, a)
	heard = listen(t, b)
	waitGated(t, a)
	waitGated(t, b)
	return url, a, b, heard
}

// TestWaitsGateNotifications: with two nodes listening, a node sends no
// NOTIFY for a queue no poll of the other waits on; once the other
// announces a wait on it, the post kept meanwhile reaches it, and so do
// the later ones.
func TestWaitsGateNotifications(t *testing.T) {
	t.Parallel()
	_, a, b, heard := gatedPair(t)
	ws, prod, q := setupQueue(t, a, 5)
	before := a.notify.sent.Load()
	cycle(t, a, a, ws, prod, q, 1)
	if sent := a.notify.sent.Load() - before; sent != 0 {
		t.Fatalf("a sent %d NOTIFY statements for a queue nobody waits on, want none", sent)
	}
	for len(heard) > 0 {
		<-heard
	}

	// b is about to wait on q: it says so, and hears the post a kept.
	announced, err := b.WaitAnnounce(t.Context(), q)
	if err != nil || !announced {
		t.Fatalf("WaitAnnounce: %v, %v; want an announcement", announced, err)
	}
	expectHeard(t, heard, q, "the post a kept before b's announcement")
	if again, err := b.WaitAnnounce(t.Context(), q); err != nil || again {
		t.Fatalf("WaitAnnounce again at once: %v, %v; want no second announcement", again, err)
	}

	// a's next changes of q go out at once.
	cycle(t, a, a, ws, prod, q, 2)
	expectHeard(t, heard, q, "a change after b's announcement")
}

// expectHeard waits up to 5 s for want on heard.
func expectHeard(t *testing.T, heard <-chan string, want, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case id := <-heard:
			if id == want {
				return
			}
		case <-timeout:
			t.Fatalf("never heard %s", what)
		}
	}
}

// TestWaitsAnnouncedAgainToNewNode: a node that starts listening hears the
// queues the other node's polls wait on (the answer to its hello), and
// sends them its changes once it gates its posts.
func TestWaitsAnnouncedAgainToNewNode(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	b := openURL(t, url)
	heard := listen(t, b)
	ws, prod, q := setupQueue(t, b, 5)
	waitAlone(t, b)
	// Alone, b announces nothing but remembers the wait.
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || announced {
		t.Fatalf("WaitAnnounce alone: %v, %v; want no announcement", announced, err)
	}
	a := openURL(t, url)
	listen(t, a)
	waitGated(t, a)
	for len(heard) > 0 {
		<-heard
	}
	cycle(t, a, a, ws, prod, q, 1)
	expectHeard(t, heard, q, "a's change of the queue b waited on before a listened")
}

// TestWaitsRefreshedInBackground: a poll on a queue whose announcement
// holds waits without announcing again, and the node's checks renew the
// announcement in the background once it is interestRenew old: the other
// node's interest is extended.
func TestWaitsRefreshedInBackground(t *testing.T) {
	t.Parallel()
	_, a, b, _ := gatedPair(t)
	b.notify.mu.Lock()
	b.notify.renew = 50 * time.Millisecond
	b.notify.mu.Unlock()
	q := bus.NewID(bus.PrefixConnection)
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || !announced {
		t.Fatalf("first WaitAnnounce: %v, %v; want an announcement", announced, err)
	}
	until := func() time.Time {
		a.notify.mu.Lock()
		defer a.notify.mu.Unlock()
		return a.notify.interest[q]
	}
	deadline := time.Now().Add(5 * time.Second)
	for until().IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("a never heard b's announcement")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := until()
	time.Sleep(100 * time.Millisecond)
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || announced {
		t.Fatalf("WaitAnnounce while the announcement holds: %v, %v; want none (the checks renew it)", announced, err)
	}
	for !until().After(first) {
		if time.Now().After(deadline) {
			t.Fatal("a's interest in the queue was never extended by b's refresh")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWaitsSaidWithHello: a node's hello carries the queues its polls may
// be waiting on, so a node that listened while this one's listener was
// away (and missed its announcement) still sends it their changes.
func TestWaitsSaidWithHello(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	b := openURL(t, url)
	q := bus.NewID(bus.PrefixConnection)
	// b's poll announces its wait while nobody listens: nobody hears it.
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || !announced {
		t.Fatalf("WaitAnnounce: %v, %v; want an announcement", announced, err)
	}
	a := openURL(t, url)
	listen(t, a)
	waitAlone(t, a) // a listens before b does: b hears no hello to answer
	heard := listen(t, b)
	waitGated(t, a)
	a.notify.post([]string{q})
	expectHeard(t, heard, q, "a's post of the queue b's hello said it waits on")
}

// TestWaitsHeldAnnouncementsToNewNode: a node answers a new node's hello
// with the queues whose announcement its polls may still rely on, not
// only those polled in the last seconds: a poll that comes back after a
// pause waits without announcing again, and the new node must send it the
// queue's changes.
func TestWaitsHeldAnnouncementsToNewNode(t *testing.T) {
	t.Parallel()
	url, _, b, heard := gatedPair(t)
	q := bus.NewID(bus.PrefixConnection)
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || !announced {
		t.Fatalf("WaitAnnounce: %v, %v; want an announcement", announced, err)
	}
	// The poll's last look is long past (its client paused); its
	// announcement still holds.
	b.notify.mu.Lock()
	b.notify.wanted = nil
	b.notify.mu.Unlock()
	c := openURL(t, url)
	listen(t, c)
	waitGated(t, c)
	if announced, err := b.WaitAnnounce(t.Context(), q); err != nil || announced {
		t.Fatalf("WaitAnnounce after the pause: %v, %v; want none (the announcement holds)", announced, err)
	}
	for len(heard) > 0 {
		<-heard
	}
	c.notify.post([]string{q})
	expectHeard(t, heard, q, "the new node's post of a queue b announced before it listened")
}
