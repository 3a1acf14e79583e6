package httpapi_test

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// connPage is one page of the connections listing.
type connPage struct {
	Connections []conn  `json:"connections"`
	NextCursor  *string `json:"next_cursor"`
}

// connectionPages lists a workspace's connections page by page with query
// (limit, kind) and returns them and the number of pages.
func (n *node) connectionPages(t testing.TB, ws string, q url.Values) ([]conn, int) {
	t.Helper()
	var all []conn
	for pages := 1; pages < 1000; pages++ {
		var p connPage
		n.do(t, "GET", connsPath(ws)+"?"+q.Encode(), opKey, nil).Must(t, 200).Decode(t, &p)
		all = append(all, p.Connections...)
		if p.NextCursor == nil {
			return all, pages
		}
		q.Set("cursor", *p.NextCursor)
	}
	t.Fatal("connection paging does not end")
	return nil, 0
}

// TestConnectionsPaging: the connections listing pages with limit and an
// opaque cursor; the pages cover every connection once, oldest first, with
// the queue counts a single read shows; the default page holds up to 100.
func TestConnectionsPaging(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		ws := n.workspace(t, opKey, "paging")
		var made []string
		var consumers []string
		for i := range 7 {
			kind := "consumer"
			if i%3 == 1 {
				kind = "producer"
			}
			c := n.connection(t, ws, kind, map[string]any{"name": "c" + string(rune('0'+i))})
			made = append(made, c.ID)
			if kind == "consumer" {
				consumers = append(consumers, c.ID)
			}
		}
		// The first page without a limit is what clients saw before paging:
		// everything, oldest first, and no cursor.
		var first connPage
		r := n.do(t, "GET", connsPath(ws), opKey, nil).Must(t, 200)
		r.Decode(t, &first)
		if len(first.Connections) != 7 || first.NextCursor != nil || first.Connections[0].ID != made[0] {
			t.Fatalf("default page: %s", r.Body)
		}
		if m := r.JSON(t); m["next_cursor"] != nil || len(m) != 2 {
			t.Errorf("the last page's next_cursor is not null: %s", r.Body)
		}
		byID := map[string]conn{}
		for _, c := range first.Connections {
			byID[c.ID] = c
		}
		for _, c := range []struct {
			q     url.Values
			want  []string
			pages int
		}{
			{url.Values{"limit": {"1"}}, made, 7},
			{url.Values{"limit": {"3"}}, made, 3},
			{url.Values{"limit": {"7"}}, made, 1},
			{url.Values{"limit": {"100"}}, made, 1},
			{url.Values{"limit": {"2"}, "kind": {"consumer"}}, consumers, 3},
			{url.Values{"limit": {"1"}, "kind": {"producer"}}, []string{made[1], made[4]}, 2},
		} {
			got, pages := n.connectionPages(t, ws, c.q)
			var ids []string
			for _, g := range got {
				ids = append(ids, g.ID)
				// Counts and fields are those of the unpaged answer.
				if want := byID[g.ID]; g.Name != want.Name || g.Kind != want.Kind || (g.Ready == nil) != (want.Ready == nil) ||
					g.Ready != nil && *g.Ready != *want.Ready {
					t.Errorf("%v: %+v, want %+v", c.q, g, want)
				}
			}
			if !slices.Equal(ids, c.want) || pages != c.pages {
				t.Errorf("%v: %d pages of %q, want %d of %q", c.q, pages, ids, c.pages, c.want)
			}
		}
		// A removed connection does not break a cursor that stands on it.
		var p connPage
		n.do(t, "GET", connsPath(ws)+"?limit=2", opKey, nil).Must(t, 200).Decode(t, &p)
		n.do(t, "DELETE", connPath(ws, made[1]), opKey, nil).Must(t, 204)
		n.do(t, "GET", connsPath(ws)+"?limit=10&cursor="+url.QueryEscape(*p.NextCursor), opKey, nil).Must(t, 200).Decode(t, &p)
		if len(p.Connections) != 5 || p.Connections[0].ID != made[2] {
			t.Errorf("after a removed connection: %+v", p.Connections)
		}
		for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?limit=1&limit=2", "?cursor=bogus", "?cursor=" + made[0],
			"?kind=robot", "?page=2"} {
			wantRefusal(t, n.do(t, "GET", connsPath(ws)+q, opKey, nil), 400, "manage.bad_request")
		}
	})
}

