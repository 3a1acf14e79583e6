package storetest

import (
	"slices"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var auditSearchTests = []test{
	{"Filters", testAuditSearchFilters},
	{"Paging", testAuditSearchPaging},
}

func (e *env) auditSearch(q bus.AuditQuery) []string {
	e.t.Helper()
	var got []string
	e.view(func(tx bus.Tx) error {
		es, err := tx.AuditSearch(q)
		for _, a := range es {
			got = append(got, a.ID)
		}
		return err
	})
	return got
}

// testAuditSearchFilters: each filter keeps only the matching entries of
// the workspace, newest first by insertion; filters combine; the time range
// holds From and not To.
func testAuditSearchFilters(e *env) {
	ws, other := e.workspace(), e.workspace()
	type row struct {
		actor, action, target string
		at                    time.Duration
	}
	rows := []row{
		{"u-a", "connection.create", "c-1", 0},
		{"u-b", "connection.create", "c-2", time.Minute},
		{"u-a", "secret.rotate", "c-1", 2 * time.Minute},
		{"u-b", "secret.rotate", "c-1", 3 * time.Minute},
		{"u-a", "connection.remove", "c-2", 4 * time.Minute},
	}
	var ids []string
	for _, r := range rows {
		a := auditEntry(ws, r.action, at(r.at))
		a.Actor, a.Target = r.actor, r.target
		o := auditEntry(other, r.action, at(r.at))
		o.Actor, o.Target = r.actor, r.target
		e.update(func(tx bus.Tx) error {
			if err := tx.AuditInsert(a); err != nil {
				return err
			}
			return tx.AuditInsert(o)
		})
		ids = append(ids, a.ID)
	}
	pick := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    bus.AuditQuery
		want []string
	}{
		{"none", bus.AuditQuery{}, pick(4, 3, 2, 1, 0)},
		{"actor", bus.AuditQuery{Actor: "u-a"}, pick(4, 2, 0)},
		{"action", bus.AuditQuery{Action: "secret.rotate"}, pick(3, 2)},
		{"target", bus.AuditQuery{Target: "c-2"}, pick(4, 1)},
		{"actor and target", bus.AuditQuery{Actor: "u-b", Target: "c-1"}, pick(3)},
		{"from", bus.AuditQuery{From: at(2 * time.Minute)}, pick(4, 3, 2)},
		{"to", bus.AuditQuery{To: at(2 * time.Minute)}, pick(1, 0)},
		{"from and to", bus.AuditQuery{From: at(time.Minute), To: at(3 * time.Minute)}, pick(2, 1)},
		{"everything", bus.AuditQuery{Actor: "u-a", Action: "secret.rotate", Target: "c-1", From: at(time.Minute), To: at(time.Hour)}, pick(2)},
		{"no match", bus.AuditQuery{Actor: "u-nobody"}, nil},
		{"limit", bus.AuditQuery{Actor: "u-a", Limit: 2}, pick(4, 2)},
	} {
		tc.q.WorkspaceID = ws
		if got := e.auditSearch(tc.q); !slices.Equal(got, tc.want) {
			e.t.Errorf("AuditSearch %s = %q, want %q", tc.name, got, tc.want)
		}
	}
	// The listing without filters is AuditList's.
	var list []string
	e.view(func(tx bus.Tx) error {
		es, err := tx.AuditList(ws, 0, "")
		for _, a := range es {
			list = append(list, a.ID)
		}
		return err
	})
	if !slices.Equal(list, pick(4, 3, 2, 1, 0)) {
		e.t.Errorf("AuditList = %q", list)
	}
}

// testAuditSearchPaging: pages of a filtered listing continue after the
// last entry of the previous page and cover every match once; a cursor of
// another workspace gives an empty page.
func testAuditSearchPaging(e *env) {
	ws, other := e.workspace(), e.workspace()
	var want []string
	for i := range 9 {
		a := auditEntry(ws, "keep", at(time.Duration(i)*time.Second))
		if i%3 == 1 {
			a.Action = "skip"
		}
		e.update(func(tx bus.Tx) error { return tx.AuditInsert(a) })
		if a.Action == "keep" {
			want = append([]string{a.ID}, want...)
		}
	}
	var got []string
	before := ""
	for range 10 {
		page := e.auditSearch(bus.AuditQuery{WorkspaceID: ws, Action: "keep", Limit: 4, Before: before})
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		before = page[len(page)-1]
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("pages = %q, want %q", got, want)
	}
	o := auditEntry(other, "keep", T0)
	e.update(func(tx bus.Tx) error { return tx.AuditInsert(o) })
	if page := e.auditSearch(bus.AuditQuery{WorkspaceID: ws, Action: "keep", Before: o.ID}); len(page) != 0 {
		e.t.Errorf("a cursor of another workspace gave %q", page)
	}
}
