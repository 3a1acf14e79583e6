package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestMemberGetLocksTheRow: in a write transaction MemberGet locks the
// member's row, so a removal of the member waits for the transaction that
// read it; a change of role that checks the member is there and then
// upserts cannot undo a removal that committed between the two (the upsert
// would insert the row again: the member back in the workspace).
func TestMemberGetLocksTheRow(t *testing.T) {
	t.Parallel()
	app := "sombus_member_" + strings.ToLower(bus.NewID(""))[:12]
	s := openURL(t, pgtest.URL(t)+"&application_name="+app)
	ctx := t.Context()
	ws, user, now := bus.NewID(bus.PrefixWorkspace), bus.NewID(bus.PrefixUser), time.Now()
	if err := s.Update(ctx, func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: now}); err != nil {
			return err
		}
		if err := tx.UserCreate(bus.User{ID: user, Name: "Ada", Email: user + "@example.com", CreatedAt: now}); err != nil {
			return err
		}
		return tx.MemberSet(bus.Member{WorkspaceID: ws, UserID: user, Role: bus.RoleDeveloper})
	}); err != nil {
		t.Fatal(err)
	}
	read, release := make(chan struct{}), make(chan struct{})
	changed := make(chan error, 1)
	go func() {
		first := true
		changed <- s.Update(ctx, func(tx bus.Tx) error {
			if _, err := tx.MemberGet(ws, user); err != nil {
				return err
			}
			if first { // once: the transaction may be run again
				first = false
				close(read)
				<-release
			}
			return tx.MemberSet(bus.Member{WorkspaceID: ws, UserID: user, Role: bus.RoleViewer})
		})
	}()
	<-read
	removal := make(chan error, 1)
	go func() {
		removal <- s.Update(ctx, func(tx bus.Tx) error { return tx.MemberDelete(ws, user) })
	}()
	if waitLockedOrEnded(t, s, app, removal, "the removal neither waited for the change nor ended") {
		close(release)
		t.Fatalf("the removal did not wait for the transaction that read the member: %v", <-removal)
	}
	close(release)
	if err := <-changed; err != nil {
		t.Fatalf("change: %v", err)
	}
	if err := <-removal; err != nil {
		t.Fatalf("removal: %v", err)
	}
	err := s.View(ctx, func(tx bus.Tx) error { _, err := tx.MemberGet(ws, user); return err })
	if !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("after the change and the removal the member is there (%v); want removed", err)
	}
}
