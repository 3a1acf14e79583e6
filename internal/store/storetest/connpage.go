package storetest

import (
	"slices"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var connectionPageTests = []test{
	{"EveryConnectionOnce", testConnectionPages},
	{"PositionOfARemovedConnection", testConnectionPageAfterRemoval},
	{"StatsManyOneSnapshot", testStatsMany},
}

// connectionPages lists every page of ws's connections of kind, limit a
// page, and returns the ids in order and the number of pages.
func (e *env) connectionPages(ws string, kind bus.ConnectionKind, limit int) ([]string, int) {
	e.t.Helper()
	var ids []string
	var after *bus.ConnectionPosition
	for pages := 1; pages <= 1000; pages++ {
		var r bus.ConnectionPageResult
		e.view(func(tx bus.Tx) error {
			var err error
			r, err = tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: ws, Kind: kind, Limit: limit, After: after})
			return err
		})
		if len(r.Connections) > limit {
			e.t.Fatalf("ConnectionPage(limit %d) gave %d connections", limit, len(r.Connections))
		}
		for _, c := range r.Connections {
			ids = append(ids, c.ID)
		}
		if r.Next == nil {
			return ids, pages
		}
		if len(r.Connections) != limit {
			e.t.Fatalf("ConnectionPage(limit %d): a page of %d with more to follow", limit, len(r.Connections))
		}
		after = r.Next
	}
	e.t.Fatal("ConnectionPage never ends")
	return nil, 0
}

func (e *env) connectionList(ws string, kind bus.ConnectionKind) []bus.Connection {
	e.t.Helper()
	var l []bus.Connection
	e.view(func(tx bus.Tx) error {
		var err error
		l, err = tx.ConnectionList(ws, kind)
		return err
	})
	return l
}

func connIDsOf(cs []bus.Connection) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// testConnectionPages: pages of every size cover each connection of the
// workspace (of the kind asked) exactly once, in ConnectionList's order:
// by creation time, then by insertion; the last page says so.
func testConnectionPages(e *env) {
	ws, other := e.workspace(), e.workspace()
	var made []bus.Connection
	e.update(func(tx bus.Tx) error {
		for i := range 11 {
			kind := bus.KindConsumer
			if i%3 == 0 {
				kind = bus.KindProducer
			}
			c := connection(ws, kind, 5)
			// Several share a millisecond; one inserted late is older.
			c.CreatedAt = at(time.Duration(i/4) * time.Millisecond)
			if i == 9 {
				c.CreatedAt = at(-time.Second)
			}
			made = append(made, c)
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
			if err := tx.ConnectionCreate(connection(other, kind, 5)); err != nil {
				return err
			}
		}
		return nil
	})
	all := e.connectionList(ws, "")
	if len(all) != 11 || all[0].ID != made[9].ID || all[1].ID != made[0].ID || all[10].ID != made[10].ID {
		e.t.Fatalf("setup: ConnectionList = %q", connIDsOf(all))
	}
	for _, kind := range []bus.ConnectionKind{"", bus.KindConsumer, bus.KindProducer} {
		want := connIDsOf(e.connectionList(ws, kind))
		for limit := 1; limit <= len(want)+1; limit++ {
			got, pages := e.connectionPages(ws, kind, limit)
			if !slices.Equal(got, want) {
				e.t.Errorf("pages of %d (kind %q) = %q, want %q", limit, kind, got, want)
			}
			if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
				e.t.Errorf("pages of %d (kind %q): %d pages, want %d", limit, kind, pages, wantPages)
			}
		}
	}
	// Every field is read, as ConnectionGet reads it.
	e.view(func(tx bus.Tx) error {
		r, err := tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: ws, Limit: 100})
		if err != nil {
			return err
		}
		for i, c := range r.Connections {
			if d := connDiff(c, all[i]); d != "" {
				e.t.Errorf("ConnectionPage row %d: %s", i, d)
			}
		}
		if r.Next != nil {
			e.t.Errorf("one page of everything has Next %+v", r.Next)
		}
		// A workspace without connections has one empty page.
		r, err = tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: e.workspace(), Limit: 10})
		if err != nil || len(r.Connections) != 0 || r.Next != nil {
			e.t.Errorf("empty workspace: %+v, %v", r, err)
		}
		return nil
	})
}

