package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var managementTests = []test{
	{"UpdateCommitsAndRollsBack", testUpdateRollback},
	{"Users", testUsers},
	{"UserErrors", testUserErrors},
	{"APIKeys", testAPIKeys},
	{"Workspaces", testWorkspaces},
	{"Members", testMembers},
	{"Connections", testConnections},
	{"ConnectionErrors", testConnectionErrors},
	{"ConnectionDeleteRemovesQueue", testConnectionDelete},
	{"Skills", testSkills},
	{"SkillsOfARemovedConnection", testSkillsRemovedConnection},
	{"Audit", testAudit},
	{"AuditPaging", testAuditPaging},
	{"SigningKeys", testSigningKeys},
	{"ServerSecret", testServerSecret},
	{"ServerSecretConcurrent", testServerSecretConcurrent},
	{"TimesUTCMilliseconds", testTimes},
	{"Ping", func(e *env) {
		if err := e.s.Ping(e.ctx); err != nil {
			e.t.Fatalf("Ping: %v", err)
		}
	}},
}

func user(email string) bus.User {
	return bus.User{ID: bus.NewID(bus.PrefixUser), Name: "user " + email, Email: email, CreatedAt: T0}
}

// wantErr wants errors.Is(err, target).
func (e *env) wantErr(what string, err, target error) {
	e.t.Helper()
	if !errors.Is(err, target) {
		e.t.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

func testUpdateRollback(e *env) {
	u := user("rollback@example.com")
	boom := errors.New("boom")
	err := e.s.Update(e.ctx, func(tx bus.Tx) error {
		if err := tx.UserCreate(u); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	e.wantErr("Update returning an error", err, boom)
	e.view(func(tx bus.Tx) error {
		_, err := tx.UserGet(u.ID)
		e.wantErr("UserGet after rolled back create", err, bus.ErrNotFound)
		n, err := tx.UserCount()
		if err != nil || n != 0 {
			e.t.Errorf("UserCount after rollback = %d, %v; want 0", n, err)
		}
		return nil
	})
	e.update(func(tx bus.Tx) error { return tx.UserCreate(u) })
	e.view(func(tx bus.Tx) error {
		_, err := tx.UserGet(u.ID)
		if err != nil {
			e.t.Errorf("UserGet after committed create: %v", err)
		}
		return nil
	})
}

func testUsers(e *env) {
	a := user("Alice@Example.com")
	a.Operator = true
	b := user("bob@example.com")
	b.CreatedAt = at(time.Second)
	e.view(func(tx bus.Tx) error {
		n, err := tx.UserCount()
		if err != nil || n != 0 {
			e.t.Errorf("UserCount of an empty store = %d, %v", n, err)
		}
		return nil
	})
	e.update(func(tx bus.Tx) error {
		if err := tx.UserCreate(a); err != nil {
			return err
		}
		return tx.UserCreate(b)
	})
	e.view(func(tx bus.Tx) error {
		for _, want := range []bus.User{a, b} {
			got, err := tx.UserGet(want.ID)
			if err != nil {
				e.t.Errorf("UserGet: %v", err)
				continue
			}
			if got.ID != want.ID || got.Name != want.Name || got.Email != want.Email || got.Operator != want.Operator || !got.CreatedAt.Equal(want.CreatedAt) {
				e.t.Errorf("UserGet = %+v, want %+v", got, want)
			}
		}
		n, err := tx.UserCount()
		if err != nil || n != 2 {
			e.t.Errorf("UserCount = %d, %v; want 2", n, err)
		}
		_, err = tx.UserGet(bus.NewID(bus.PrefixUser))
		e.wantErr("UserGet of a missing user", err, bus.ErrNotFound)
		return nil
	})
}

func testUserErrors(e *env) {
	a := user("carol@example.com")
	e.update(func(tx bus.Tx) error { return tx.UserCreate(a) })

	dupID := user("other@example.com")
	dupID.ID = a.ID
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.UserCreate(dupID) })
	e.wantErr("UserCreate with a duplicate id", err, bus.ErrConflict)

	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.UserCreate(user("carol@example.com")) })
	e.wantErr("UserCreate with a duplicate email", err, bus.ErrConflict)

	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.UserCreate(user("CAROL@Example.COM")) })
	e.wantErr("UserCreate with a duplicate email in other case", err, bus.ErrConflict)

	e.view(func(tx bus.Tx) error {
		n, err := tx.UserCount()
		if err != nil || n != 1 {
			e.t.Errorf("UserCount after refused creates = %d, %v; want 1", n, err)
		}
		return nil
	})
}

