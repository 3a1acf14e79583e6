package storetest

import (
	"bytes"
	"crypto/sha256"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// sessionTests hold the users' portal passwords and the portal sessions.
var sessionTests = []test{
	{"Passwords", testPasswords},
	{"UserByEmail", testUserByEmail},
	{"Sessions", testSessions},
	{"SessionErrors", testSessionErrors},
	{"SessionDeleteUser", testSessionDeleteUser},
	{"SessionDeleteExpired", testSessionDeleteExpired},
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func session(userID, token string, created time.Time) bus.Session {
	return bus.Session{TokenHash: tokenHash(token), UserID: userID, CSRFToken: "csrf-" + token, CreatedAt: created, LastSeenAt: created}
}

func testPasswords(e *env) {
	a, b := user("a@example.com"), user("b@example.com")
	e.update(func(tx bus.Tx) error {
		if err := tx.UserCreate(a); err != nil {
			return err
		}
		return tx.UserCreate(b)
	})
	e.view(func(tx bus.Tx) error {
		h, err := tx.UserPasswordGet(a.ID)
		if err != nil || h != "" {
			e.t.Errorf("UserPasswordGet before any set = %q, %v; want \"\"", h, err)
		}
		_, err = tx.UserPasswordGet(bus.NewID(bus.PrefixUser))
		e.wantErr("UserPasswordGet of a missing user", err, bus.ErrNotFound)
		return nil
	})
	const h1, h2 = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$argon2id$v=19$m=19456,t=2,p=1$b3RoZXI$b3RoZXJoYXNob3RoZXJoYXNo"
	e.update(func(tx bus.Tx) error { return tx.UserPasswordSet(a.ID, h1) })
	e.update(func(tx bus.Tx) error { return tx.UserPasswordSet(a.ID, h2) })
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.UserPasswordSet(bus.NewID(bus.PrefixUser), h1) })
	e.wantErr("UserPasswordSet of a missing user", err, bus.ErrNotFound)
	e.view(func(tx bus.Tx) error {
		if h, err := tx.UserPasswordGet(a.ID); err != nil || h != h2 {
			e.t.Errorf("UserPasswordGet after two sets = %q, %v; want the second", h, err)
		}
		if h, err := tx.UserPasswordGet(b.ID); err != nil || h != "" {
			e.t.Errorf("another user's password = %q, %v; want none", h, err)
		}
		// The user's other fields are untouched.
		if got, err := tx.UserGet(a.ID); err != nil || got.Email != a.Email || got.Name != a.Name {
			e.t.Errorf("UserGet after a password set = %+v, %v", got, err)
		}
		return nil
	})
}

func testUserByEmail(e *env) {
	a := user("Alice@Example.com")
	e.update(func(tx bus.Tx) error { return tx.UserCreate(a) })
	e.view(func(tx bus.Tx) error {
		for _, email := range []string{"Alice@Example.com", "alice@example.com", "ALICE@EXAMPLE.COM"} {
			got, err := tx.UserByEmail(email)
			if err != nil || got.ID != a.ID || got.Email != a.Email {
				e.t.Errorf("UserByEmail(%q) = %+v, %v; want %s with the email as created", email, got, err, a.ID)
			}
		}
		_, err := tx.UserByEmail("bob@example.com")
		e.wantErr("UserByEmail of an unknown email", err, bus.ErrNotFound)
		_, err = tx.UserByEmail("")
		e.wantErr("UserByEmail of an empty email", err, bus.ErrNotFound)
		return nil
	})
}

func testSessions(e *env) {
	u := user("s@example.com")
	e.update(func(tx bus.Tx) error { return tx.UserCreate(u) })
	s1, s2 := session(u.ID, "one", at(0)), session(u.ID, "two", at(time.Minute))
	e.update(func(tx bus.Tx) error {
		if err := tx.SessionCreate(s1); err != nil {
			return err
		}
		return tx.SessionCreate(s2)
	})
	e.view(func(tx bus.Tx) error {
		got, err := tx.SessionGet(tokenHash("one"))
		if err != nil || !bytes.Equal(got.TokenHash, s1.TokenHash) || got.UserID != u.ID || got.CSRFToken != "csrf-one" ||
			!got.CreatedAt.Equal(at(0)) || !got.LastSeenAt.Equal(at(0)) || got.CreatedAt.Location() != time.UTC {
			e.t.Errorf("SessionGet = %+v, %v; want %+v", got, err, s1)
		}
		_, err = tx.SessionGet(tokenHash("three"))
		e.wantErr("SessionGet of an unknown token", err, bus.ErrNotFound)
		return nil
	})
	e.update(func(tx bus.Tx) error {
		return tx.SessionTouch(tokenHash("one"), at(30*time.Minute+123*time.Millisecond))
	})
	e.view(func(tx bus.Tx) error {
		got, err := tx.SessionGet(tokenHash("one"))
		if err != nil || !got.LastSeenAt.Equal(at(30*time.Minute+123*time.Millisecond)) || !got.CreatedAt.Equal(at(0)) {
			e.t.Errorf("after SessionTouch: %+v, %v; want last seen at 30m0.123s, created unchanged", got, err)
		}
		other, err := tx.SessionGet(tokenHash("two"))
		if err != nil || !other.LastSeenAt.Equal(at(time.Minute)) {
			e.t.Errorf("SessionTouch changed another session: %+v, %v", other, err)
		}
		return nil
	})
	e.update(func(tx bus.Tx) error { return tx.SessionDelete(tokenHash("one")) })
	e.view(func(tx bus.Tx) error {
		_, err := tx.SessionGet(tokenHash("one"))
		e.wantErr("SessionGet after SessionDelete", err, bus.ErrNotFound)
		if _, err := tx.SessionGet(tokenHash("two")); err != nil {
			e.t.Errorf("SessionDelete removed another session: %v", err)
		}
		return nil
	})
}