// testConnectionPageAfterRemoval: a position holds when its connection is
// removed, and connections created since, being newer, come after it.
func testConnectionPageAfterRemoval(e *env) {
	ws := e.workspace()
	var made []string
	for range 4 {
		made = append(made, e.consumer(ws, 5))
	}
	var first bus.ConnectionPageResult
	e.view(func(tx bus.Tx) error {
		var err error
		first, err = tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: ws, Limit: 2})
		return err
	})
	if got := connIDsOf(first.Connections); !slices.Equal(got, made[:2]) || first.Next == nil {
		e.t.Fatalf("first page %q, next %+v", got, first.Next)
	}
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(made[1]) })
	newer := e.consumer(ws, 5)
	e.view(func(tx bus.Tx) error {
		r, err := tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: ws, Limit: 10, After: first.Next})
		if err != nil {
			return err
		}
		if got, want := connIDsOf(r.Connections), []string{made[2], made[3], newer}; !slices.Equal(got, want) || r.Next != nil {
			e.t.Errorf("after a removed connection: %q (next %+v), want %q", got, r.Next, want)
		}
		return nil
	})
}

// testStatsMany: QueueStatsMany counts each queue as QueueStats does, in
// one call, and leaves unknown ids out. (Every wantStats of this suite
// checks QueueStatsMany of that queue too.)
func testStatsMany(e *env) {
	f := e.fixture(5)
	q2 := e.consumer(f.WS, 1, "som.>")
	q3 := e.consumer(f.WS, 5, "som.other")
	e.pub(f, T0, "a", "a1", "a2")
	e.pub(f, at(time.Second), "b", "b1")
	now := at(2 * time.Second)
	ds := e.receive(f.Q, 10, time.Minute, now)
	wantIDs(e.t, ds, "a1", "b1")
	e.nackOK(f.Q, time.Hour, now, ds[1].Handle) // Q: a1 in flight, b1 delayed, a2 ready
	d2 := e.receive(q2, 10, time.Minute, now)
	wantIDs(e.t, d2, "a1", "b1")
	e.nackOK(q2, 0, now, d2[0].Handle) // q2: a1 dead-lettered (attempt limit 1), b1 in flight, a2 ready
	missing := bus.NewID(bus.PrefixConnection)
	got, err := e.s.QueueStatsMany(e.ctx, []string{f.Q, q2, q3, missing}, at(3*time.Second))
	if err != nil {
		e.t.Fatalf("QueueStatsMany: %v", err)
	}
	if _, ok := got[missing]; ok || len(got) != 3 {
		e.t.Errorf("QueueStatsMany = %+v, want three queues and no unknown one", got)
	}
	for _, q := range []string{f.Q, q2, q3} {
		if want := e.stats(q, at(3*time.Second)); !statsEqual(got[q], want) {
			e.t.Errorf("QueueStatsMany[%s] = %+v, QueueStats = %+v", q, got[q], want)
		}
	}
	if got[f.Q] != (bus.QueueStats{Ready: 1, InFlight: 1, Delayed: 1, OldestReadyAgeSeconds: 3}) ||
		got[q2] != (bus.QueueStats{Ready: 1, InFlight: 1, DeadLetters: 1, OldestReadyAgeSeconds: 3}) || got[q3] != (bus.QueueStats{}) {
		e.t.Errorf("QueueStatsMany = %+v", got)
	}
	none, err := e.s.QueueStatsMany(e.ctx, nil, T0)
	if err != nil || len(none) != 0 {
		e.t.Errorf("QueueStatsMany(none) = %+v, %v", none, err)
	}
}

func statsEqual(a, b bus.QueueStats) bool {
	return a.Ready == b.Ready && a.InFlight == b.InFlight && a.Delayed == b.Delayed && a.DeadLetters == b.DeadLetters &&
		approx(a.OldestReadyAgeSeconds, b.OldestReadyAgeSeconds)
}