func testAPIKeys(e *env) {
	a, b := user("a@example.com"), user("b@example.com")
	ka := bus.APIKey{ID: bus.NewID(bus.PrefixAPIKey), UserID: a.ID, Hash: []byte("hash-of-a\x00\xff"), CreatedAt: T0}
	kb := bus.APIKey{ID: bus.NewID(bus.PrefixAPIKey), UserID: b.ID, Hash: []byte("hash-of-b"), CreatedAt: T0}
	e.update(func(tx bus.Tx) error {
		for _, f := range []func() error{
			func() error { return tx.UserCreate(a) },
			func() error { return tx.UserCreate(b) },
			func() error { return tx.APIKeyCreate(ka) },
			func() error { return tx.APIKeyCreate(kb) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})
	e.view(func(tx bus.Tx) error {
		got, err := tx.UserByAPIKeyHash([]byte("hash-of-a\x00\xff"))
		if err != nil || got.ID != a.ID || got.Email != a.Email {
			e.t.Errorf("UserByAPIKeyHash(a) = %+v, %v; want %s", got, err, a.ID)
		}
		got, err = tx.UserByAPIKeyHash([]byte("hash-of-b"))
		if err != nil || got.ID != b.ID {
			e.t.Errorf("UserByAPIKeyHash(b) = %+v, %v; want %s", got, err, b.ID)
		}
		_, err = tx.UserByAPIKeyHash([]byte("hash-of-a"))
		e.wantErr("UserByAPIKeyHash of an unknown hash", err, bus.ErrNotFound)
		return nil
	})
	err := e.s.Update(e.ctx, func(tx bus.Tx) error {
		return tx.APIKeyCreate(bus.APIKey{ID: bus.NewID(bus.PrefixAPIKey), UserID: b.ID, Hash: ka.Hash, CreatedAt: T0})
	})
	e.wantErr("APIKeyCreate with a duplicate hash", err, bus.ErrConflict)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error {
		return tx.APIKeyCreate(bus.APIKey{ID: ka.ID, UserID: b.ID, Hash: []byte("another"), CreatedAt: T0})
	})
	e.wantErr("APIKeyCreate with a duplicate id", err, bus.ErrConflict)
}

func testWorkspaces(e *env) {
	var ws []bus.Workspace
	for i := range 4 {
		ws = append(ws, bus.Workspace{ID: bus.NewID(bus.PrefixWorkspace), Name: fmt.Sprintf("ws %d", i), CreatedAt: at(time.Duration(i) * time.Minute)})
	}
	u := user("member@example.com")
	other := user("nobody@example.com")
	e.update(func(tx bus.Tx) error {
		for _, w := range ws {
			if err := tx.WorkspaceCreate(w); err != nil {
				return err
			}
		}
		if err := tx.UserCreate(u); err != nil {
			return err
		}
		if err := tx.UserCreate(other); err != nil {
			return err
		}
		// u is a member of ws[3] and ws[1], granted in that order.
		if err := tx.MemberSet(bus.Member{WorkspaceID: ws[3].ID, UserID: u.ID, Role: bus.RoleViewer}); err != nil {
			return err
		}
		return tx.MemberSet(bus.Member{WorkspaceID: ws[1].ID, UserID: u.ID, Role: bus.RoleOwner})
	})
	wsIDs := func(l []bus.Workspace) []string {
		var out []string
		for _, w := range l {
			out = append(out, w.ID)
		}
		return out
	}
	e.view(func(tx bus.Tx) error {
		got, err := tx.WorkspaceGet(ws[2].ID)
		if err != nil || got.ID != ws[2].ID || got.Name != ws[2].Name || !got.CreatedAt.Equal(ws[2].CreatedAt) {
			e.t.Errorf("WorkspaceGet = %+v, %v; want %+v", got, err, ws[2])
		}
		_, err = tx.WorkspaceGet(bus.NewID(bus.PrefixWorkspace))
		e.wantErr("WorkspaceGet of a missing workspace", err, bus.ErrNotFound)

		all, err := tx.WorkspaceList("")
		if err != nil {
			return err
		}
		if want := wsIDs(ws); !slices.Equal(wsIDs(all), want) {
			e.t.Errorf("WorkspaceList(\"\") = %q, want every workspace oldest first %q", wsIDs(all), want)
		}
		mine, err := tx.WorkspaceList(u.ID)
		if err != nil {
			return err
		}
		if want := []string{ws[1].ID, ws[3].ID}; !slices.Equal(wsIDs(mine), want) {
			e.t.Errorf("WorkspaceList(member) = %q, want %q", wsIDs(mine), want)
		}
		none, err := tx.WorkspaceList(other.ID)
		if err != nil {
			return err
		}
		if len(none) != 0 {
			e.t.Errorf("WorkspaceList(non-member) = %q, want none", wsIDs(none))
		}
		return nil
	})
	err := e.s.Update(e.ctx, func(tx bus.Tx) error {
		return tx.WorkspaceCreate(bus.Workspace{ID: ws[0].ID, Name: "again", CreatedAt: T0})
	})
	e.wantErr("WorkspaceCreate with a duplicate id", err, bus.ErrConflict)
}

func testMembers(e *env) {
	w1, w2 := e.workspace(), e.workspace()
	a, b := user("a@example.com"), user("b@example.com")
	e.update(func(tx bus.Tx) error {
		for _, f := range []func() error{
			func() error { return tx.UserCreate(a) },
			func() error { return tx.UserCreate(b) },
			func() error { return tx.MemberSet(bus.Member{WorkspaceID: w1, UserID: a.ID, Role: bus.RoleOwner}) },
			func() error { return tx.MemberSet(bus.Member{WorkspaceID: w1, UserID: b.ID, Role: bus.RoleViewer}) },
			func() error { return tx.MemberSet(bus.Member{WorkspaceID: w2, UserID: a.ID, Role: bus.RoleDeveloper}) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})
	// Change a role.
	e.update(func(tx bus.Tx) error {
		return tx.MemberSet(bus.Member{WorkspaceID: w1, UserID: b.ID, Role: bus.RoleAdmin})
	})
	sortMembers := func(ms []bus.Member) []bus.Member {
		sort.Slice(ms, func(i, j int) bool {
			return ms[i].WorkspaceID+ms[i].UserID < ms[j].WorkspaceID+ms[j].UserID
		})
		return ms
	}
	e.view(func(tx bus.Tx) error {
		m, err := tx.MemberGet(w1, b.ID)
		if err != nil || m != (bus.Member{WorkspaceID: w1, UserID: b.ID, Role: bus.RoleAdmin}) {
			e.t.Errorf("MemberGet after a role change = %+v, %v; want admin", m, err)
		}
		_, err = tx.MemberGet(w2, b.ID)
		e.wantErr("MemberGet without a role", err, bus.ErrNotFound)

		byUser, err := tx.MemberListByUser(a.ID)
		if err != nil {
			return err
		}
		want := sortMembers([]bus.Member{{WorkspaceID: w1, UserID: a.ID, Role: bus.RoleOwner}, {WorkspaceID: w2, UserID: a.ID, Role: bus.RoleDeveloper}})
		if got := sortMembers(byUser); !reflect.DeepEqual(got, want) {
			e.t.Errorf("MemberListByUser = %+v, want %+v", got, want)
		}
		byWS, err := tx.MemberListByWorkspace(w1)
		if err != nil {
			return err
		}
		want = sortMembers([]bus.Member{{WorkspaceID: w1, UserID: a.ID, Role: bus.RoleOwner}, {WorkspaceID: w1, UserID: b.ID, Role: bus.RoleAdmin}})
		if got := sortMembers(byWS); !reflect.DeepEqual(got, want) {
			e.t.Errorf("MemberListByWorkspace = %+v, want %+v", got, want)
		}
		return nil
	})
	e.update(func(tx bus.Tx) error { return tx.MemberDelete(w1, b.ID) })
	e.view(func(tx bus.Tx) error {
		_, err := tx.MemberGet(w1, b.ID)
		e.wantErr("MemberGet after MemberDelete", err, bus.ErrNotFound)
		byWS, err := tx.MemberListByWorkspace(w1)
		if err != nil {
			return err
		}
		if len(byWS) != 1 || byWS[0].UserID != a.ID {
			e.t.Errorf("MemberListByWorkspace after delete = %+v, want only %s", byWS, a.ID)
		}
		return nil
	})
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.MemberDelete(w1, b.ID) })
	e.wantErr("MemberDelete of a missing member", err, bus.ErrNotFound)
}

func subsEqual(a, b []bus.Subscription) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Topic != b[i].Topic || len(a[i].Producers) != len(b[i].Producers) || !slices.Equal(a[i].Producers, b[i].Producers) {
			return false
		}
	}
	return true
}

func timePtrEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// connEqual compares every field; nil and empty slices are equal.
func connDiff(got, want bus.Connection) string {
	var d []string
	chk := func(name string, ok bool, g, w any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s = %v, want %v", name, g, w))
		}
	}
	chk("ID", got.ID == want.ID, got.ID, want.ID)
	chk("WorkspaceID", got.WorkspaceID == want.WorkspaceID, got.WorkspaceID, want.WorkspaceID)
	chk("Kind", got.Kind == want.Kind, got.Kind, want.Kind)
	chk("Name", got.Name == want.Name, got.Name, want.Name)
	chk("Status", got.Status == want.Status, got.Status, want.Status)
	chk("AttemptLimit", got.AttemptLimit == want.AttemptLimit, got.AttemptLimit, want.AttemptLimit)
	chk("QuotaTier", got.QuotaTier == want.QuotaTier, got.QuotaTier, want.QuotaTier)
	chk("CredentialVersion", got.CredentialVersion == want.CredentialVersion, got.CredentialVersion, want.CredentialVersion)
	chk("Subscriptions", subsEqual(got.Subscriptions, want.Subscriptions), got.Subscriptions, want.Subscriptions)
	chk("CreatedAt", got.CreatedAt.Equal(want.CreatedAt), got.CreatedAt, want.CreatedAt)
	chk("UpdatedAt", got.UpdatedAt.Equal(want.UpdatedAt), got.UpdatedAt, want.UpdatedAt)
	chk("SecretState", got.SecretState == want.SecretState, got.SecretState, want.SecretState)
	chk("SecretHash", sameBytes(got.SecretHash, want.SecretHash), got.SecretHash, want.SecretHash)
	chk("SecretIssuedAt", timePtrEqual(got.SecretIssuedAt, want.SecretIssuedAt), got.SecretIssuedAt, want.SecretIssuedAt)
	chk("PreviousSecretHash", sameBytes(got.PreviousSecretHash, want.PreviousSecretHash), got.PreviousSecretHash, want.PreviousSecretHash)
	chk("PreviousSecretExpiresAt", timePtrEqual(got.PreviousSecretExpiresAt, want.PreviousSecretExpiresAt), got.PreviousSecretExpiresAt, want.PreviousSecretExpiresAt)
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