func testSessionErrors(e *env) {
	u := user("e@example.com")
	e.update(func(tx bus.Tx) error { return tx.UserCreate(u) })
	s := session(u.ID, "one", at(0))
	e.update(func(tx bus.Tx) error { return tx.SessionCreate(s) })
	err := e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.SessionCreate(s) })
	e.wantErr("SessionCreate of an existing token hash", err, bus.ErrConflict)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error {
		return tx.SessionCreate(session(bus.NewID(bus.PrefixUser), "orphan", at(0)))
	})
	e.wantErr("SessionCreate for a missing user", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.SessionTouch(tokenHash("missing"), at(time.Minute)) })
	e.wantErr("SessionTouch of an unknown token", err, bus.ErrNotFound)
	err = e.s.Update(e.ctx, func(tx bus.Tx) error { return tx.SessionDelete(tokenHash("missing")) })
	e.wantErr("SessionDelete of an unknown token", err, bus.ErrNotFound)
	// A failed create in a transaction that goes on leaves the
	// transaction usable (as UserCreate's conflict does).
	e.update(func(tx bus.Tx) error {
		if err := tx.SessionCreate(s); err == nil {
			e.t.Error("a second SessionCreate of one token hash succeeded")
		}
		return tx.SessionCreate(session(u.ID, "after", at(0)))
	})
	e.view(func(tx bus.Tx) error {
		if _, err := tx.SessionGet(tokenHash("after")); err != nil {
			e.t.Errorf("session created after a conflict in the same transaction: %v", err)
		}
		return nil
	})
}

func testSessionDeleteUser(e *env) {
	a, b := user("a@example.com"), user("b@example.com")
	e.update(func(tx bus.Tx) error {
		for _, u := range []bus.User{a, b} {
			if err := tx.UserCreate(u); err != nil {
				return err
			}
		}
		for _, s := range []bus.Session{session(a.ID, "a1", at(0)), session(a.ID, "a2", at(0)), session(a.ID, "a3", at(0)), session(b.ID, "b1", at(0))} {
			if err := tx.SessionCreate(s); err != nil {
				return err
			}
		}
		return nil
	})
	var n int
	e.update(func(tx bus.Tx) error {
		var err error
		n, err = tx.SessionDeleteUser(a.ID, tokenHash("a2"))
		return err
	})
	if n != 2 {
		e.t.Errorf("SessionDeleteUser keeping one of three = %d, want 2", n)
	}
	e.view(func(tx bus.Tx) error {
		for token, want := range map[string]bool{"a1": false, "a2": true, "a3": false, "b1": true} {
			_, err := tx.SessionGet(tokenHash(token))
			if (err == nil) != want {
				e.t.Errorf("session %s: err %v, want kept=%v", token, err, want)
			}
		}
		return nil
	})
	e.update(func(tx bus.Tx) error {
		var err error
		n, err = tx.SessionDeleteUser(a.ID, nil)
		return err
	})
	if n != 1 {
		e.t.Errorf("SessionDeleteUser keeping none = %d, want 1", n)
	}
}

func testSessionDeleteExpired(e *env) {
	u := user("x@example.com")
	e.update(func(tx bus.Tx) error { return tx.UserCreate(u) })
	old := session(u.ID, "old", at(0)) // created long ago, used just now
	old.LastSeenAt = at(11 * time.Hour)
	idle := session(u.ID, "idle", at(9*time.Hour)) // unused for two hours
	fresh := session(u.ID, "fresh", at(10*time.Hour+30*time.Minute))
	edge := session(u.ID, "edge", at(10*time.Hour)) // last seen exactly at the bound
	e.update(func(tx bus.Tx) error {
		for _, s := range []bus.Session{old, idle, fresh, edge} {
			if err := tx.SessionCreate(s); err != nil {
				return err
			}
		}
		return nil
	})
	var n int
	e.update(func(tx bus.Tx) error {
		var err error
		// now = 11h; idle bound 1h, absolute bound 10h30m.
		n, err = tx.SessionDeleteExpired(at(10*time.Hour), at(30*time.Minute))
		return err
	})
	if n != 2 {
		e.t.Errorf("SessionDeleteExpired = %d, want 2 (the old and the idle one)", n)
	}
	e.view(func(tx bus.Tx) error {
		for token, want := range map[string]bool{"old": false, "idle": false, "fresh": true, "edge": true} {
			_, err := tx.SessionGet(tokenHash(token))
			if (err == nil) != want {
				e.t.Errorf("session %s: err %v, want kept=%v", token, err, want)
			}
		}
		return nil
	})
}
