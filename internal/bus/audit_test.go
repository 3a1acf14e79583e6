package bus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestSearchAudit: the filtered audit listing keeps the matching entries
// of the workspace, pages through them, checks its filters, and is for
// admins.
func TestSearchAudit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newSampleEnv(t, bus.Config{})
	// newSampleEnv wrote: workspace.create, member.set, connection.create x2.
	e.clock.Advance(time.Minute)
	if _, err := e.svc.SetConnectionStatus(ctx, e.op, e.ws, e.queue, bus.StatusRevoked); err != nil {
		t.Fatal(err)
	}
	actions := func(p bus.AuditPage) []string {
		var out []string
		for _, a := range p.Entries {
			out = append(out, a.Action+" "+a.Target)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    bus.AuditFilter
		want int
	}{
		{"all", bus.AuditFilter{}, 5},
		{"action", bus.AuditFilter{Action: "connection.create"}, 2},
		{"target", bus.AuditFilter{Target: e.queue}, 2},
		{"actor", bus.AuditFilter{Actor: e.op.User.ID}, 5},
		{"other actor", bus.AuditFilter{Actor: e.viewer.User.ID}, 0},
		{"from", bus.AuditFilter{From: e.clock.Now()}, 1},
		{"to", bus.AuditFilter{To: e.clock.Now()}, 4},
	} {
		p, err := e.svc.SearchAudit(ctx, e.op, e.ws, tc.f, 100, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(p.Entries) != tc.want {
			t.Errorf("%s: %q, want %d entries", tc.name, actions(p), tc.want)
		}
	}
	// Pages of one.
	p1, err := e.svc.SearchAudit(ctx, e.op, e.ws, bus.AuditFilter{Target: e.queue}, 1, "")
	if err != nil || p1.NextCursor == nil || len(p1.Entries) != 1 || p1.Entries[0].Action != "connection.revoke" {
		t.Fatalf("first page %q, %v, %v", actions(p1), p1.NextCursor, err)
	}
	p2, err := e.svc.SearchAudit(ctx, e.op, e.ws, bus.AuditFilter{Target: e.queue}, 1, *p1.NextCursor)
	if err != nil || p2.NextCursor != nil || len(p2.Entries) != 1 || p2.Entries[0].Action != "connection.create" {
		t.Fatalf("second page %q, %v, %v", actions(p2), p2.NextCursor, err)
	}
	for _, tc := range []struct {
		name string
		a    *bus.Actor
		f    bus.AuditFilter
		rule string
	}{
		{"viewer", e.viewer, bus.AuditFilter{}, bus.RuleManageForbidden},
		{"control character", e.op, bus.AuditFilter{Action: "a\nb"}, bus.RuleManageBadRequest},
		{"too long", e.op, bus.AuditFilter{Target: string(make([]byte, 129))}, bus.RuleManageBadRequest},
		{"from after to", e.op, bus.AuditFilter{From: e.clock.Now(), To: e.clock.Now().Add(-time.Second)}, bus.RuleManageBadRequest},
	} {
		_, err := e.svc.SearchAudit(ctx, tc.a, e.ws, tc.f, 10, "")
		var be *bus.Error
		if !errors.As(err, &be) || be.Rule() != tc.rule {
			t.Errorf("%s: err = %v, want rule %s", tc.name, err, tc.rule)
		}
	}
}