func testConnections(e *env) {
	ws, other := e.workspace(), e.workspace()
	issued := at(time.Hour)
	cons := connection(ws, bus.KindConsumer, 7,
		bus.Subscription{Topic: "som.story.*", Producers: []string{"c1", "c2"}},
		bus.Subscription{Topic: "som.>"})
	cons.Name = "my consumer"
	cons.SecretState = bus.SecretActive
	cons.SecretHash = []byte{0, 1, 2, 0xfe, 0xff}
	cons.SecretIssuedAt = &issued
	cons.CredentialVersion = 3
	prod := connection(ws, bus.KindProducer, 5)
	prod.CreatedAt = at(time.Minute)
	cons2 := connection(ws, bus.KindConsumer, 5, bus.Subscription{Topic: "som.a"})
	cons2.CreatedAt = at(2 * time.Minute)
	elsewhere := connection(other, bus.KindConsumer, 5, bus.Subscription{Topic: "som.a"})
	e.update(func(tx bus.Tx) error {
		for _, c := range []bus.Connection{cons, prod, cons2, elsewhere} {
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	connIDs := func(l []bus.Connection) []string {
		var out []string
		for _, c := range l {
			out = append(out, c.ID)
		}
		return out
	}
	e.view(func(tx bus.Tx) error {
		for _, want := range []bus.Connection{cons, prod, cons2} {
			got, err := tx.ConnectionGet(want.ID)
			if err != nil {
				e.t.Errorf("ConnectionGet(%s): %v", want.Kind, err)
				continue
			}
			if d := connDiff(got, want); d != "" {
				e.t.Errorf("ConnectionGet(%s): %s", want.Kind, d)
			}
		}
		all, err := tx.ConnectionList(ws, "")
		if err != nil {
			return err
		}
		if got, want := connIDs(all), []string{cons.ID, prod.ID, cons2.ID}; !slices.Equal(got, want) {
			e.t.Errorf("ConnectionList(ws, \"\") = %q, want oldest first %q", got, want)
		}
		if len(all) == 3 {
			if d := connDiff(all[0], cons); d != "" {
				e.t.Errorf("ConnectionList row: %s", d)
			}
		}
		cs, err := tx.ConnectionList(ws, bus.KindConsumer)
		if err != nil {
			return err
		}
		if got, want := connIDs(cs), []string{cons.ID, cons2.ID}; !slices.Equal(got, want) {
			e.t.Errorf("ConnectionList(ws, consumer) = %q, want %q", got, want)
		}
		ps, err := tx.ConnectionList(ws, bus.KindProducer)
		if err != nil {
			return err
		}
		if got, want := connIDs(ps), []string{prod.ID}; !slices.Equal(got, want) {
			e.t.Errorf("ConnectionList(ws, producer) = %q, want %q", got, want)
		}
		e.checkConnectionStates(tx, ws, all)
		none, err := tx.ConnectionStates("no-such-workspace")
		if err != nil {
			return err
		}
		if len(none) != 0 {
			e.t.Errorf("ConnectionStates(unknown workspace) = %v, want none", none)
		}
		return nil
	})

	// ConnectionUpdate writes every field.
	upd := cons
	upd.Name = "renamed"
	upd.Status = bus.StatusRevoked
	upd.AttemptLimit = 2
	upd.QuotaTier = "premium"
	upd.CredentialVersion = 4
	upd.Subscriptions = []bus.Subscription{{Topic: "som.x.y", Producers: []string{"c9"}}}
	upd.UpdatedAt = at(3 * time.Hour)
	upd.SecretState = bus.SecretActive
	newIssued := at(3 * time.Hour)
	expires := at(27 * time.Hour)
	upd.SecretHash = []byte("new hash")
	upd.SecretIssuedAt = &newIssued
	upd.PreviousSecretHash = cons.SecretHash
	upd.PreviousSecretExpiresAt = &expires
	e.update(func(tx bus.Tx) error { return tx.ConnectionUpdate(upd) })
	e.view(func(tx bus.Tx) error {
		got, err := tx.ConnectionGet(cons.ID)
		if err != nil {
			return err
		}
		if d := connDiff(got, upd); d != "" {
			e.t.Errorf("after ConnectionUpdate: %s", d)
		}
		all, err := tx.ConnectionList(ws, "")
		if err != nil {
			return err
		}
		e.checkConnectionStates(tx, ws, all)
		return nil
	})
	// And back to empty values.
	upd2 := upd
	upd2.SecretState = bus.SecretRevoked
	upd2.SecretHash = nil
	upd2.SecretIssuedAt = nil
	upd2.PreviousSecretHash = nil
	upd2.PreviousSecretExpiresAt = nil
	upd2.Status = bus.StatusActive
	e.update(func(tx bus.Tx) error { return tx.ConnectionUpdate(upd2) })
	e.view(func(tx bus.Tx) error {
		got, err := tx.ConnectionGet(cons.ID)
		if err != nil {
			return err
		}
		if d := connDiff(got, upd2); d != "" {
			e.t.Errorf("after ConnectionUpdate clearing secrets: %s", d)
		}
		return nil
	})
}

func testConnectionErrors(e *env) {
	ws := e.workspace()
	c := connection(ws, bus.KindConsumer, 5, bus.Subscription{Topic: "som.>"})
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(c) })
	dup := connection(ws, bus.KindProducer, 5)
	dup.ID = c.ID
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.ConnectionCreate(dup) })
	e.wantErr("ConnectionCreate with a duplicate id", err, bus.ErrConflict)
	missing := connection(ws, bus.KindConsumer, 5)
	err = e.s.View(e.ctx, func(tx bus.Tx) error { _, err := tx.ConnectionGet(missing.ID); return err })
	e.wantErr("ConnectionGet of a missing connection", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.ConnectionUpdate(missing) })
	e.wantErr("ConnectionUpdate of a missing connection", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(missing.ID) })
	e.wantErr("ConnectionDelete of a missing connection", err, bus.ErrNotFound)
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(c.ID) })
	err = e.s.View(e.ctx, func(tx bus.Tx) error { _, err := tx.ConnectionGet(c.ID); return err })
	e.wantErr("ConnectionGet after ConnectionDelete", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(c.ID) })
	e.wantErr("ConnectionDelete twice", err, bus.ErrNotFound)
	e.view(func(tx bus.Tx) error {
		l, err := tx.ConnectionList(ws, "")
		if err == nil && len(l) != 0 {
			e.t.Errorf("ConnectionList after delete = %d connections, want 0", len(l))
		}
		return err
	})
}

