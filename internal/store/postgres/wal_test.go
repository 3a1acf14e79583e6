package postgres

// TestWALPerMessage prints the WAL the message path writes, per message and
// per relation: n single publishes, then n receives of one message, then n
// acks of one handle, each phase measured from the server's WAL between
// its start and end (pg_walinspect). Records of no relation (commits) are
// counted for the whole cluster, so run it on a quiet server. It runs only
// with SOMBUS_WAL=1:
//
//	SOMBUS_WAL=1 go test -count=1 -run TestWALPerMessage -v ./internal/store/postgres/

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

func TestWALPerMessage(t *testing.T) {
	if os.Getenv("SOMBUS_WAL") == "" {
		t.Skip("SOMBUS_WAL not set")
	}
	const n = 200
	s := OpenTest(t)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public`); err != nil {
		t.Skip("pg_walinspect:", err)
	}
	ws, q := benchQueue(t, s)
	producer := bus.NewID(bus.PrefixConnection)
	payload := strings.Repeat("x", 1024)
	names := map[string]string{}
	relNames := func() {
		rows, err := s.pool.Query(ctx, `SELECT c.relfilenode::text, c.relname FROM pg_class c
			WHERE c.relnamespace = current_schema()::regnamespace AND c.relfilenode <> 0`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var f, name string
			if err := rows.Scan(&f, &name); err != nil {
				t.Fatal(err)
			}
			names[f] = name
		}
	}
	lsn := func() string {
		var l string
		if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	re := regexp.MustCompile(`blkref #0: rel \d+/\d+/(\d+)`)
	report := func(phase, from, to string) {
		relNames()
		rows, err := s.pool.Query(ctx, `SELECT resource_manager, record_type, record_length, fpi_length, coalesce(block_ref, '')
			FROM public.pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`, from, to)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		type agg struct{ recs, bytes, fpi int }
		by := map[string]*agg{}
		var total agg
		for rows.Next() {
			var rm, typ, ref string
			var length, fpi int
			if err := rows.Scan(&rm, &typ, &length, &fpi, &ref); err != nil {
				t.Fatal(err)
			}
			rel := "-"
			if m := re.FindStringSubmatch(ref); m != nil {
				if name, ok := names[m[1]]; ok {
					rel = name
				} else {
					continue // another schema's relation
				}
			}
			k := fmt.Sprintf("%-28s %-10s %s", rel, rm, typ)
			a := by[k]
			if a == nil {
				a = &agg{}
				by[k] = a
			}
			a.recs++
			a.bytes += length
			a.fpi += fpi
			total.recs++
			total.bytes += length
			total.fpi += fpi
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Logf("%s: %.1f records, %.0f bytes (%.0f of page images) per message", phase,
			float64(total.recs)/n, float64(total.bytes)/n, float64(total.fpi)/n)
		for _, k := range keys {
			a := by[k]
			t.Logf("  %s  %5.2f rec  %6.0f B  (%d fpi B total)", k, float64(a.recs)/n, float64(a.bytes)/n, a.fpi)
		}
	}
	// Warm up: a few messages through so the first page writes are done.
	publish := func(i int) {
		mid := fmt.Sprintf("m-%d", i)
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Now: time.Now(),
			DedupWindow: bus.DedupWindow, Messages: []bus.PublishMessage{{MessageID: mid, MessageType: "story.context",
				Topic: "som.story.context", CorrelationID: fmt.Sprintf("story-%d", i),
				Envelope: []byte(`{"message_id":"` + mid + `","payload":{"data":"` + payload + `"}}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(count int, ack bool) []bus.Handle {
		var hs []bus.Handle
		for range count {
			r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Minute, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Deliveries) != 1 {
				t.Fatalf("received %d", len(r.Deliveries))
			}
			hs = append(hs, r.Deliveries[0].Handle)
		}
		if ack {
			for _, h := range hs {
				if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{h}, Now: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return hs
	}
	for i := range 20 {
		publish(-1 - i)
	}
	drain(20, true)

	a := lsn()
	for i := range n {
		publish(i)
	}
	b := lsn()
	hs := drain(n, false)
	c := lsn()
	for _, h := range hs {
		if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{h}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	d := lsn()
	report("publish", a, b)
	report("receive", b, c)
	report("ack", c, d)
}