// TestConnectionCursorsBoundToListing: a connections cursor is accepted only
// by the listing that returned it (its workspace and its kind filter); one
// of another workspace or kind, a made-up one and an altered one are 400
// manage.bad_request naming cursor, on both stores.
func TestConnectionCursorsBoundToListing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		ws, other := n.workspace(t, opKey, "mine"), n.workspace(t, opKey, "theirs")
		var mine []string
		for _, w := range []string{ws, other} {
			for i, kind := range []string{"consumer", "producer", "consumer", "producer"} {
				c := n.connection(t, w, kind, map[string]any{"name": kind + string(rune('0'+i))})
				if w == ws {
					mine = append(mine, c.ID)
				}
			}
		}
		next := func(w string, q string) string {
			t.Helper()
			var p connPage
			n.do(t, "GET", connsPath(w)+"?limit=1"+q, opKey, nil).Must(t, 200).Decode(t, &p)
			if p.NextCursor == nil {
				t.Fatalf("no next_cursor for %s%s", w, q)
			}
			return *p.NextCursor
		}
		refused := func(w, q string) {
			t.Helper()
			msg := wantRefusal(t, n.do(t, "GET", connsPath(w)+q, opKey, nil), 400, "manage.bad_request")
			wantMessage(t, msg, "cursor")
		}
		all, consumers, producers := next(ws, ""), next(ws, "&kind=consumer"), next(ws, "&kind=producer")
		// Each cursor still works on its own listing.
		for _, c := range []struct{ q, want string }{
			{"&cursor=" + url.QueryEscape(all), mine[1]},
			{"&kind=consumer&cursor=" + url.QueryEscape(consumers), mine[2]},
			{"&kind=producer&cursor=" + url.QueryEscape(producers), mine[3]},
		} {
			var p connPage
			n.do(t, "GET", connsPath(ws)+"?limit=1"+c.q, opKey, nil).Must(t, 200).Decode(t, &p)
			if len(p.Connections) != 1 || p.Connections[0].ID != c.want {
				t.Errorf("%s: %+v, want %s", c.q, p.Connections, c.want)
			}
		}
		// Another workspace's cursors, of every kind.
		for _, q := range []string{"", "&kind=consumer", "&kind=producer"} {
			refused(ws, "?limit=1"+q+"&cursor="+url.QueryEscape(next(other, q)))
		}
		// Another kind's cursors in this workspace.
		for _, c := range []struct{ q, cursor string }{
			{"", consumers}, {"", producers},
			{"&kind=consumer", all}, {"&kind=consumer", producers},
			{"&kind=producer", all}, {"&kind=producer", consumers},
		} {
			refused(ws, "?limit=1"+c.q+"&cursor="+url.QueryEscape(c.cursor))
		}
		// Made-up cursors: positions written by hand, in the old form too.
		forged := []string{
			"MC4w", // "0.0"
			base64.RawURLEncoding.EncodeToString([]byte("9223372036854775807.9223372036854775807")),
			base64.RawURLEncoding.EncodeToString([]byte("c\x00\x00")),
		}
		// Altered cursors: every byte of a real one changed in turn, cut
		// short, lengthened, or re-encoded with padding.
		raw, err := base64.RawURLEncoding.DecodeString(all)
		if err != nil {
			t.Fatalf("cursor %q is not base64url: %v", all, err)
		}
		for i := range raw {
			b := append([]byte(nil), raw...)
			b[i] ^= 0x01
			forged = append(forged, base64.RawURLEncoding.EncodeToString(b))
		}
		forged = append(forged, all[:len(all)-1], all+"A", base64.URLEncoding.EncodeToString(raw), strings.ToUpper(all))
		for _, f := range forged {
			if f == all {
				continue
			}
			refused(ws, "?limit=1&cursor="+url.QueryEscape(f))
		}
	})
}