// testConnectionDelete fills a queue with every kind of row, deletes the
// connection, creates one with the same id and wants it empty.
func testConnectionDelete(e *env) {
	f := e.fixture(1)
	keep := e.consumer(f.WS, 1, "som.>")
	e.update(func(tx bus.Tx) error {
		return tx.SkillsPut(f.Q, bus.Skills{Registrations: []bus.SkillRegistration{{InstanceID: "i1", Skill: "s", Name: "n", Values: json.RawMessage(`{}`), AuthorityScale: 1}}, UpdatedAt: T0})
	})
	e.pub(f, T0, "acked", "m-acked")
	e.pub(f, T0, "dead", "m-dead")
	e.pub(f, T0, "attempt", "m-attempt")
	e.pub(f, T0, "ready", "m-ready1", "m-ready2")
	d := e.receiveOne(f.Q, time.Minute, at(time.Second), "m-acked")
	e.ackOK(f.Q, at(time.Second), d.Handle)
	dd := e.receiveOne(f.Q, time.Minute, at(time.Second), "m-dead")
	e.nackOK(f.Q, 0, at(time.Second), dd.Handle) // attempt limit 1: dead letter now
	if n := len(e.allDeadLetters(f.Q)); n != 1 {
		e.t.Fatalf("setup: %d dead letters, want 1", n)
	}
	att := e.receiveAttempt(f.Q, 1, time.Minute, "att-1", at(time.Second))
	wantIDs(e.t, att, "m-attempt")

	var conn bus.Connection
	e.view(func(tx bus.Tx) error {
		var err error
		conn, err = tx.ConnectionGet(f.Q)
		return err
	})
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(f.Q) })
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(conn) })

	e.wantStats(f.Q, at(2*time.Second), bus.QueueStats{})
	if dl := e.allDeadLetters(f.Q); len(dl) != 0 {
		e.t.Errorf("dead letters survived ConnectionDelete: %q", dlIDs(dl))
	}
	e.view(func(tx bus.Tx) error {
		s, err := tx.SkillsGet(f.Q)
		if err == nil && len(s.Registrations) != 0 {
			e.t.Errorf("skills survived ConnectionDelete: %+v", s)
		}
		return err
	})
	if ds := e.receive(f.Q, 10, time.Minute, at(2*time.Second)); len(ds) != 0 {
		e.t.Errorf("messages survived ConnectionDelete: %q", ids(ds))
	}
	wantSettle(e.t, "re-ack of a deleted queue's message", e.ack(f.Q, at(2*time.Second), d.Handle), false)
	// The attempt id is gone: a receive under it takes new messages.
	e.pub(f, at(3*time.Second), "new", "m-new")
	wantIDs(e.t, e.receiveAttempt(f.Q, 10, time.Minute, "att-1", at(3*time.Second)), "m-new")
	// The other queue is untouched.
	e.wantStats(keep, at(3*time.Second), bus.QueueStats{Ready: 6, OldestReadyAgeSeconds: 3})
}

