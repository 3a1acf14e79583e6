package httpapi_test

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
)

// deadLetterPage is one page of a dead-letter listing.
type deadLetterPage struct {
	DeadLetters []struct {
		MessageID string `json:"message_id"`
	} `json:"dead_letters"`
	NextCursor *string `json:"next_cursor"`
}

// deadLetters publishes count messages as p's producer, each its own
// story, and moves every message of p's consumer into its dead letters
// (its attempt limit is 1).
func (n *node) deadLetters(t *testing.T, p *servertest.Pair, prefix string, count int) {
	t.Helper()
	var envs []any
	for i := range count {
		envs = append(envs, servertest.Envelope(fmt.Sprintf("%s-%02d", prefix, i), fmt.Sprintf("%s-s%02d", prefix, i), nil))
	}
	if len(envs) > 0 {
		n.PublishBatch(p, envs).Must(t, 200)
	}
	for range 100 {
		var hs []string
		for _, m := range n.Receive(p, "max=10&wait=0") {
			hs = append(hs, m.ReceiptHandle)
		}
		if len(hs) == 0 {
			return
		}
		n.Settle(p, "nack", hs, nil).Must(t, 200)
	}
	t.Fatal("the dead letters never settled")
}

func deadLettersPath(ws, c string) string { return connPath(ws, c) + "/dead-letters" }

// TestDeadLetterCursorsBoundToListing: a dead-letter cursor is accepted only
// by the listing of the connection that returned it; one of another
// connection (of this workspace or another), a bare number and an altered
// cursor are 400 manage.bad_request naming cursor, on both stores. Paging
// returns every dead letter once, and a cursor stays valid when the dead
// letter it follows is redriven.
func TestDeadLetterCursorsBoundToListing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		p := n.NewPair(map[string]any{"attempt_limit": 1})
		sibling := n.AddConsumer(p, map[string]any{"attempt_limit": 1})
		stranger := n.NewPair(map[string]any{"attempt_limit": 1})
		// The sibling gets every message p gets: publish for p first, so
		// that its ids are the lower ones.
		n.deadLetters(t, p, "m", 7)
		n.deadLetters(t, sibling, "", 0) // the sibling's copies
		n.deadLetters(t, stranger, "x", 7)

		list := func(ws, c, q string) deadLetterPage {
			t.Helper()
			var page deadLetterPage
			n.do(t, "GET", deadLettersPath(ws, c)+q, opKey, nil).Must(t, 200).Decode(t, &page)
			return page
		}
		refused := func(ws, c, cursor string) {
			t.Helper()
			msg := wantRefusal(t, n.do(t, "GET", deadLettersPath(ws, c)+"?limit=2&cursor="+url.QueryEscape(cursor), opKey, nil),
				400, "manage.bad_request")
			wantMessage(t, msg, "cursor")
		}
		// Every dead letter once, page by page.
		seen := map[string]int{}
		cursor, pages := "", 0
		for ; pages < 20; pages++ {
			q := "?limit=2"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			page := list(p.WS, p.Consumer, q)
			for _, d := range page.DeadLetters {
				seen[d.MessageID]++
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		if pages+1 != 4 || len(seen) != 7 {
			t.Errorf("%d pages of %v, want 4 of 7 dead letters", pages+1, seen)
		}
		for id, k := range seen {
			if k != 1 {
				t.Errorf("%s listed %d times", id, k)
			}
		}

		mine := *list(p.WS, p.Consumer, "?limit=2").NextCursor
		theirs := *list(sibling.WS, sibling.Consumer, "?limit=2").NextCursor
		far := *list(stranger.WS, stranger.Consumer, "?limit=2").NextCursor
		if mine == theirs {
			t.Fatalf("two connections' listings gave the same cursor %q", mine)
		}
		// Each cursor on its own listing.
		for _, c := range []struct{ ws, c, cursor string }{
			{p.WS, p.Consumer, mine}, {sibling.WS, sibling.Consumer, theirs}, {stranger.WS, stranger.Consumer, far},
		} {
			if page := list(c.ws, c.c, "?limit=2&cursor="+url.QueryEscape(c.cursor)); len(page.DeadLetters) != 2 {
				t.Errorf("%s's own cursor: %+v", c.c, page)
			}
		}
		// Another connection's cursor: of this workspace, of another one.
		refused(p.WS, p.Consumer, theirs)
		refused(sibling.WS, sibling.Consumer, mine)
		refused(p.WS, p.Consumer, far)
		refused(stranger.WS, stranger.Consumer, mine)
		// A connections cursor is not a dead-letter cursor.
		var cp connPage
		n.do(t, "GET", connsPath(p.WS)+"?limit=1", opKey, nil).Must(t, 200).Decode(t, &cp)
		refused(p.WS, p.Consumer, *cp.NextCursor)
		// Made up: bare numbers, as the cursors were.
		for _, f := range []string{"0", "1", "00", "6", "17", "-1", "9223372036854775807", "MC4w"} {
			refused(p.WS, p.Consumer, f)
		}
		// Altered: every byte in turn, cut short, lengthened, padded.
		raw, err := base64.RawURLEncoding.DecodeString(mine)
		if err != nil {
			t.Fatalf("cursor %q is not base64url: %v", mine, err)
		}
		for i := range raw {
			b := append([]byte(nil), raw...)
			b[i] ^= 0x01
			refused(p.WS, p.Consumer, base64.RawURLEncoding.EncodeToString(b))
		}
		for _, f := range []string{mine[:len(mine)-1], mine + "A", base64.URLEncoding.EncodeToString(raw), strings.ToUpper(mine)} {
			if f != mine {
				refused(p.WS, p.Consumer, f)
			}
		}
		// Redriving the dead letter a cursor follows does not break it.
		first := list(p.WS, p.Consumer, "?limit=2")
		n.do(t, "POST", deadLettersPath(p.WS, p.Consumer)+"/redrive", opKey,
			map[string]any{"message_ids": []string{first.DeadLetters[1].MessageID}}).Must(t, 200)
		if rest := list(p.WS, p.Consumer, "?limit=10&cursor="+url.QueryEscape(*first.NextCursor)); len(rest.DeadLetters) != 5 {
			t.Errorf("after the redrive of the dead letter the cursor follows: %+v", rest)
		}
	})
}