func testSkills(e *env) {
	f := e.fixture(5)
	e.view(func(tx bus.Tx) error {
		s, err := tx.SkillsGet(f.Q)
		if err != nil {
			e.t.Errorf("SkillsGet with none put: %v", err)
		} else if len(s.Registrations) != 0 {
			e.t.Errorf("SkillsGet with none put = %+v, want empty", s)
		}
		return nil
	})
	s1 := bus.Skills{Registrations: []bus.SkillRegistration{
		{InstanceID: "i1", Skill: "pricing", Name: "Pricing", Values: json.RawMessage(`{"a": 1, "b": [true, null]}`), AuthorityScale: 3},
		{InstanceID: "i2", Skill: "stock", Name: "Stock", Values: json.RawMessage(`{}`), AuthorityScale: 0},
	}, UpdatedAt: at(time.Minute)}
	e.update(func(tx bus.Tx) error { return tx.SkillsPut(f.Q, s1) })
	check := func(want bus.Skills) {
		e.t.Helper()
		e.view(func(tx bus.Tx) error {
			got, err := tx.SkillsGet(f.Q)
			if err != nil {
				return err
			}
			if len(got.Registrations) != len(want.Registrations) || !got.UpdatedAt.Equal(want.UpdatedAt) {
				e.t.Errorf("SkillsGet = %+v, want %+v", got, want)
				return nil
			}
			for i, r := range got.Registrations {
				w := want.Registrations[i]
				if r.InstanceID != w.InstanceID || r.Skill != w.Skill || r.Name != w.Name || r.AuthorityScale != w.AuthorityScale || !jsonEqual(r.Values, w.Values) {
					e.t.Errorf("SkillsGet registration %d = %+v (values %s), want %+v (values %s)", i, r, r.Values, w, w.Values)
				}
			}
			return nil
		})
	}
	check(s1)
	s2 := bus.Skills{Registrations: []bus.SkillRegistration{
		{InstanceID: "i3", Skill: "x", Name: "X", Values: json.RawMessage(`{"z":"y"}`), AuthorityScale: 1},
	}, UpdatedAt: at(2 * time.Minute)}
	e.update(func(tx bus.Tx) error { return tx.SkillsPut(f.Q, s2) })
	check(s2)
}

// testSkillsRemovedConnection: a put of the skills of a connection that
// does not exist, or no longer does (removed between the bus's check and
// the put, by a DELETE that overlapped), is ErrNotFound and writes no row:
// no skills are kept for a connection that is gone, and one created again
// with the same id has none.
func testSkillsRemovedConnection(e *env) {
	f := e.fixture(5)
	var conn bus.Connection
	e.view(func(tx bus.Tx) error {
		var err error
		conn, err = tx.ConnectionGet(f.Q)
		return err
	})
	sk := bus.Skills{Registrations: []bus.SkillRegistration{
		{InstanceID: "i1", Skill: "s", Name: "n", Values: json.RawMessage(`{}`), AuthorityScale: 1},
	}, UpdatedAt: at(time.Minute)}
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(f.Q) })
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.SkillsPut(f.Q, sk) })
	e.wantErr("SkillsPut of a removed connection", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.SkillsPut(bus.NewID(bus.PrefixConnection), sk) })
	e.wantErr("SkillsPut of a connection that never existed", err, bus.ErrNotFound)
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(conn) })
	e.view(func(tx bus.Tx) error {
		got, err := tx.SkillsGet(f.Q)
		if err == nil && (len(got.Registrations) != 0 || !got.UpdatedAt.IsZero()) {
			e.t.Errorf("SkillsGet of a connection created again after a put of its removed namesake = %+v, want none", got)
		}
		return err
	})
}

func testAudit(e *env) {
	w1, w2 := e.workspace(), e.workspace()
	var w1IDs []string
	// Same time for all, so only insertion order can order them; ids are
	// random, so they cannot either.
	e.update(func(tx bus.Tx) error {
		for i := range 5 {
			a := auditEntry(w1, fmt.Sprintf("act.%d", i), T0)
			a.Details = map[string]any{"i": fmt.Sprint(i), "nested": map[string]any{"x": "y"}}
			w1IDs = append(w1IDs, a.ID)
			if err := tx.AuditInsert(a); err != nil {
				return err
			}
			if err := tx.AuditInsert(auditEntry(w2, "other", T0)); err != nil {
				return err
			}
		}
		return nil
	})
	global := auditEntry("", "user.create", T0)
	e.update(func(tx bus.Tx) error { return tx.AuditInsert(global) })
	// A later transaction with an earlier time is still newer.
	late := auditEntry(w1, "late", at(-time.Hour))
	e.update(func(tx bus.Tx) error { return tx.AuditInsert(late) })
	newestFirst := append([]string{late.ID}, reversed(w1IDs)...)

	e.view(func(tx bus.Tx) error {
		es, err := tx.AuditList(w1, 100, "")
		if err != nil {
			return err
		}
		var got []string
		for _, a := range es {
			got = append(got, a.ID)
		}
		if !slices.Equal(got, newestFirst) {
			e.t.Errorf("AuditList = %q, want newest first by insertion %q", got, newestFirst)
		}
		for _, a := range es {
			if a.ID == w1IDs[2] {
				if a.Action != "act.2" || a.Actor != "u-test" || a.Target != "target" || !a.At.Equal(T0) ||
					!reflect.DeepEqual(a.Details, map[string]any{"i": "2", "nested": map[string]any{"x": "y"}}) {
					e.t.Errorf("AuditList entry = %+v", a)
				}
			}
		}
		gs, err := tx.AuditList("", 100, "")
		if err != nil {
			return err
		}
		if len(gs) != 1 || gs[0].ID != global.ID || gs[0].Action != "user.create" {
			e.t.Errorf("AuditList(\"\") = %+v, want only the global entry", gs)
		}
		return nil
	})
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.AuditInsert(auditEntry(w1, "dup", T0)) })
	if err != nil {
		e.t.Errorf("AuditInsert: %v", err)
	}
	dup := auditEntry(w1, "dup", T0)
	dup.ID = late.ID
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.AuditInsert(dup) })
	e.wantErr("AuditInsert with a duplicate id", err, bus.ErrConflict)
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func testAuditPaging(e *env) {
	ws := e.workspace()
	var all []string
	for i := range 7 {
		a := auditEntry(ws, fmt.Sprintf("a%d", i), T0) // one transaction each
		e.update(func(tx bus.Tx) error { return tx.AuditInsert(a) })
		all = append(all, a.ID)
	}
	want := reversed(all)
	var got []string
	before := ""
	for page := 0; page < 10; page++ {
		var es []bus.AuditEntry
		e.view(func(tx bus.Tx) error {
			var err error
			es, err = tx.AuditList(ws, 3, before)
			return err
		})
		if len(es) > 3 {
			e.t.Fatalf("AuditList(limit 3) returned %d entries", len(es))
		}
		if len(es) == 0 {
			break
		}
		for _, a := range es {
			got = append(got, a.ID)
		}
		before = es[len(es)-1].ID
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("AuditList pages = %q, want %q", got, want)
	}
	// before = the oldest: nothing older.
	e.view(func(tx bus.Tx) error {
		es, err := tx.AuditList(ws, 3, all[0])
		if err == nil && len(es) != 0 {
			e.t.Errorf("AuditList before the oldest = %d entries, want 0", len(es))
		}
		es, err = tx.AuditList(ws, 2, all[4])
		if err == nil && (len(es) != 2 || es[0].ID != all[3] || es[1].ID != all[2]) {
			e.t.Errorf("AuditList(limit 2, before a4) = %+v, want a3, a2", es)
		}
		return err
	})
	// before names an entry of another listing (another workspace, or the
	// global entries): an empty page, as for an unknown id, never the
	// entries older than it.
	other := auditEntry(e.workspace(), "other", T0)
	global := auditEntry("", "user.create", T0)
	newer := auditEntry(ws, "newest", T0)
	e.update(func(tx bus.Tx) error {
		for _, a := range []bus.AuditEntry{other, global, newer} {
			if err := tx.AuditInsert(a); err != nil {
				return err
			}
		}
		return nil
	})
	e.view(func(tx bus.Tx) error {
		for _, c := range []struct{ list, before string }{{ws, other.ID}, {ws, global.ID}, {"", newer.ID}, {"", other.ID}} {
			es, err := tx.AuditList(c.list, 100, c.before)
			if err != nil {
				return err
			}
			if len(es) != 0 {
				e.t.Errorf("AuditList(%q, before an entry of another listing) = %d entries, want 0", c.list, len(es))
			}
		}
		return nil
	})
}

func testSigningKeys(e *env) {
	e.view(func(tx bus.Tx) error {
		ks, err := tx.SigningKeyList()
		if err == nil && len(ks) != 0 {
			e.t.Errorf("SigningKeyList of an empty store = %d keys", len(ks))
		}
		return err
	})
	k1 := bus.SigningKey{ID: "key-1", Algorithm: "EdDSA", PrivateKey: []byte{0x30, 0x00, 0xff, 0x01}, CreatedAt: T0}
	k2 := bus.SigningKey{ID: "key-2", Algorithm: "ES256", PrivateKey: []byte("der"), CreatedAt: at(time.Hour)}
	e.update(func(tx bus.Tx) error {
		if err := tx.SigningKeyCreate(k1); err != nil {
			return err
		}
		return tx.SigningKeyCreate(k2)
	})
	e.view(func(tx bus.Tx) error {
		ks, err := tx.SigningKeyList()
		if err != nil {
			return err
		}
		sort.Slice(ks, func(i, j int) bool { return ks[i].ID < ks[j].ID })
		if len(ks) != 2 {
			e.t.Fatalf("SigningKeyList = %d keys, want 2", len(ks))
		}
		for i, want := range []bus.SigningKey{k1, k2} {
			g := ks[i]
			if g.ID != want.ID || g.Algorithm != want.Algorithm || !sameBytes(g.PrivateKey, want.PrivateKey) || !g.CreatedAt.Equal(want.CreatedAt) {
				e.t.Errorf("SigningKeyList[%d] = %+v, want %+v", i, g, want)
			}
		}
		return nil
	})
	err := e.s.Update(e.ctx, func(tx bus.Tx) error {
		return tx.SigningKeyCreate(bus.SigningKey{ID: "key-1", Algorithm: "EdDSA", PrivateKey: []byte("other"), CreatedAt: T0})
	})
	e.wantErr("SigningKeyCreate with a duplicate id", err, bus.ErrConflict)
}

func testServerSecret(e *env) {
	var first, second, other []byte
	e.update(func(tx bus.Tx) error {
		var err error
		first, err = tx.ServerSecret("handles", []byte("first\x00"))
		return err
	})
	e.update(func(tx bus.Tx) error {
		var err error
		second, err = tx.ServerSecret("handles", []byte("second"))
		return err
	})
	e.update(func(tx bus.Tx) error {
		var err error
		other, err = tx.ServerSecret("cookies", []byte("cookie secret"))
		return err
	})
	if string(first) != "first\x00" {
		e.t.Errorf("first ServerSecret = %q, want the fresh value", first)
	}
	if string(second) != "first\x00" {
		e.t.Errorf("second ServerSecret = %q, want the first caller's value", second)
	}
	if string(other) != "cookie secret" {
		e.t.Errorf("ServerSecret of another name = %q", other)
	}
}

func testServerSecretConcurrent(e *env) {
	const n = 8
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := e.s.Update(e.ctx, func(tx bus.Tx) error {
				v, err := tx.ServerSecret("race", fmt.Appendf(nil, "fresh-%d", i))
				got[i] = v
				return err
			})
			if err != nil {
				e.t.Errorf("ServerSecret %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range got {
		if string(got[i]) != string(got[0]) || len(got[i]) == 0 {
			e.t.Fatalf("concurrent ServerSecret callers got different secrets: %q", got)
		}
	}
}

// testTimes: times are kept to the millisecond and come back in UTC.
func testTimes(e *env) {
	zone := time.FixedZone("X", 5*3600+30*60)
	in := T0.Add(1500 * time.Microsecond).In(zone) // 1.5 ms past T0, not in UTC
	w := bus.Workspace{ID: bus.NewID(bus.PrefixWorkspace), Name: "t", CreatedAt: in}
	e.update(func(tx bus.Tx) error { return tx.WorkspaceCreate(w) })
	var got bus.Workspace
	e.view(func(tx bus.Tx) error {
		var err error
		got, err = tx.WorkspaceGet(w.ID)
		return err
	})
	checkTime := func(what string, got time.Time, in time.Time) {
		e.t.Helper()
		if got.Location() != time.UTC {
			e.t.Errorf("%s location = %v, want UTC", what, got.Location())
		}
		if got.Nanosecond()%int(time.Millisecond) != 0 {
			e.t.Errorf("%s = %v has more than millisecond precision", what, got)
		}
		if d := got.Sub(in); d <= -time.Millisecond || d >= time.Millisecond {
			e.t.Errorf("%s = %v, want %v to the millisecond", what, got, in)
		}
	}
	checkTime("Workspace.CreatedAt", got.CreatedAt, in)

	f := e.fixture(5)
	e.pub(f, in, "s", "m1")
	ds := e.receive(f.Q, 1, time.Minute, at(time.Second).In(zone))
	wantIDs(e.t, ds, "m1")
	checkTime("Delivery.EnqueuedAt", ds[0].EnqueuedAt, in)
	e.setAttemptLimit(f.Q, 1)
	e.nackOK(f.Q, 0, at(2*time.Second+500*time.Microsecond).In(zone), ds[0].Handle)
	dl := e.allDeadLetters(f.Q)
	if len(dl) != 1 {
		e.t.Fatalf("dead letters = %d, want 1", len(dl))
	}
	checkTime("DeadLetter.EnqueuedAt", dl[0].EnqueuedAt, in)
	checkTime("DeadLetter.DeadLetteredAt", dl[0].DeadLetteredAt, at(2*time.Second+500*time.Microsecond))
	e.pub(f, at(4*time.Second), "s2", "m2")
	wantIDs(e.t, e.receive(f.Q, 1, 30*time.Second, at(5*time.Second).In(zone)), "m2")
	r := e.receiveP(bus.ReceiveParams{QueueID: f.Q, Max: 1, Visibility: time.Minute, Now: at(6 * time.Second).In(zone)})
	wantIDs(e.t, r.Deliveries)
	checkTime("ReceiveResult.NextVisibleAt", r.NextVisibleAt, at(35*time.Second))
}

// checkConnectionStates compares ConnectionStates(ws) with the token-check
// fields of list, the workspace's connections as ConnectionList reads them.
func (e *env) checkConnectionStates(tx bus.Tx, ws string, list []bus.Connection) {
	e.t.Helper()
	got, err := tx.ConnectionStates(ws)
	if err != nil {
		e.t.Errorf("ConnectionStates: %v", err)
		return
	}
	want := make([]bus.ConnectionState, 0, len(list))
	for _, c := range list {
		want = append(want, c.State())
	}
	byID := func(a, b bus.ConnectionState) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if !slices.Equal(got, want) {
		e.t.Errorf("ConnectionStates(ws) = %+v, want %+v", got, want)
	}
}
